"""The cheapest summary schedule for a summariser's latency (proxy.replay._latency_bound)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.replay._latency_bound import NONE, Turn, call_cost, current_policy, lower_bound


def growing(n: int, *, step: int = 100, trigger: int = 500) -> list[Turn]:
    """n turns; turn j forwards a head of 1 item (50 tokens) and j + 2 items of `step` tokens,
    the last two the kept tail."""
    return [Turn([50] + [step] * (j + 2), 1, j + 1, trigger) for j in range(n)]


def test_no_summary_needed_costs_the_raw_history():
    turns = growing(3, trigger=10_000)
    schedule = lower_bound(turns, lag=1, summary_tokens=10)
    # 250, then 0.1 x 250 + 100, then 0.1 x 350 + 100
    assert schedule.cuts == (NONE, NONE, NONE)
    assert schedule.compressions == 0
    assert abs(schedule.cost - (250 + 125 + 135)) < 1e-9
    assert current_policy(turns, lag=1, summary_tokens=10).cost == schedule.cost
    assert lower_bound(turns, lag=1, summary_tokens=10, limit=1_000).cost == schedule.cost


def test_the_bound_is_below_the_policy_and_grows_with_the_lag():
    turns = growing(40)
    costs = [lower_bound(turns, lag=lag, summary_tokens=30).cost for lag in (1, 2, 4)]
    assert costs[0] <= costs[1] <= costs[2]
    for lag in (1, 2, 4):  # the policy lets a turn above the trigger while its summary is made: bounded by the limit
        bound = lower_bound(turns, lag=lag, summary_tokens=30, limit=10_000)
        assert bound.cost <= current_policy(turns, lag=lag, summary_tokens=30).cost + 1e-9


def test_within_the_trigger_costs_more_than_within_a_hard_limit():
    turns = growing(40)
    assert (
        lower_bound(turns, lag=3, summary_tokens=30).cost
        >= lower_bound(turns, lag=3, summary_tokens=30, limit=2_000).cost
    )


def test_every_window_stays_within_the_trigger_and_summaries_are_used_lag_turns_late():
    turns = growing(40)
    for lag in (1, 3):
        schedule = lower_bound(turns, lag=lag, summary_tokens=30)
        for j, cut in enumerate(schedule.cuts):
            start = turns[j].head if cut == NONE else turns[cut].tail
            assert sum(turns[j].tokens[start : turns[j].tail]) <= turns[j].trigger
            assert cut == NONE or j - cut >= lag


def test_a_penalty_per_compression_gives_fewer_compressions():
    turns = growing(60)
    free = lower_bound(turns, lag=2, summary_tokens=30)
    fewer = lower_bound(turns, lag=2, summary_tokens=30, per_compression=5_000)
    assert fewer.compressions <= free.compressions
    assert fewer.cost >= free.cost


def test_the_policy_starts_a_summary_at_the_ratio_and_uses_it_lag_turns_later():
    turns = growing(12)  # the window after the head: j x 100 on turn j; 0.8 x 500 reached on turn 4
    one, three = current_policy(turns, lag=1, summary_tokens=30), current_policy(turns, lag=3, summary_tokens=30)
    assert one.cuts[:6] == (NONE,) * 6  # within the trigger: the history goes whole
    assert one.cuts[6:] == (4,) * 3 + (8,) * 3  # the summary started on turn 4, then the one started on turn 8
    assert three.cuts[6] == NONE and three.cuts[7] == 4  # started on turn 4, usable from turn 7


def test_a_call_reads_its_prefix_and_writes_what_the_turn_added():
    turns = growing(3)
    assert abs(call_cost(turns, 2, summary_tokens=30, ratio=0.8) - (0.1 * (50 + 30 + 400) + 100)) < 1e-9


def test_no_turns_cost_nothing_and_a_negative_lag_is_refused():
    """No turns (a conversation with no assistant turn): lower_bound took min() of no states
    (ValueError), as bench/summary_latency.py did on such a trace; a negative lag indexed turns
    not yet reached (IndexError)."""
    assert lower_bound([], lag=1, summary_tokens=10) == current_policy([], lag=1, summary_tokens=10)
    assert lower_bound([], lag=1, summary_tokens=10).cost == 0.0
    for schedule in (lower_bound, current_policy):
        with pytest.raises(ValueError, match="lag"):
            schedule(growing(3), lag=-1, summary_tokens=10)


def test_summary_latency_says_what_is_wrong_with_its_input(tmp_path):
    """bench/summary_latency.py on odd input: an error naming it, not a traceback."""
    root = Path(__file__).resolve().parents[3]
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({"id": "one", "messages": [{"role": "user", "content": "hi"}]}) + "\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for args, said in (
        (["--traces", str(one)], "no turn to compare"),
        (["--traces", str(empty)], "no conversations"),
        (["--traces", str(one), "--longest", "0"], "--longest"),
        (["--traces", str(one), "--lags=-1"], "--lags"),
    ):
        done = subprocess.run(
            [sys.executable, str(root / "bench" / "summary_latency.py"), *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=root,
        )
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
