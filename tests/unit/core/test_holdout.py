"""The holdout's arms: stable, near the fraction asked, apart per tenant."""

from __future__ import annotations

from proxy.core.holdout import arm, position


def test_the_arm_is_a_function_of_the_session_alone():
    assert arm("t1", "s-42", 0.5) == arm("t1", "s-42", 0.5)
    assert arm("t1", "s-42", 0.0) is None and arm("t1", None, 0.5) is None and arm("t1", "", 0.5) is None
    assert arm("t1", "s-42", 1.0) == "control"


def test_the_control_share_is_near_the_fraction_and_grows_with_it():
    sessions = [f"session-{i}" for i in range(20_000)]
    share = sum(arm("t1", s, 0.1) == "control" for s in sessions) / len(sessions)
    assert 0.09 < share < 0.11
    # a session in control at 0.1 stays in control at 0.2: raising the holdout moves sessions one way
    assert all(arm("t1", s, 0.2) == "control" for s in sessions if arm("t1", s, 0.1) == "control")


def test_tenants_and_salts_draw_their_own_split():
    sessions = [f"s{i}" for i in range(2000)]
    a = [arm("t1", s, 0.5) for s in sessions]
    assert a != [arm("t2", s, 0.5) for s in sessions]
    assert a != [arm("t1", s, 0.5, salt="new split") for s in sessions]
    assert all(0 <= position("t", s) < 1 for s in sessions)
