"""The replay's simulation: the summariser's requests recorded per turn, its delay, the latency report.

The replay's bill: raw and forwarded bodies billed by the provider-cache model on a clock.

`--turn-gaps`: the replay's clock, parsed and drawn reproducibly; a trace's own timestamps.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json

import httpx2
import pytest

from proxy.config import ServerSettings
from proxy.core import prompt_cache as ka
from proxy.core import prompt_cache as pc
from proxy.core.settings import OffloadSettings
from proxy.offload.summarizer import DEFAULT_PROMPT
from proxy.replay import _simulation as bill
from proxy.replay._cli import add_format_argument
from proxy.replay._report import report_dict, table
from proxy.replay._runner import Replayer, replay_namespace, requests_of, upstream_for
from proxy.replay._simulation import SummaryRecorder, fake_summarizer, recording, request_items
from proxy.store.sqlite import SQLiteStore
from proxy.upstream.client import Upstream
from tests.unit.replay.test_runner import conversation

pytestmark = pytest.mark.anyio

URL = "http://fake-summariser.invalid/v1/chat/completions"
BODY = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "Summarise."},
        {"role": "user", "content": "[user]\nfix it\n\n[tool]\nerror: boom"},
    ],
}


async def send(transport: httpx2.AsyncBaseTransport, body: dict, url: str = URL) -> httpx2.Response:
    return await transport.handle_async_request(httpx2.Request("POST", url, json=body))


async def test_the_fake_summariser_answers_after_its_delay_and_builds_a_snapshot():
    answered = asyncio.ensure_future(send(fake_summarizer(delay_ms=30), BODY))
    await asyncio.sleep(0.01)
    assert not answered.done()  # a sleep of 30 ms has not ended after 10 (it is not yet 30 ms, whatever the load)
    response = await answered
    content = json.loads(await response.aread())["choices"][0]["message"]["content"]
    assert content.startswith("<state_snapshot>") and "error: boom" in content
    answer = json.loads(
        await (await send(fake_summarizer(), {"input": "x"}, URL.replace("chat/completions", "responses"))).aread()
    )
    assert answer["output"][0]["content"][0]["text"].startswith("<state_snapshot>")


async def test_summary_requests_are_recorded_for_their_turn_even_from_another_context():
    recorder, sink = SummaryRecorder(fake_summarizer()), []
    recording(sink, 3)
    await send(recorder, BODY)
    tools = [{"type": "function", "function": {"name": "bash"}}]
    # a task started in a context of its own (a background scheduler's): the turn being replayed
    await asyncio.get_running_loop().create_task(
        send(recorder, {**BODY, "tools": tools}), context=contextvars.Context()
    )
    recording(None)  # e.g. the steady pass: nothing recorded
    await send(recorder, BODY)
    assert [(turn, body.get("tools")) for turn, body, _ in sink] == [(3, None), (3, tools)]
    assert request_items(sink[1][1]) == (BODY["messages"], tools)
    assert request_items({"instructions": "be brief", "input": "hi"})[0] == [
        {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "be brief"}]},
        {"role": "user", "content": "hi"},
    ]


def quoting_conversation() -> dict:
    """The runner's test conversation, its assistant naming paths from the tool result before the
    previous one: one near its head (kept in a compacted preview), one deep in it (only in the
    offloaded original)."""
    conv = conversation()
    for i in range(2, 8):
        conv["messages"][2 + 2 * i]["content"] = (
            f"Looking at src/step{i - 2}/mod3.py and src/step{i - 2}/mod110.py. " + "thinking " * 40
        )
    return conv


async def replay(tmp_path, settings: dict | None = None, **kwargs):
    store, upstream = SQLiteStore(tmp_path), upstream_for(None, kwargs.get("summary_delay_ms") or 0)
    try:
        settings = OffloadSettings(max_total_tokens=1500, max_tool_message_tokens=300, **(settings or {}))
        replayer = Replayer(store, settings, upstream, headers=[], model="gpt-4o", **kwargs)
        return await replayer.conversation(quoting_conversation())
    finally:
        await upstream.aclose()
        await store.close()


async def test_summary_requests_are_recorded_as_sent_in_both_shapes(tmp_path):
    conv = quoting_conversation()
    requests, tools = requests_of(conv, "chat")
    for shape in ("prefix", "transcript"):
        store, upstream = SQLiteStore(tmp_path / shape), upstream_for(None)
        try:
            replayer = Replayer(
                store,
                OffloadSettings(max_total_tokens=1500, max_tool_message_tokens=300),
                upstream,
                headers=[],
                model="gpt-4o",
                summary_request=shape,
            )
            sink: list = []
            recording(sink, 4)
            await replayer._turn(requests[-1], replay_namespace(0, "c"), tools)
            recording(None)
        finally:
            await upstream.aclose()
            await store.close()
        [(turn, body, _)] = sink
        items, call_tools = request_items(body)
        assert turn == 4
        if shape == "prefix":  # the turn's own request: its system message and tools first, then the instruction
            assert items[0] == conv["messages"][0] and items[-1]["role"] == "user"
            assert call_tools[0] == tools[0] and body["tool_choice"] == "none"
        else:  # a fresh transcript: nothing a provider could have cached
            assert items[0] == {"role": "system", "content": DEFAULT_PROMPT} and call_tools is None


async def test_summary_calls_are_counted_in_the_cache_cost(tmp_path):
    out = await replay(tmp_path)
    assert out.summaries >= 1 and out.summary_calls == out.summaries  # one group each
    assert out.summary_input_tokens > 0
    assert out.cache_cost_ratio == pytest.approx(out.cache_cost / out.raw_cache_cost)
    assert out.recall_identifiers == 12  # two paths a turn, 6 turns
    # the deep ones are offloaded (and a summary may drop the others): some found, never all
    assert 0 < out.recall_found < 12 and out.recall == out.recall_found / 12
    assert out.latency is None and out.added_ms_per_turn is None  # no delay: no timing in the figures


async def test_latency_report_counts_the_turns_that_waited_for_a_summary(tmp_path):
    out = await replay(tmp_path / "inline", summary_delay_ms=80, turn_latency_ms=5, inline_summaries=True)
    figures = out.latency
    assert figures["stall_threshold_ms"] == 40 and figures["turn_latency_ms"] == 5
    assert figures["stalled_turns"] == sum(ms > 40 for ms in out.added_ms_per_turn)
    # Summaries made inline: each turn that made one waited the summary delay for it (at least
    # 80 ms, whatever the load; another turn may wait as long on a loaded machine).
    assert sum(ms >= 80 for ms in out.added_ms_per_turn) >= out.summaries >= 1
    assert figures["stalled_turns"] >= out.summaries and figures["added_ms_max"] >= 80
    report = report_dict([out], OffloadSettings(), format="chat")
    assert report["overall"]["latency"]["stalled_turns"] == figures["stalled_turns"]
    printed = table(report)
    assert "stalled turns (added latency > half the summary delay, 40 ms)" in printed
    assert "recall" in printed.splitlines()[0] and "stall" in printed.splitlines()[0]


class HeldSummariser(httpx2.AsyncBaseTransport):
    """The fake summariser, its answers held until `release` is set."""

    def __init__(self) -> None:
        self.inner, self.release, self.held = fake_summarizer(), asyncio.Event(), 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.held += 1
        try:
            await self.release.wait()
        finally:
            self.held -= 1
        return await self.inner.handle_async_request(request)


async def test_background_summaries_keep_every_turn_from_waiting(tmp_path):
    """Below the hard limit, no turn waits for a summary: every summary call is held unanswered
    until the last turn has returned (a turn waiting for one would never return: the replay
    would not end), and the summaries are still made and paid once answered."""
    held = HeldSummariser()
    store = SQLiteStore(tmp_path)
    upstream = Upstream(ServerSettings(upstream="http://fake-summariser.invalid/v1"), transport=SummaryRecorder(held))
    conv = quoting_conversation()
    turns, held_at_ticks = len(requests_of(conv, "chat")[0]), []

    def tick() -> None:
        held_at_ticks.append(held.held)
        if len(held_at_ticks) == turns:
            held.release.set()

    try:
        settings = OffloadSettings(max_total_tokens=1500, max_tool_message_tokens=300, hard_max_tokens=1_000_000)
        replayer = Replayer(
            store, settings, upstream, headers=[], model="gpt-4o", summary_delay_ms=80, turn_latency_ms=5
        )
        background = await asyncio.wait_for(replayer.conversation(conv, tick), 120)
    finally:
        await upstream.aclose()
        await store.close()
    assert len(held_at_ticks) == turns and max(held_at_ticks) >= 1, held_at_ticks  # turns went on past a summary
    assert background.summaries >= 1 and background.summary_calls == background.summaries
    assert background.latency is not None and len(background.added_ms_per_turn) == turns


def test_latency_arguments():
    parser = argparse.ArgumentParser()
    add_format_argument(parser)
    args = parser.parse_args(["--summary-delay-ms", "1500", "--turn-latency-ms", "200"])
    assert (args.summary_delay_ms, args.turn_latency_ms) == (1500.0, 200.0)
    assert parser.parse_args([]).summary_delay_ms is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--summary-delay-ms", "-1"])


async def test_the_fake_summariser_summarises_the_prefix_before_the_instruction():
    from proxy.core.texts import SUMMARY_INSTRUCTION
    from proxy.formats.chat import CHAT
    from proxy.formats.responses import RESPONSES

    prefix = [{"role": "user", "content": "fix it, error: boom"}]  # one item: not taken for a transcript
    for fmt in (CHAT, RESPONSES):
        endpoint, body = fmt.summary_request({"model": "m"}, prefix, SUMMARY_INSTRUCTION, tools=(), model="m")
        answer = json.loads(
            await (await send(fake_summarizer(), body, URL.replace("chat/completions", endpoint))).aread()
        )
        text, _, _ = fmt.summary_answer(answer)
        assert "error: boom" in text and "Stop here" not in text, fmt.endpoint


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
