"""`--turn-gaps`: the replay's clock, parsed and drawn reproducibly; a trace's own timestamps."""

from __future__ import annotations

import pytest

from proxy.replay import gaps


def test_fixed_gaps_and_durations():
    assert gaps.parse("30s").times(4) == [0, 30, 60, 90]
    assert gaps.parse("90").times(2) == [0, 90] and gaps.parse("5m").times(2) == [0, 300]
    assert gaps.parse("1h").times(2) == [0, 3600] and gaps.parse("250ms").times(2) == [0, 0.25]
    assert gaps.parse("0").times(3) == [0, 0, 0]
    assert gaps.parse("30s").times(0) == []


def test_a_mix_has_idle_pauses_at_its_rate_reproducibly():
    mix = gaps.parse("mix:30s,0.1@600s")
    times = mix.times(5001, seed=7, index=2)
    steps = [b - a for a, b in zip(times, times[1:])]
    assert set(steps) == {30, 600}
    assert 0.08 < steps.count(600) / len(steps) < 0.12
    assert mix.times(50, seed=7, index=2) == times[:50]  # the same seed and conversation: the same clock
    assert mix.times(50, seed=8, index=2) != times[:50] and mix.times(50, seed=7, index=3) != times[:50]
    two = gaps.parse("mix:10s,0.5@1m,0.5@2h").times(400)
    assert {b - a for a, b in zip(two, two[1:])} == {60, 7200}


def test_exponential_gaps_have_their_mean():
    times = gaps.parse("exp:40s").times(20001, seed=1)
    assert 37 < times[-1] / 20000 < 43


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "soon",
        "-5s",
        "30x",
        "mix:30s,0.1",
        "mix:30s,1.5@60s",
        "mix:30s,x@60s",
        "mix:30s,0.6@60s,0.6@70s",
        "exp:",
        "8d",
        "mix:30s,0.1@forever",
    ],
)
def test_bad_specs_say_what_is_expected(spec):
    with pytest.raises(gaps.GapsError):
        gaps.parse(spec)


def test_trace_timestamps_win_when_every_turn_has_one():
    messages = [
        {"role": "system"},
        {"role": "user", "timestamp": 1000},
        {"role": "assistant"},
        {"role": "tool", "timestamp": "1970-01-01T00:20:00Z"},
        {"role": "assistant"},
    ]
    assert gaps.trace_times(messages, [2, 4]) == [0, 200]
    assert gaps.trace_times([{"role": "user"}, {"role": "assistant"}], [1]) is None
    backwards = [
        {"role": "user", "timestamp": 50},
        {"role": "assistant"},
        {"role": "user", "timestamp": 10},
        {"role": "assistant"},
    ]
    assert gaps.trace_times(backwards, [1, 3]) is None
    assert gaps.trace_times([{"role": "user", "timestamp": True}, {"role": "assistant"}], [1]) is None
