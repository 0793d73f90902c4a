"""What the access log, the metrics and the usage statistics learn of a managed turn, on its
`RequestRecord` (`proxy.telemetry`): the plan's figures, the session of a client that sends
no `X-Offload-Session` (`proxy.stats`), and for a Responses turn whose answer is
stored upstream, that answer's id, so a later turn continuing from it is given the same
session (`proxy.stats`).

Only cheap work happens here, on the request path: the session digest covers the first items
of the history only (in the CPU pool when they are large: a task of tens of MB), and an answer's
id is read from its first bytes as they pass.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from starlette.responses import Response, StreamingResponse

from proxy import telemetry
from proxy.core.jsonio import JsonObject
from proxy.core.wire import WireFormat
from proxy.errors import ProxyError
from proxy.http.answer_tap import KEPT_BYTES, ON_LOOP_BYTES, answer_codings
from proxy.http.body import decode
from proxy.http.services import Services
from proxy.offload import records as response_chains
from proxy.offload.cpu_pool import CPU
from proxy.stats import MAX_SESSION_ITEMS, session_from_history, session_from_name
from proxy.turn import Turn, TurnReport


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
