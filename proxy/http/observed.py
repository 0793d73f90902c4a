"""Observe mode (`X-Offload-Mode: observe`, a tenant's or the server's `mode`): the request goes
upstream exactly as received and its answer back as the upstream sent it; once the client has
the whole answer, the proxy plans the same turn beside it and records what it would have
forwarded. Nothing of the plan is sent or kept: no reload tools, no caching added, no summary
call (a summary's size is estimated, `SummaryContext.estimate`), and what the turn stores goes
to the session's store in this worker's memory (`proxy.store.memory`: bounded, so
the next turn plans as a managed one would, never in the shared store). Only statistics remain:
the turn is recorded as an observed one (`proxy.stats`), billed from the usage the
upstream reported, beside the bill it would have had (an estimate).

The plan runs in the response's background task, after its last byte: the forwarded request
never waits for it, and a plan that fails is logged and recorded as nothing.

The holdout on the request path (`holdout` setting, `--holdout`): each session's arm
(`proxy.core.settings`, from the session the statistics give it), a control turn forwarded as
received, and what the statistics learn of every turn of the holdout (`proxy.stats`).

The session is the statistics' (`proxy.http.accounting`): X-Offload-Session, else the one
derived from the conversation; a Responses turn continuing a stored response has the session of
that response (`proxy.stats`: its answer's link is written as soon as the answer has
gone, not at the recorder's next flush, so that the next turn finds it). A request with no
session is managed, outside the comparison; so is one in mode `off` or `observe`.

A control turn goes upstream exactly as received and its answer back as the upstream sent it,
as in observe mode (`proxy.http.observed.as_received`): no reload tools, no caching added, no
summary, no emulated context management. Its record is that of a turn whose mode is `off`
(its tokens counted, nothing planned, nothing stored). Either arm's record gets the arm, how
the client's answer ended (`proxy.http.accounting`) and the repeated identical tool calls of
the request's history (`proxy.core.answers`)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from starlette.background import BackgroundTask
from starlette.responses import Response

from proxy import telemetry
from proxy.core import answers as repeats
from proxy.core import settings as holdout
from proxy.core.jsonio import JsonObject
from proxy.core.settings import OffloadSettings
from proxy.http import accounting
from proxy.http.call_parts import Services
from proxy.http.caller import Caller
from proxy.http.disconnect import ClientDisconnected, ClientWatch
from proxy.http.relay import stream_back
from proxy.http.telemetry import current as current_record
from proxy.offload.cpu_pool import CPU
from proxy.offload.records import RefStore, TenantStore
from proxy.offload.summaries import Compressor
from proxy.offload.summarizer import DEFAULT_PROMPT, ESTIMATED_SUMMARY_TOKENS, SummaryContext
from proxy.stats import session_from_name
from proxy.store.base import StoreUnavailable
from proxy.store.memory import MemoryStore
from proxy.store.sealing import Sealer
from proxy.turn import TurnInput, run_turn
from proxy.upstream.base_url import emulates

log = logging.getLogger("proxy.http.observed")

PLANNED_MODE = "auto"  # what an observed turn is planned as: the proxy's default


class ManagedCall(accounting.ManagedCall, Protocol):
    """What this module reads of a managed call (`proxy.http.managed.ManagedCall`, which uses
    this module: named by its shape so neither imports the other)."""

    client_headers: Sequence[tuple[bytes, bytes]]
    caller: Caller
    services: Services
    watch: ClientWatch
    settings: OffloadSettings
    body: JsonObject
    history: list[Any]
    raw: bytes
    decoded: bool
    query: bytes
    base: str | None


def observing(settings: OffloadSettings) -> bool:
    return settings.mode == "observe"


async def as_received(call: ManagedCall, endpoint: str) -> Response:
    """The request to `endpoint` as received, the answer as the upstream sent it."""
    headers = call.caller.upstream_headers(call.client_headers, body_replaced=call.decoded)
    response = await call.watch.run(
        call.services.upstream.send(
            "POST",
            endpoint,
            query=call.query,
            headers=headers,
            content=call.raw,
            base=call.base,
            record=current_record.get(),
        )
    )
    if call.caller.kind == "client":  # what the upstream thinks of the client's own key
        call.services.credential_check.remember(call.caller.scope, response.status_code)
    return await stream_back(response, shape=call.caller.family)


async def forward(call: ManagedCall) -> Response:
    """The request as received, the answer as sent; the plan once the client has it."""
    out = await as_received(call, call.fmt.endpoint)
    rec = current_record.get()
    accounting.tap(rec, out, call.fmt.usage)
    out.background = BackgroundTask(plan, call, rec)
    return out


def observed_input(call: ManagedCall, store: MemoryStore) -> TurnInput:
    """The turn the proxy would have run, against the session's store in memory and a summariser
    that is never asked."""
    settings = call.settings.model_copy(update={"mode": PLANNED_MODE})
    tenant = TenantStore(store, call.namespace, call.services.settings.store_ttl, Sealer(None))
    model = call.body.get("model") if isinstance(call.body.get("model"), str) else None

    def compressor(body: JsonObject, settings: OffloadSettings, refs: RefStore, *, background: bool) -> Compressor:
        ctx = SummaryContext(
            upstream=call.services.upstream,
            headers=[],
            model=settings.summary_model or model or "",
            prompt=DEFAULT_PROMPT,
            timeout=1.0,
            wait=0.0,
            view=call.fmt.view,
            wire=call.fmt,
            body=body,
            request_model=model,
            estimate=ESTIMATED_SUMMARY_TOKENS,
            record=current_record.get(),
        )
        return Compressor(tenant, ctx)  # inline (no scheduler): the estimate is made at once

    return TurnInput(
        call.fmt,
        call.raw,
        call.body,
        call.history,
        settings,
        tenant,
        compressor,
        emulating=emulates(settings.context_management, call.base or call.services.settings.upstream_base),
        shared_key=call.caller.shared_key,
        new_summaries=True,
        prompt_cache=False,
    )


async def plan(call: ManagedCall, rec: telemetry.RequestRecord | None) -> None:
    """Plan the turn beside the one forwarded and fill in the request's record with it."""
    if rec is None:
        return
    sessions, session, derived = call.services.observed, call.settings.session, None
    try:
        if not session:  # derived once: the store it plans in, and the record's
            derived = await accounting.derived_session(call, call.body, call.history)
            session = derived[0]
        store = sessions.store(call.namespace, session) if sessions is not None else MemoryStore()
        call.turn = await run_turn(observed_input(call, store))
        await accounting.note(
            rec,
            call.turn.report(),
            namespace=call.namespace,
            derive=functools.partial(accounting.known_or_derived, call, derived),
        )
    except Exception:  # noqa: BLE001 - the client has its answer: a plan that fails records nothing
        log.exception("planning an observed turn failed")
        rec.tokens_before = None
        return
    finally:
        if sessions is not None:
            sessions.measured(call.namespace, session)
    rec.observed = True


