"""An answer read beside the relay as it goes to the client, every byte passed on as it came:
a stream's events as they pass, an encoded answer or a JSON body once it has all come (at most a
limit of it). What reads it (`proxy.http.accounting`'s bill, `proxy.http.accounting`'s ending)
is an `AnswerReader`; nothing it does changes a byte the client gets or fails a request.

What the access log, the metrics and the usage statistics learn of a managed turn, on its
`RequestRecord` (`proxy.telemetry`): the plan's figures, the session of a client that sends
no `X-Offload-Session` (`proxy.stats`), and for a Responses turn whose answer is
stored upstream, that answer's id, so a later turn continuing from it is given the same
session (`proxy.stats`).

Only cheap work happens here, on the request path: the session digest covers the first items
of the history only (in the CPU pool when they are large: a task of tens of MB), and an answer's
id is read from its first bytes as they pass.

The bill of a managed turn's answer relayed as it came (`ManagedCall.forward`: no reload
rounds), read beside the relay: the usage of a JSON answer, or of a stream's events as they pass
(`proxy.core.answers`, through the format's `UsageReader`). What cannot be read (an encoding that
cannot be undone, a body too large, no usage at all) is one answer without usage, never a
failed request.

On a chat stream whose client did not ask for usage the proxy asked (`UsageReader.asking`):
`unasked_stream` relays it event by event, each as the client would have got it without asking
(`UsageReader.unasked`: the usage chunk left out, `"usage": null` taken off the others; a large
event off the event loop), every other byte as it came.

How the answer a client got ended (`proxy.core.answers`), read as it goes to the client, into
the request's record: a holdout turn's finish reason, and whether it was an error, one saying
the model's context window was exceeded. Read beside the relay (`proxy.http.accounting`) as `proxy.http.accounting` reads a
bill: a JSON answer whole, a stream's events as they pass (only those that may say how it
ended are parsed, a large one off the event loop), an encoded answer once it has all come (at
most KEPT_BYTES of it). Nothing of it changes a byte the client gets or fails a request."""

from __future__ import annotations

import re
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any, Protocol

import httpx2
from starlette.responses import AsyncContentStream, Content, Response, StreamingResponse

from proxy import telemetry
from proxy.core import jsonio
from proxy.core.answers import (
    ERROR,
    UNREPORTED,
    Bill,
    Ending,
    UsageReader,
    UsageStream,
    error_ending,
    may_end,
    of_value,
)
from proxy.core.jsonio import JsonObject
from proxy.core.wire import WireFormat
from proxy.errors import ProxyError, Shape
from proxy.http.body import codings_of, decode
from proxy.http.call_parts import Services
from proxy.http.headers import response_headers_for_client
from proxy.http.relay import close_after, stream_back, with_error_event
from proxy.offload import records as response_chains
from proxy.offload.cpu_pool import CPU
from proxy.stats import MAX_SESSION_ITEMS, session_from_history, session_from_name
from proxy.turn import Turn, TurnReport
from proxy.upstream import sse
from proxy.upstream.transport import response_host

KEPT_BYTES = 16 * 1024 * 1024  # of an encoded stream or a streamed JSON body, what is kept to read it
ON_LOOP_BYTES = 256 * 1024  # a larger body or event is read off the event loop


class AnswerReader(Protocol):
    async def event(self, data: str) -> None:
        """One event's data of a stream that is not encoded, as it passes."""

    async def whole(self, raw: bytes, codings: list[str], *, events: bool) -> None:
        """The answer's bytes once they have all come: an encoded answer (`events`: an encoded
        event stream), or one that is not an event stream."""

    def ended(self, *, read: bool) -> None:
        """Last, once: `read` is False when the answer could not be read (a coding that cannot
        be undone, more than the limit kept, a stream that does not parse)."""


