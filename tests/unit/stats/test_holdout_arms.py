"""The holdout's comparison: a known difference is found, none is not claimed, few sessions say so."""

from __future__ import annotations

import random

from proxy.stats._holdout import FIGURES, MIN_SESSIONS, SessionOutcome, compare


def sessions(arm: str, n: int, *, cost: float, seed: int, repeats: float = 0.0) -> list[SessionOutcome]:
    rng = random.Random(seed)
    return [
        SessionOutcome(
            arm,
            turns=rng.randint(5, 40),
            cost=max(0.0, rng.gauss(cost, cost / 3)),
            repeated_calls=int(rng.random() < repeats),
            finish="stop",
        )
        for _ in range(n)
    ]


def test_a_known_difference_is_found():
    got = compare(sessions("control", 200, cost=1.0, seed=1) + sessions("managed", 200, cost=0.6, seed=2))
    cost = got.of("cost")
    assert got.enough and got.control_sessions == got.managed_sessions == 200
    assert cost.verdict == "managed lower" and cost.low < cost.difference < cost.high < 0
    assert abs(cost.difference + 0.4) < 0.1 and abs(cost.relative + 0.4) < 0.1


def test_no_difference_is_not_claimed():
    got = compare(sessions("control", 200, cost=1.0, seed=3) + sessions("managed", 200, cost=1.0, seed=4))
    assert got.of("cost").verdict == "no difference found" and got.of("cost").low < 0 < got.of("cost").high
    assert got.of("ended").verdict == "no difference found" and got.of("ended").control == 1.0
    assert {d.figure for d in got.differences} == set(FIGURES)


def test_repeated_calls_rising_in_the_managed_arm_are_found():
    got = compare(
        sessions("control", 300, cost=1.0, seed=5, repeats=0.05)
        + sessions("managed", 300, cost=1.0, seed=6, repeats=0.4)
    )
    assert got.of("repeated_calls").verdict == "managed higher"


def test_too_few_sessions_say_so_whatever_the_difference():
    few = sessions("control", MIN_SESSIONS - 1, cost=1.0, seed=7) + sessions("managed", 100, cost=0.1, seed=8)
    got = compare(few)
    assert not got.enough and all(d.verdict == "too few sessions" for d in got.differences)
    empty = compare(sessions("managed", 10, cost=1.0, seed=9))
    assert empty.control_sessions == 0 and empty.of("cost").low == empty.of("cost").high == 0.0


def test_deterministic_for_a_seed():
    data = sessions("control", 60, cost=1.0, seed=10) + sessions("managed", 60, cost=0.9, seed=11)
    assert compare(data, seed=3) == compare(data, seed=3)
