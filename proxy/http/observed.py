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
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from starlette.background import BackgroundTask
from starlette.responses import Response

from proxy import telemetry
from proxy.core.jsonio import JsonObject
from proxy.core.settings import OffloadSettings
from proxy.http import accounting, billing
from proxy.http.caller import Caller
from proxy.http.disconnect import ClientWatch
from proxy.http.relay import stream_back
from proxy.http.services import Services
from proxy.http.telemetry import current as current_record
from proxy.offload.records import RefStore, TenantStore
from proxy.offload.summaries import Compressor
from proxy.offload.summarizer import DEFAULT_PROMPT, ESTIMATED_SUMMARY_TOKENS, SummaryContext
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
    billing.tap(rec, out, call.fmt.usage)
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
