"""The replay's bill: raw and forwarded bodies billed by the provider-cache model on a clock.

`--turn-gaps`: the replay's clock, parsed and drawn reproducibly; a trace's own timestamps.
"""

from __future__ import annotations

import pytest

from proxy.core import prompt_cache as ka
from proxy.core import prompt_cache as pc
from proxy.replay import _bill as bill

SYSTEM = "rules " * 2000


def body(n: int, *, system: str = SYSTEM) -> dict:
    messages: list[dict] = []
    for i in range(n):
        messages += [
            {"role": "user", "content": f"question {i} " + "word " * 300},
            {"role": "assistant", "content": [{"type": "text", "text": f"answer {i}"}]},
        ]
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 10,
        "system": system,
        "messages": [*messages, {"role": "user", "content": "next"}],
    }


def tokens(text: str) -> int:
    return max(1, len(text) // 4)


def biller(profile: pc.Profile = pc.ANTHROPIC, format: str = "anthropic") -> bill.Biller:
    return bill.Biller(profile, format=format, tokens=tokens)


def test_stripped_removes_every_cache_control():
    marked = {
        "cache_control": {"type": "ephemeral"},
        "system": [{"type": "text", "text": "x", "cache_control": {}}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "content": [{"type": "text", "text": "y", "cache_control": {"type": "ephemeral"}}],
                    }
                ],
            }
        ],
    }
    assert "cache_control" not in repr(bill.stripped(marked))
    assert bill.stripped({"a": [1, {"b": 2}]}) == {"a": [1, {"b": 2}]}


def test_the_five_figures_of_a_conversation_turned_with_short_gaps():
    raw = [body(n) for n in range(1, 6)]
    got = bill.replayed(biller(), times=[0, 30, 60, 90, 120], raw=raw, forwarded=raw, summaries=[])
    total = sum(x.tokens for b in raw for x in biller().request(bill.Sent(0, b), caching=None).blocks)
    assert got["raw_uncached"] == total == got["proxy_uncached"]  # Anthropic: nothing cached unless asked
    # the same bodies with the proxy's caching: the first turn written (1.25 x), then mostly read
    assert got["raw_cached"] == got["proxy_cached"] < 0.65 * total
    assert got["floor"] < got["raw_cached"]
    assert set(got["strategies"]) == set(bill.MARKERS)
    assert got["strategies"]["system+automatic"] == pytest.approx(got["proxy_cached"])
    billed = got["proxy_billed"]
    assert billed["read"] > billed["write_5m"] > 0 and billed["write_1h"] == 0


def test_idle_pauses_longer_than_the_ttl_cost_writes_again():
    raw = [body(n) for n in range(1, 6)]
    short = bill.replayed(biller(), times=[0, 30, 60, 90, 120], raw=raw, forwarded=raw, summaries=[])
    idle = bill.replayed(biller(), times=[0, 400, 800, 1200, 1600], raw=raw, forwarded=raw, summaries=[])
    assert idle["proxy_cached"] > short["proxy_cached"] and idle["raw_uncached"] == short["raw_uncached"]
    assert idle["proxy_billed"]["read"] == 0


def test_a_summary_call_shares_the_turns_cache():
    raw = [body(n) for n in range(1, 4)]
    summary = {
        **raw[1],
        "messages": [*raw[1]["messages"], {"role": "user", "content": [{"type": "text", "text": "summarise"}]}],
    }
    alone = bill.replayed(biller(), times=[0, 30, 60], raw=raw, forwarded=raw, summaries=[])
    both = bill.replayed(biller(), times=[0, 30, 60], raw=raw, forwarded=raw, summaries=[(1, summary)])
    extra = both["proxy_cached"] - alone["proxy_cached"]
    summary_tokens = sum(b.tokens for b in biller().request(bill.Sent(0, summary), caching=None).blocks)
    assert 0 < extra < 0.4 * summary_tokens  # read from the turn's cache, the instruction written


def test_openai_caches_without_being_asked_and_summed_ratios():
    chat = [
        {
            "model": "gpt-5",
            "messages": [
                {"role": "system", "content": SYSTEM},
                *[{"role": "user", "content": f"q{i} " + "w " * 500} for i in range(n)],
            ],
        }
        for n in range(1, 4)
    ]
    got = bill.replayed(biller(pc.OPENAI, "chat"), times=[0, 10, 20], raw=chat, forwarded=chat, summaries=[])
    assert got["proxy_uncached"] == got["proxy_cached"] == got["raw_cached"] < got["raw_uncached"]
    summed = bill.summed([got, got])
    assert summed["raw_uncached"] == 2 * got["raw_uncached"] and summed["ratios"]["raw_uncached"] == 1.0
    assert summed["above_raw"] == 0 and summed["proxy_vs_raw_cached"] == pytest.approx(1.0)
    assert "0 conversation(s) billed above" in bill.table(summed, pricing="openai", gaps="30s")