def answer_codings(out: Response) -> list[str] | None:
    """The answer's content codings ([] for none), None when one cannot be undone."""
    values = [v.decode("latin-1") for k, v in out.raw_headers if k.lower() == b"content-encoding"]
    try:
        return [c for c in codings_of(values) if c != "identity"]
    except Exception:  # noqa: BLE001 - an unknown coding: the answer is not read
        return None


def is_event_stream(out: Response) -> bool:
    return any(k.lower() == b"content-type" and v.lower().startswith(b"text/event-stream") for k, v in out.raw_headers)


def events_in(raw: bytes, codings: list[str]) -> Iterator[str]:
    """The data of each event of a whole stream's bytes, decoded first. Raises ValueError or
    RecursionError for what does not parse, ProxyError for a coding it cannot undo."""
    parser = sse.DataParser()
    yield from parser.feed(decode(raw, codings, limit=KEPT_BYTES) if codings else raw)
    yield from parser.end()


async def tapped(
    chunks: AsyncContentStream,
    reader: AnswerReader,
    *,
    codings: list[str] | None,
    events: bool,
    limit: int = KEPT_BYTES,
) -> AsyncIterator[Content]:
    """`chunks` as they come, read by `reader` meanwhile (`events`: the answer is an event
    stream; `codings`: `answer_codings`)."""
    parser = sse.DataParser()
    whole = codings is not None and (bool(codings) or not events)
    kept, failed = bytearray(), codings is None
    try:
        async for chunk in chunks:
            yield chunk
            if failed:
                continue
            raw = chunk if isinstance(chunk, bytes) else str(chunk).encode()
            if whole:  # encoded, or a JSON body: read once it has all come
                kept += raw
                failed = len(kept) > limit
                continue
            try:
                for data in parser.feed(raw):
                    await reader.event(data)
            except (ValueError, RecursionError):
                failed = True
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()
        if not failed and whole and codings is not None:
            await reader.whole(bytes(kept), codings, events=events)
        elif not failed:
            try:
                for data in parser.end():
                    await reader.event(data)
            except ValueError:
                pass
        reader.ended(read=not failed)


class ManagedCall(Protocol):
    """What this module reads of a managed turn (`proxy.http.managed.ManagedCall`, which uses
    this module: named here by its shape, so neither imports the other)."""

    turn: Turn
    namespace: str
    fmt: WireFormat
    previous: Any
    rec: telemetry.RequestRecord | None
    services: Services


PEEK = 8192  # bytes of an answer looked at for its id
_RESPONSE_ID = re.compile(rb'"id"\s*:\s*"([A-Za-z0-9_-]{1,256})"')


async def note(
    rec: telemetry.RequestRecord | None,
    report: TurnReport,
    *,
    namespace: str,
    derive: Callable[[], Awaitable[tuple[str | None, str | None]]],
) -> telemetry.RequestRecord | None:
    """Write what the turn reports (`Turn.report`) on the request's record once it is planned
    (None: no record). `derive`: the session `session_of` gives (asked only when the client named
    none: `known_or_derived`)."""
    if rec is None:
        return None
    rec.tenant, rec.stream, rec.model = namespace[:12], report.stream, report.model
    rec.tokens_before, rec.tokens_after, rec.action = report.tokens_before, report.tokens_after, report.action
    rec.refs, rec.refs_created = report.refs, report.refs_created
    rec.image_tokens_saved, rec.offloaded_bytes = report.image_tokens_saved, report.offloaded_bytes
    rec.warnings = report.warnings
    if not report.session and rec.route != "count_tokens":  # X-Offload-Session wins
        rec.session, rec.continues = await derive()
    return rec


async def known_or_derived(
    call: ManagedCall, derived: tuple[str | None, str | None] | None
) -> tuple[str | None, str | None]:
    """`derived` when the caller already has it, else `session_of` the call's turn."""
    return derived if derived is not None else await session_of(call)


