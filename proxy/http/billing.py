"""The bill of a managed turn's answer relayed as it came (`ManagedCall.forward`: no reload
rounds), read beside the relay: the usage of a JSON answer, or of a stream's events as they pass
(`proxy.core.answers`, through the format's `UsageReader`). What cannot be read (an encoding that
cannot be undone, a body too large, no usage at all) is one answer without usage, never a
failed request.

On a chat stream whose client did not ask for usage the proxy asked (`UsageReader.asking`):
`unasked_stream` relays it event by event, each as the client would have got it without asking
(`UsageReader.unasked`: the usage chunk left out, `"usage": null` taken off the others; a large
event off the event loop), every other byte as it came.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence

import httpx2
from starlette.responses import Response, StreamingResponse

from proxy import telemetry
from proxy.core import jsonio
from proxy.core.answers import UNREPORTED, Bill, UsageReader, UsageStream
from proxy.errors import ProxyError, Shape
from proxy.http.answer_tap import KEPT_BYTES, ON_LOOP_BYTES, answer_codings, events_in, is_event_stream, tapped
from proxy.http.body import decode
from proxy.http.headers import response_headers_for_client
from proxy.http.relay import close_after, stream_back, with_error_event
from proxy.offload.cpu_pool import CPU
from proxy.upstream import sse
from proxy.upstream.transport import response_host

_USAGE = b'"usage"'
_BOUNDARY = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_DATA_LINE = re.compile(rb"^data: ?([^\r\n]*)", re.MULTILINE)  # an event's data line: its value


def tap(rec: telemetry.RequestRecord | None, out: Response, usage: UsageReader) -> None:
    """Read the bill of `out` (a 200 answer relayed as-is) into `rec` as it goes to the client."""
    if rec is None or out.status_code != 200:
        return
    codings = answer_codings(out)
    if isinstance(out, StreamingResponse):
        out.body_iterator = tapped(
            out.body_iterator, _BillReader(rec, usage), codings=codings, events=is_event_stream(out)
        )
        return
    rec.bill.add(UNREPORTED if codings is None else _of_body(bytes(out.body), codings, usage))


def _of_body(raw: bytes, codings: list[str], usage: UsageReader) -> Bill:
    try:
        return usage.of_answer(jsonio.loads(decode(raw, codings, limit=KEPT_BYTES) if codings else raw))
    except (ValueError, RecursionError, ProxyError):  # `decode`: ProxyError 413 or 400 for what it cannot undo
        return UNREPORTED


def _of_events(raw: bytes, codings: list[str], usage: UsageReader) -> Bill:
    """The bill of a whole stream's bytes (an encoded one, read once it has ended)."""
    reading = usage.stream()
    try:
        for data in events_in(raw, codings):
            _feed(reading, data)
    except (ValueError, RecursionError, ProxyError):  # `decode`: ProxyError 413 or 400 for what it cannot undo
        return UNREPORTED
    return reading.bill()


def _feed(reading: UsageStream, data: str) -> None:
    """One event's data, parsed when it may carry usage."""
    if '"usage"' not in data:
        return
    try:
        event = jsonio.loads(data)
    except (ValueError, RecursionError):
        return
    if isinstance(event, dict):
        reading.feed(event)


class _BillReader:
    """The bill of a relayed answer into `rec` once it has ended (`proxy.http.answer_tap`)."""

    def __init__(self, rec: telemetry.RequestRecord, usage: UsageReader) -> None:
        self.rec, self.usage = rec, usage
        self.reading = usage.stream()
        self.bill: Bill | None = None

    async def event(self, data: str) -> None:
        await _feed_off_loop(self.reading, data)

    async def whole(self, raw: bytes, codings: list[str], *, events: bool) -> None:
        self.bill = await CPU(len(raw) > ON_LOOP_BYTES)(_of_events if events else _of_body, raw, codings, self.usage)

    def ended(self, *, read: bool) -> None:
        self.rec.bill.add(UNREPORTED if not read else self.bill if self.bill is not None else self.reading.bill())


async def _feed_off_loop(reading: UsageStream, data: str) -> None:
    if len(data) > ON_LOOP_BYTES and '"usage"' in data:  # a Responses terminal event holds the whole output
        try:
            event = await CPU(True)(jsonio.loads, data)
        except (ValueError, RecursionError):
            return
        if isinstance(event, dict):
            reading.feed(event)
        return
    _feed(reading, data)


async def unasked_stream(
    response: httpx2.Response,
    extra_headers: Sequence[tuple[bytes, bytes]] = (),
    *,
    shape: Shape,
    rec: telemetry.RequestRecord | None,
    usage: UsageReader,
) -> Response:
    """The answer to a request `usage.asking` rewrote, as the client would have got it."""
    if response.status_code != 200 or not response.headers.get("content-type", "").lower().startswith(
        "text/event-stream"
    ):
        out = await stream_back(response, extra_headers, shape=shape)
        tap(rec, out, usage)
        return out
    chunks = with_error_event(response.aiter_bytes(), shape, host=response_host(response))  # decoded
    out = StreamingResponse(close_after(response, _unasked(chunks, rec, usage)), status_code=200)
    out.raw_headers = response_headers_for_client(response.headers.raw, decoded=True) + list(extra_headers)
    return out


async def _unasked(
    chunks: AsyncIterator[bytes], rec: telemetry.RequestRecord | None, usage: UsageReader
) -> AsyncIterator[bytes]:
    reading = usage.stream()
    buffer = b""
    searched = 0  # buffer[:searched] ends no event (but for its last 3 bytes)
    try:
        async for chunk in chunks:
            buffer += chunk
            out, start = [], 0
            for match in _BOUNDARY.finditer(buffer, max(0, searched - 3)):
                block = buffer[start : match.end()]
                out.append(await CPU(len(block) > ON_LOOP_BYTES)(_without_asked, block, reading, usage))
                start = match.end()
            buffer = buffer[start:]
            if len(buffer) > sse.MAX_EVENT_BYTES:  # no event of a chat completion: relayed as it is
                out.append(buffer)
                buffer = b""
            searched = len(buffer)
            if out and (sent := b"".join(out)):
                yield sent
        if buffer:
            yield await CPU(len(buffer) > ON_LOOP_BYTES)(_without_asked, buffer, reading, usage)
    finally:
        if rec is not None:
            rec.bill.add(reading.bill())


def _without_asked(block: bytes, reading: UsageStream, usage: UsageReader) -> bytes:
    """One event (its lines and the blank line ending it) as the client gets it: an event whose
    data holds usage rewritten (`usage.unasked`: in its data lines, the lines between them and
    around them kept), or left out whole; anything else as it came."""
    if _USAGE not in block:
        return block
    lines = list(_DATA_LINE.finditer(block))
    if not lines:
        return block
    data = b"\n".join(line.group(1) for line in lines)  # as an SSE client joins them
    try:
        event = jsonio.loads(data)
    except (ValueError, RecursionError):
        return block
    if not isinstance(event, dict):
        return block
    reading.feed(event)
    kept = usage.unasked(data)
    if kept is None:
        return b""
    if kept == data:
        return block
    kept = kept.replace(b"\n", b"\n" + block[lines[-1].start() : lines[-1].start(1)])  # one data line each, as before
    return block[: lines[0].start(1)] + kept + block[lines[-1].end(1) :]