def test_explicit_marks_put_at_most_four_breakpoints():
    summarised = {
        **body(3),
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "[offloaded history: ref=abc] the plan"}]},
            *body(3)["messages"][1:],
        ],
    }
    request = biller().request(bill.Sent(0, summarised), caching=bill.explicit_marks)
    assert len(pc.breakpoints(pc.ANTHROPIC, request)) == 3 and request.automatic is None


LIMITS = ka.Limits(min_tokens=1000, max_pings=3, idle=900.0, ttl=300.0)


def test_keepalive_pings_fall_in_idle_pauses_and_after_the_last_turn():
    times = [0.0, 30.0, 630.0, 660.0]  # a 600 s pause after the second turn
    got = bill.keepalive_pings(times=times, tokens=[5000] * 4, limits=LIMITS, profile=pc.ANTHROPIC)
    lead = LIMITS.lead
    assert [(p.at, p.turn) for p in got] == [
        (30 + 300 - lead, 1),
        (30 + 2 * (300 - lead), 1),  # the pause: the second turn's prefix, twice
        (660 + 300 - lead, 3),
        (660 + 2 * (300 - lead), 3),
        (660 + 3 * (300 - lead), 3),
    ]  # the end: until the limits
    assert bill.keepalive_pings(times=times, tokens=[500] * 4, limits=LIMITS, profile=pc.ANTHROPIC) == []
    short = [0.0, 30.0, 60.0]
    assert [
        p.turn for p in bill.keepalive_pings(times=short, tokens=[5000] * 3, limits=LIMITS, profile=pc.ANTHROPIC)
    ] == [2, 2, 2]


def test_pings_keep_the_cache_warm_over_a_pause_and_are_billed():
    raw = [body(n) for n in range(1, 5)]
    times = [0.0, 30.0, 630.0, 660.0]
    pings = bill.keepalive_pings(times=times, tokens=[6000] * 4, limits=LIMITS, profile=pc.ANTHROPIC)
    sweep = {1000: pings, 10**9: []}
    got = bill.replayed(biller(), times=times, raw=raw, forwarded=raw, summaries=[], pings=pings, sweep=sweep)
    assert got["pings"] == len(pings) == 5
    assert got["proxy_keepalive"] < got["proxy_cached"]  # the third turn read, not rewrote, its prefix
    assert got["keepalive_sweep"] == {"1000": got["proxy_keepalive"], str(10**9): pytest.approx(got["proxy_cached"])}
    assert bill.summed([got])["keepalive_vs_cached"] == pytest.approx(got["proxy_keepalive"] / got["proxy_cached"])
    # the pings are billed: each a read of the prefix and its output
    quiet = bill.replayed(biller(), times=times, raw=raw, forwarded=raw, summaries=[], pings=pings[:2])
    assert quiet["proxy_keepalive"] < got["proxy_keepalive"]


def test_fixed_gaps_and_durations():
    assert bill.parse("30s").times(4) == [0, 30, 60, 90]
    assert bill.parse("90").times(2) == [0, 90] and bill.parse("5m").times(2) == [0, 300]
    assert bill.parse("1h").times(2) == [0, 3600] and bill.parse("250ms").times(2) == [0, 0.25]
    assert bill.parse("0").times(3) == [0, 0, 0]
    assert bill.parse("30s").times(0) == []


def test_a_mix_has_idle_pauses_at_its_rate_reproducibly():
    mix = bill.parse("mix:30s,0.1@600s")
    times = mix.times(5001, seed=7, index=2)
    steps = [b - a for a, b in zip(times, times[1:])]
    assert set(steps) == {30, 600}
    assert 0.08 < steps.count(600) / len(steps) < 0.12
    assert mix.times(50, seed=7, index=2) == times[:50]  # the same seed and conversation: the same clock
    assert mix.times(50, seed=8, index=2) != times[:50] and mix.times(50, seed=7, index=3) != times[:50]
    two = bill.parse("mix:10s,0.5@1m,0.5@2h").times(400)
    assert {b - a for a, b in zip(two, two[1:])} == {60, 7200}


def test_exponential_gaps_have_their_mean():
    times = bill.parse("exp:40s").times(20001, seed=1)
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
    with pytest.raises(bill.GapsError):
        bill.parse(spec)


def test_trace_timestamps_win_when_every_turn_has_one():
    messages = [
        {"role": "system"},
        {"role": "user", "timestamp": 1000},
        {"role": "assistant"},
        {"role": "tool", "timestamp": "1970-01-01T00:20:00Z"},
        {"role": "assistant"},
    ]
    assert bill.trace_times(messages, [2, 4]) == [0, 200]
    assert bill.trace_times([{"role": "user"}, {"role": "assistant"}], [1]) is None
    backwards = [
        {"role": "user", "timestamp": 50},
        {"role": "assistant"},
        {"role": "user", "timestamp": 10},
        {"role": "assistant"},
    ]
    assert bill.trace_times(backwards, [1, 3]) is None
    assert bill.trace_times([{"role": "user", "timestamp": True}, {"role": "assistant"}], [1]) is None