async def session_of(call: ManagedCall) -> tuple[str | None, str | None]:
    """(the session derived from the conversation, the response id a continuing Responses turn
    names instead: its session is that response's, found when the turn is recorded)."""
    return await derived_session(call, call.turn.body, call.turn.history)


async def derived_session(call: ManagedCall, body: JsonObject, history: list[Any]) -> tuple[str | None, str | None]:
    """`session_of` a request whose body and history are these (before the turn or after it)."""
    namespace = call.namespace
    if call.fmt.stored:
        if (conversation := response_chains.conversation_key(body.get("conversation"))) is not None:
            return session_from_name(namespace, "conversation", conversation), None
        if isinstance(call.previous, str) and call.previous:
            return None, call.previous
    system = (body.get("system"), body.get("instructions"))  # Anthropic's, Responses'; chat: in the messages
    cpu = CPU.for_messages(history[:MAX_SESSION_ITEMS])
    return await cpu(session_from_history, namespace, history, call.fmt.view.role, system=system), None


def _wants_reply(call: ManagedCall) -> telemetry.RequestRecord | None:
    """The record, when this turn's answer is stored upstream and its id names its session."""
    rec = call.rec
    if rec is None or (rec.session is None and rec.continues is None):
        return None
    return rec if call.fmt.stored and call.turn.body.get("store") is not False else None


def learn_reply(call: ManagedCall, response_id: str | None) -> None:
    """The id of the answer the client got (after reload rounds: the first round's)."""
    if response_id and (rec := _wants_reply(call)) is not None and rec.response_id is None:
        rec.response_id = response_id
        _noted(call, rec)


def _noted(call: ManagedCall, rec: telemetry.RequestRecord) -> None:
    """An answer's id known, with its session: linked in the worker's memory before the client
    can send the turn that continues from it (the store's link is written after the answer)."""
    if rec.response_id and rec.session:
        call.services.recorder.replies.note(call.namespace, rec.response_id, session=rec.session)


def first_id(head: bytes) -> str | None:
    found = _RESPONSE_ID.search(head[:PEEK])
    return found.group(1).decode() if found else None


def tap_reply(call: ManagedCall, out: Response) -> None:
    """Read the id of an answer relayed as it came (a Response object, or a stream whose first
    event carries it) from its first bytes, as they go to the client; an encoded one's (gzip,
    as OpenAI sends a JSON answer) once it has all come, decoded beside the relay (at most
    KEPT_BYTES of it)."""
    rec = _wants_reply(call)
    if rec is None or out.status_code != 200:
        return
    codings = answer_codings(out)
    if codings is None:  # a coding that cannot be undone: no id
        return
    if isinstance(out, StreamingResponse):
        out.body_iterator = _peeking(out.body_iterator, rec, codings, noted=lambda: _noted(call, rec))
        return
    if not codings:
        rec.response_id = rec.response_id or first_id(bytes(out.body))
    elif len(out.body) <= ON_LOOP_BYTES:
        rec.response_id = rec.response_id or _encoded_id(bytes(out.body), codings)
    _noted(call, rec)


def _encoded_id(raw: bytes, codings: list[str]) -> str | None:
    try:
        return first_id(decode(raw, codings, limit=KEPT_BYTES)[:PEEK])
    except ProxyError:  # more than KEPT_BYTES, or not of its coding
        return None


async def _peeking(
    chunks: AsyncIterable[Any], rec: telemetry.RequestRecord, codings: list[str], *, noted: Callable[[], None]
) -> AsyncIterator[Any]:
    head = bytearray()
    try:
        async for chunk in chunks:
            if rec.response_id is None and (codings or len(head) < PEEK) and len(head) <= KEPT_BYTES:
                head += chunk if isinstance(chunk, bytes) else str(chunk).encode()
                if not codings:
                    rec.response_id = first_id(bytes(head))
                    noted()
            yield chunk
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:  # the relay releases the upstream connection there
            await close()
        if codings and rec.response_id is None and head and len(head) <= KEPT_BYTES:
            rec.response_id = await CPU(len(head) > ON_LOOP_BYTES)(_encoded_id, bytes(head), codings)
            noted()


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
    """The bill of a relayed answer into `rec` once it has ended (`proxy.http.accounting`)."""

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


