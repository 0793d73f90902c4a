"""The reload loop, written once for every wire format: run the model's calls to the injected
tools and query upstream again, until the model answers with something for the client.

The format-specific part (building each request, reading an answer or a stream's events,
hiding the injected calls, summing usage) is the format's `proxy.core.rounds.Rounds`
(`proxy.formats.chat._rounds.ChatRounds`, `proxy.formats.responses.ResponsesRounds`). The loop
does the IO: it sends each round, reads the answer or the SSE stream, runs the calls within the
budget, and turns every failure midway into the format's error event.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import httpx2

from proxy import telemetry
from proxy.core import jsonio, texts
from proxy.core.answers import UNREPORTED, UsageReader
from proxy.core.jsonio import JsonObject
from proxy.core.media import ToolResult
from proxy.core.rounds import Rounds, ToolCall
from proxy.errors import Kind, error_body, stream_error
from proxy.reload.tools import ReloadTools
from proxy.upstream import sse
from proxy.upstream.transport import UpstreamError, response_host, stream_broke, upstream_error

log = logging.getLogger("proxy.reload.loop")

# send(body) → the upstream response (headers received, body unread)
SendRound = Callable[[JsonObject], Awaitable[httpx2.Response]]


@dataclass
class Budget:
    """How many more reload rounds a request may run: bounded by count and by total time."""

    max_rounds: int
    seconds: float
    started: float = field(default_factory=time.monotonic)

    def more(self, rounds_done: int) -> bool:
        """May the next upstream call still offer the injected tools?"""
        return rounds_done < self.max_rounds and time.monotonic() < self.deadline

    @property
    def deadline(self) -> float:
        """When the budget ends (time.monotonic): a tool call may not run past it either."""
        return self.started + self.seconds


MAX_CALLS_PER_ROUND = 16


async def run_calls(tools: ReloadTools, calls: list[ToolCall], deadline: float) -> list[ToolResult]:
    """The results of the injected calls, in order. Past MAX_CALLS_PER_ROUND a call is answered
    without being run: a model (or an injected prompt) asking for thousands of reloads at once
    would otherwise make the next request as large as the whole store."""
    results = [await tools.run(call.name, call.arguments, deadline) for call in calls[:MAX_CALLS_PER_ROUND]]
    return results + [texts.too_many_calls(MAX_CALLS_PER_ROUND)] * len(calls[MAX_CALLS_PER_ROUND:])


@dataclass
class LoopResult:
    status: int
    body: bytes
    response: httpx2.Response  # the last upstream response (for its headers)
    rounds: int = 0  # reload rounds run (each one more upstream call)


async def complete(
    rounds: Rounds,
    send: SendRound,
    *,
    tools: ReloadTools,
    budget: Budget,
    usage: UsageReader | None = None,
    record: telemetry.TurnRecord = telemetry.NO_RECORD,
) -> LoopResult:
    """Non-streaming: loop while the model calls only injected tools, within the budget; each
    200 answer's bill (`usage`) and each round on the turn's `record`.

    A 200 answer that is not a JSON object raises UpstreamError (`upstream_error`).
    """
    round_ = 0
    while True:
        response = await send(rounds.request(budget.more(round_)))
        try:
            raw = await response.aread()
        except httpx2.HTTPError as exc:  # broke off or timed out before the whole answer
            raise upstream_error(exc, response_host(response)) from exc
        finally:
            await response.aclose()
        if response.status_code != 200:
            return LoopResult(response.status_code, raw, response, round_)
        try:
            answer = _answer(raw, response, rounds.what)
        except UpstreamError:
            if usage is not None:
                record.add_bill(UNREPORTED)  # a 200 answer: billed, but nothing in it can be read
            raise
        if usage is not None:
            record.add_bill(usage.of_answer(answer))
        calls = rounds.take(answer)
        if not calls:
            return LoopResult(200, jsonio.dumps(rounds.result()), response, round_)
        rounds.answer(await run_calls(tools, calls, budget.deadline))
        round_ += 1
        record.count_round()


def not_a_completion(detail: str, *, what: str = "chat completion", stream: bool = False) -> UpstreamError:
    """The 502 for a 200 answer the loop cannot read: an HTML page from a gateway, a JSON body
    where a stream was asked for, a truncated body…"""
    what = f"{what} stream" if stream else what
    return UpstreamError(
        Kind.UPSTREAM_FAILED,
        f"The upstream answered 200 with a body that is not a {what} ({detail}).",
        code="upstream_error",
    )


def _describe(response: httpx2.Response, size: int | None = None) -> str:
    """What a body was, without its content: its media type (and size)."""
    kind = response.headers.get("content-type") or "no content-type"
    return kind if size is None else f"{kind}, {size} bytes"


def _answer(raw: bytes, response: httpx2.Response, what: str) -> JsonObject:
    """A 200 answer read as a JSON object, else UpstreamError."""
    try:
        completion = jsonio.loads(raw)
    except ValueError:
        completion = None
    if not isinstance(completion, dict):
        raise not_a_completion(_describe(response, len(raw)), what=what)
    return completion


async def _events(
    first: httpx2.Response,
    rounds: Rounds,
    send: SendRound,
    *,
    tools: ReloadTools,
    budget: Budget,
    holder: list[httpx2.Response],
    done: list[int],
    before_finish: Callable[[], Awaitable[None]] | None,
    usage: UsageReader | None,
    record: telemetry.TurnRecord,
) -> AsyncIterator[JsonObject]:
    """The events for the client (not yet encoded); an error event ends them early. `done[0]`:
    the reload rounds run so far. Each round's bill (`usage`) on the turn's record once its
    stream has ended, however it ended."""
    response = first
    round_ = 0
    while True:
        seen = 0
        reading = usage.stream() if usage is not None else None
        try:
            async for data in sse.iter_data(response.aiter_bytes()):
                if data == sse.DONE:
                    break
                try:
                    event = jsonio.loads(data)
                except ValueError:
                    event = None
                if not isinstance(event, dict):
                    detail = f"{_describe(response)}: an event that is not a JSON object"
                    for out in rounds.fail(stream_error(not_a_completion(detail, what=rounds.what, stream=True))):
                        yield out
                    return
                seen += 1
                if reading is not None:
                    reading.feed(event)
                for out in rounds.feed(event):
                    yield out
        finally:
            if reading is not None:
                record.add_bill(reading.bill())
        await response.aclose()
        if not seen:  # an HTML page, a JSON body, nothing at all: no event of an answer
            for out in rounds.fail(
                stream_error(not_a_completion(f"{_describe(response)}: no event", what=rounds.what, stream=True))
            ):
                yield out
            return
        calls = rounds.calls()
        if not calls:
            break
        rounds.answer(await run_calls(tools, calls, budget.deadline))
        round_ += 1
        done[0] = round_
        record.count_round()
        try:
            response = holder[0] = await send(rounds.request(budget.more(round_)))
        except UpstreamError as exc:
            for out in rounds.fail(stream_error(exc)):
                yield out
            return
        if response.status_code != 200:
            raw = await response.aread()
            for out in rounds.fail(_error_payload(raw, response.status_code)):
                yield out
            return
    if before_finish is not None:
        await before_finish()
    for out in rounds.finish():
        yield out


async def stream(
    first: httpx2.Response,
    rounds: Rounds,
    send: SendRound,
    *,
    tools: ReloadTools,
    budget: Budget,
    before_finish: Callable[[], Awaitable[None]] | None = None,
    usage: UsageReader | None = None,
    record: telemetry.TurnRecord = telemetry.NO_RECORD,
) -> AsyncIterator[bytes]:
    """Streaming: relay events as they come, hide injected calls, chain the rounds.

    `first` is the response to `rounds.request(...)` already sent (its status checked by the
    caller). Whatever goes wrong midway (the upstream breaks off or times out, sends something
    that is not an event of an answer or a 200 answer with no event at all, or a round fails in
    the proxy) ends the stream with the format's error event (`rounds.fail`) and its closing,
    never a cut connection. `before_finish` runs once the last round has ended, before the
    events that end the stream are sent. The reload rounds run are told last, in an SSE comment
    (`reload_rounds_comment`) before the format's closing: every SSE client skips comments.
    """
    holder = [first]
    done = [0]
    try:
        try:
            async for event in _events(
                first,
                rounds,
                send,
                tools=tools,
                budget=budget,
                holder=holder,
                done=done,
                before_finish=before_finish,
                usage=usage,
                record=record,
            ):
                yield rounds.encode(event)
        except (httpx2.HTTPError, ValueError) as exc:
            for event in rounds.fail(stream_broke(exc, response_host(holder[0]))):
                yield rounds.encode(event)
        except Exception as exc:  # noqa: BLE001 - the stream must still end properly
            log.exception("streamed reload round failed")
            for event in rounds.fail(
                error_body(
                    f"The proxy failed during a reload round ({type(exc).__name__}).", "server_error", "proxy_error"
                )
            ):
                yield rounds.encode(event)
        yield reload_rounds_comment(done[0])
        if rounds.closing:
            yield rounds.closing
    finally:
        await holder[0].aclose()


RELOAD_ROUNDS_HEADER = b"x-offload-reload-rounds"


def reload_rounds_comment(count: int) -> bytes:
    """How a stream tells its reload rounds (a non-streamed answer: the X-Offload-Reload-Rounds
    header): an SSE comment, which SDKs and SSE parsers skip."""
    return b": x-offload-reload-rounds: %d\n\n" % count


def _error_payload(raw: bytes, status: int) -> JsonObject:
    try:
        payload = jsonio.loads(raw)
        if isinstance(payload, dict) and "error" in payload:
            return payload
    except ValueError:
        pass
    return error_body(f"Upstream answered {status} during a reload round.", "server_error", "upstream_error")
