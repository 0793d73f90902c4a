"""How the answer a client got ended (`proxy.core.answers`), read as it goes to the client, into
the request's record: a holdout turn's finish reason, and whether it was an error, one saying
the model's context window was exceeded. Read beside the relay (`proxy.http.answer_tap`) as `proxy.http.billing` reads a
bill: a JSON answer whole, a stream's events as they pass (only those that may say how it
ended are parsed, a large one off the event loop), an encoded answer once it has all come (at
most KEPT_BYTES of it). Nothing of it changes a byte the client gets or fails a request.
"""

from __future__ import annotations

from starlette.responses import Response, StreamingResponse

from proxy import telemetry
from proxy.core import jsonio
from proxy.core.answers import ERROR, Ending, error_ending, may_end, of_value
from proxy.errors import ProxyError
from proxy.http.answer_tap import KEPT_BYTES, ON_LOOP_BYTES, answer_codings, events_in, is_event_stream, tapped
from proxy.http.body import decode
from proxy.offload.cpu_pool import CPU

ERROR_BYTES = 64 * 1024  # of an error answer, what is read for its message


def note(rec: telemetry.RequestRecord, ending: Ending | None, *, status: int) -> None:
    """The answer's ending into `rec` (an answer other than 200 is an error whatever it says)."""
    if status != 200:
        ending = Ending(ERROR, True, ending.context_error if ending is not None else False)
    if ending is None:
        return
    rec.finish, rec.answer_error, rec.context_error = ending.finish, ending.error, ending.context_error


def failed(rec: telemetry.RequestRecord | None) -> None:
    """The turn ended in an exception (the proxy answers with its own error)."""
    if rec is not None:
        note(rec, error_ending(None), status=502)


def _parsed(raw: bytes, codings: list[str], *, limit: int) -> Ending | None:
    try:
        return of_value(jsonio.loads(decode(raw, codings, limit=limit) if codings else raw))
    except (ValueError, RecursionError, ProxyError):  # `decode`: ProxyError 413 or 400 for what it cannot undo
        return None


def _of_events(raw: bytes, codings: list[str]) -> Ending | None:
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


async def tap(rec: telemetry.RequestRecord | None, out: Response) -> Response:
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
        note(rec, ending, status=out.status_code)
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
    """How a relayed answer ended, into `rec` once it has (`proxy.http.answer_tap`)."""

    def __init__(self, rec: telemetry.RequestRecord, *, status: int) -> None:
        self.rec, self.status = rec, status
        self.found: Ending | None = None

    async def event(self, data: str) -> None:
        self.found = await _of_data_off_loop(data) or self.found

    async def whole(self, raw: bytes, codings: list[str], *, events: bool) -> None:
        self.found = await CPU(len(raw) > ON_LOOP_BYTES)(_of_events if events else _parsed_whole, raw, codings)

    def ended(self, *, read: bool) -> None:
        note(self.rec, self.found, status=self.status)


def _parsed_whole(raw: bytes, codings: list[str]) -> Ending | None:
    return _parsed(raw, codings, limit=KEPT_BYTES)


async def _of_data_off_loop(data: str) -> Ending | None:
    if len(data) > ON_LOOP_BYTES:  # a Responses terminal event holds the whole output
        return await CPU(True)(_of_data, data)
    return _of_data(data)