ERROR_BYTES = 64 * 1024  # of an error answer, what is read for its message


def note_ending(rec: telemetry.RequestRecord, ending: Ending | None, *, status: int) -> None:
    """The answer's ending into `rec` (an answer other than 200 is an error whatever it says)."""
    if status != 200:
        ending = Ending(ERROR, True, ending.context_error if ending is not None else False)
    if ending is None:
        return
    rec.finish, rec.answer_error, rec.context_error = ending.finish, ending.error, ending.context_error


def failed(rec: telemetry.RequestRecord | None) -> None:
    """The turn ended in an exception (the proxy answers with its own error)."""
    if rec is not None:
        note_ending(rec, error_ending(None), status=502)


def _parsed(raw: bytes, codings: list[str], *, limit: int) -> Ending | None:
    try:
        return of_value(jsonio.loads(decode(raw, codings, limit=limit) if codings else raw))
    except (ValueError, RecursionError, ProxyError):  # `decode`: ProxyError 413 or 400 for what it cannot undo
        return None


def _ending_of_events(raw: bytes, codings: list[str]) -> Ending | None:
    """The ending of a whole stream's bytes (an encoded one, read once it has ended)."""
    found: Ending | None = None
    try:
        for data in events_in(raw, codings):
            found = _of_data(data) or found
    except (ValueError, RecursionError, ProxyError):  # `decode`: ProxyError 413 or 400 for what it cannot undo
        return found
    return found


def _of_data(data: str) -> Ending | None:
    if not may_end(data):
        return None
    try:
        return of_value(jsonio.loads(data))
    except (ValueError, RecursionError):
        return None


async def tap_ending(rec: telemetry.RequestRecord | None, out: Response) -> Response:
    """`out`, its ending read into `rec` (a whole body now, a stream as it goes to the client)."""
    if rec is None:
        return out
    codings = answer_codings(out)
    if not isinstance(out, StreamingResponse):
        body = bytes(out.body)
        limit = ERROR_BYTES if out.status_code != 200 else KEPT_BYTES
        ending = None
        if codings is not None and len(body) <= limit:
            ending = await CPU(len(body) > ON_LOOP_BYTES)(_parsed, body, codings, limit=limit)
        note_ending(rec, ending, status=out.status_code)
        return out
    events = is_event_stream(out) and out.status_code == 200
    out.body_iterator = tapped(
        out.body_iterator,
        _EndingReader(rec, status=out.status_code),
        codings=codings,
        events=events,
        limit=ERROR_BYTES if out.status_code != 200 else KEPT_BYTES,
    )
    return out


class _EndingReader:
    """How a relayed answer ended, into `rec` once it has (`proxy.http.accounting`)."""

    def __init__(self, rec: telemetry.RequestRecord, *, status: int) -> None:
        self.rec, self.status = rec, status
        self.found: Ending | None = None

    async def event(self, data: str) -> None:
        self.found = await _of_data_off_loop(data) or self.found

    async def whole(self, raw: bytes, codings: list[str], *, events: bool) -> None:
        self.found = await CPU(len(raw) > ON_LOOP_BYTES)(_ending_of_events if events else _parsed_whole, raw, codings)

    def ended(self, *, read: bool) -> None:
        note_ending(self.rec, self.found, status=self.status)


def _parsed_whole(raw: bytes, codings: list[str]) -> Ending | None:
    return _parsed(raw, codings, limit=KEPT_BYTES)


async def _of_data_off_loop(data: str) -> Ending | None:
    if len(data) > ON_LOOP_BYTES:  # a Responses terminal event holds the whole output
        return await CPU(True)(_of_data, data)
    return _of_data(data)
