"""The replay's simulation: the summariser's requests recorded per turn, its delay, the latency report."""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json

import httpx2
import pytest

from proxy.config import ServerSettings
from proxy.core.settings import OffloadSettings
from proxy.offload.summarizer import DEFAULT_PROMPT
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