UNMANAGED_MODES = frozenset({"off", "observe"})
CONTROL_SETTINGS = {"mode": "off", "reload_tools": False, "cache_control": "off", "cache_keepalive": False}


async def session_of(call: ManagedCall) -> tuple[str | None, tuple[str | None, str | None] | None]:
    """(the session the statistics give this request, the derived pair `accounting.note` takes:
    None when X-Offload-Session named it)."""
    if call.settings.session:
        return call.settings.session, None
    derived = await accounting.derived_session(call, call.body, call.history)
    session, continues = derived
    if session is None and continues is not None:  # its session is the response's it continues
        services = call.services
        try:
            found = await services.recorder.replies.find(
                services.store, call.namespace, continues, sealer=services.sealer
            )
        except StoreUnavailable:
            found = None
        session = found or session_from_name(call.namespace, "response", continues)
        derived = (session, None)
    return session, derived


async def arm_of(call: ManagedCall) -> tuple[holdout.Arm | None, tuple[str | None, str | None] | None]:
    """(the request's arm, None outside the holdout; the session derived for it, when it was)."""
    settings = call.settings
    if settings.holdout <= 0 or settings.mode in UNMANAGED_MODES:
        return None, None
    session, derived = await session_of(call)
    salt = call.services.settings.holdout_salt
    return holdout.arm(call.namespace, session, settings.holdout, salt=salt), derived


async def mark(call: ManagedCall, arm: holdout.Arm) -> None:
    """The arm and the repeated tool calls of the request's history, on its record."""
    rec = current_record.get()
    if rec is None:
        return
    rec.arm = arm
    rec.repeated_calls = await CPU.for_messages(call.history)(repeats.repeated_calls, call.history, call.fmt.view)


async def forward_control(call: ManagedCall, derived: tuple[str | None, str | None] | None) -> Response:
    """The request as received, the answer as sent; recorded as a turn of mode `off`."""
    given = observed_input(call, MemoryStore())  # a store of its own: nothing is kept
    given = replace(
        given,
        settings=call.settings.model_copy(update=CONTROL_SETTINGS),
        emulating=False,
        prompt_cache=False,
        new_summaries=False,
    )
    call.turn = await run_turn(given)
    call.rec = await accounting.note(
        current_record.get(),
        call.turn.report(),
        namespace=call.namespace,
        derive=functools.partial(accounting.known_or_derived, call, derived),
    )
    out = await as_received(call, call.fmt.endpoint)
    accounting.tap(call.rec, out, call.fmt.usage)
    accounting.tap_reply(call, out)
    return out


async def watched(call: ManagedCall, answer: Callable[[], Awaitable[Response]]) -> Response:
    """`answer()`, how it ended read into the record, its reply's session linked once it has gone."""
    rec = current_record.get()
    try:
        out = await answer()
    except ClientDisconnected:  # the client went away: no answer ended, nothing is said of it
        raise
    except Exception:  # the proxy answers with its own error: an error of the turn
        accounting.failed(rec)
        raise
    out = await accounting.tap_ending(rec, out)
    if rec is not None:
        out.background = _then(out.background, BackgroundTask(link_reply, call, rec))
    return out


def _then(first: BackgroundTask | None, second: BackgroundTask) -> BackgroundTask:
    if first is None:
        return second

    async def both() -> None:
        try:
            await first()
        finally:
            await second()

    return BackgroundTask(both)


async def link_reply(call: ManagedCall, rec: telemetry.RequestRecord) -> None:
    """The answer's response id → its session, now: the turn continuing from it may come before
    the recorder's flush, and must be given the same session (and arm)."""
    if not rec.response_id or not rec.session:  # X-Offload-Session: every turn names its session
        return
    services = call.services
    try:
        await services.recorder.replies.remember(
            services.store,
            call.namespace,
            rec.response_id,
            session=rec.session,
            ttl=services.recorder.retention,
            sealer=services.sealer,
        )
    except StoreUnavailable:
        log.info("linking a holdout turn's reply to its session failed: the store is unavailable")
