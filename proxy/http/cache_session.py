"""A managed turn and its session's prompt cache: what the turn learns before it is planned (when
the session's prefix was last sent: `proxy.core.prompt_cache` prices its cuts with it), and what
it leaves after it was forwarded (the new record, `proxy.offload.cache_keepalive`; the exact prefix
held for keep-alive pings, `proxy.offload.cache_keepalive`).

The session is the statistics' (`X-Offload-Session`, else derived from the conversation's start,
`proxy.http.accounting.derived_session`), decided before the turn so the record read and the
record written are the same one. Neither step ever fails the request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from proxy.core import prompt_cache as ka
from proxy.core import prompt_cache as pc
from proxy.core.jsonio import JsonObject
from proxy.core.prompt_cache import CutContext, LastSent, digest
from proxy.core.settings import OffloadSettings
from proxy.core.wire import WireFormat
from proxy.formats.json_body import LARGE_BODY
from proxy.formats.prompt_cache import profile_name
from proxy.http import accounting
from proxy.http.call_parts import tenant_store
from proxy.http.caller import Caller
from proxy.http.services import Services
from proxy.offload import cache_keepalive as last_sent
from proxy.offload.cache_keepalive import KeepAlive, PingDone
from proxy.offload.cpu_pool import CPU
from proxy.turn import Exchange

log = logging.getLogger("proxy.http.cache_session")


@dataclass
class CacheSession:
    """One turn's part: the session, the record read before it (what went out first is the
    exchange's: `Exchange.sent`)."""

    session: str | None = None
    before: LastSent | None = None
    cuts: CutContext | None = None


class ManagedCall(accounting.ManagedCall, Protocol):
    services: Services
    client_headers: Sequence[tuple[bytes, bytes]]
    caller: Caller
    fmt: WireFormat
    settings: OffloadSettings
    body: JsonObject
    history: list[Any]
    base: str | None
    headers: list[tuple[bytes, bytes]]
    query: bytes
    cache: CacheSession
    exchange: Exchange


def profile_for(fmt: WireFormat, model: str | None, ttl: float) -> pc.Profile:
    """The provider profile of the format's upstream, with the TTL the proxy assumes."""
    return replace(pc.profile_for(profile_name(fmt.endpoint) or "openai", model), ttl=ttl)


async def before(call: ManagedCall) -> None:
    """Before the turn: its session and the session's record (the cut decisions' input)."""
    try:
        session = call.settings.session or (await accounting.derived_session(call, call.body, call.history))[0]
    except Exception:  # noqa: BLE001 - the session is an optimisation's input, never a failure
        log.exception("deriving the session failed")
        return
    if session is None:
        return
    services = call.services
    sent = await last_sent.read(tenant_store(services, call.client_headers, call.caller, charged=False), session)
    model = call.body.get("model") if isinstance(call.body.get("model"), str) else None
    call.cache.session, call.cache.before = session, sent
    call.cache.cuts = CutContext(sent, time.time(), profile_for(call.fmt, model, services.settings.cache_ttl))


async def after(call: ManagedCall) -> None:
    """Once answered: the session's new record, and its prefix held for pings when asked."""
    cache, sent = call.cache, call.exchange.sent
    if cache.session is None or sent is None or sent.status != 200:
        return
    turn = call.turn
    model = turn.body.get("model") if isinstance(turn.body.get("model"), str) else None
    sent_digest = await CPU(len(sent.content) > LARGE_BODY)(digest, sent.content)
    tokens = turn.prepared.plan.tokens_after + await CPU(len(sent.content) > LARGE_BODY)(
        turn.counter.outside_history, turn.body
    )  # the forwarded body's: its tools and system prompt too
    record = LastSent(
        sent_digest,
        tokens=tokens,
        at=sent.at,
        model=model[:256] if model else None,
        endpoint=call.fmt.endpoint,
        family=call.caller.family,
        credential="shared" if call.caller.shared_key else call.caller.kind,
        summary=turn.prepared.summary_prefix,
    )
    tenant = tenant_store(call.services, call.client_headers, call.caller, charged=False)
    stored = await last_sent.write(tenant, cache.session, record, previous=cache.before)
    keepalive = call.services.keepalive
    if keepalive is not None and turn.settings.cache_keepalive:
        await keepalive.hold(
            tenant,
            cache.session,
            sent=stored,
            content=sent.content,
            headers=call.headers,
            base=call.base,
            fmt=call.fmt,
            query=call.query,
        )


def keepalive_service(settings: Any, upstream: Any, metrics: Any, *, recorder: Any) -> KeepAlive:
    """The worker's keep-alive pings (`proxy.offload.cache_keepalive`), counted in `metrics`; each 200
    answer's usage billed to its session as a call of its own ("keepalive"), as a turn's are
    (the Prometheus counters of the bill too)."""
    limits = ka.Limits(
        settings.cache_keepalive_min_tokens,
        settings.cache_keepalive_max_pings,
        settings.cache_keepalive_idle,
        settings.cache_ttl,
    )

    def answered(done: PingDone) -> None:
        metrics.keepalive_pings.labels("ok" if done.status == 200 else "failed").inc()
        if done.status != 200:  # refused: not billed (an unreadable 200 is: counted without usage)
            return
        metrics.keepalive_cost.inc(done.cost)
        entry = done.session
        if entry.fmt is not None:
            bill = entry.fmt.usage.of_answer(done.answer)
            metrics.count_bill(bill, "keepalive")
            recorder.bill_call(entry.tenant.namespace, bill, call="keepalive", model=entry.model, session=entry.session)

    return KeepAlive(
        upstream,
        limits,
        max_bytes=settings.cache_keepalive_bytes,
        on_answer=answered,
        on_avoided=metrics.keepalive_avoided.inc,
        timeout=settings.summary_timeout,
    )
