"""The long-lived objects every route uses, made once by the app's lifespan: one typed object
instead of loose attributes on `app.state`.

The per-request parts of a managed call, from the server's services, the caller and the
client's headers (no transport: an HTTP request's, or a WebSocket upgrade's): its settings, its
storage quota, its compressor (shared by the managed endpoints, the Responses WebSocket and
`POST /v1/offload`)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from starlette.datastructures import Headers
from starlette.requests import Request

from proxy.config import ServerSettings
from proxy.core.answers import Bill
from proxy.core.jsonio import JsonObject
from proxy.core.prompt_cache import CutContext
from proxy.core.settings import OffloadSettings, SettingsResolver
from proxy.core.wire import WireFormat
from proxy.errors import ProxyError
from proxy.formats.messages import without_emulated_betas
from proxy.http.caller import ACCOUNT_HEADERS, CREDENTIAL_HEADERS, Caller
from proxy.http.telemetry import current as current_record
from proxy.offload.cache_keepalive import KeepAlive
from proxy.offload.records import RefStore, TenantStore
from proxy.offload.summaries import Compressor
from proxy.offload.summarizer import DEFAULT_INSTRUCTION, DEFAULT_PROMPT, SummaryContext, SummaryScheduler
from proxy.offload.tenant import ADMITTED, Admission, CredentialCheck, Quota
from proxy.stats import Recorder
from proxy.store.guarded import GuardedStore
from proxy.store.memory import ObservedSessions
from proxy.store.sealing import Sealer
from proxy.telemetry import Metrics
from proxy.upstream.client import Upstream


@dataclass(frozen=True)
class Services:
    settings: ServerSettings
    settings_resolver: SettingsResolver
    metrics: Metrics
    sealer: Sealer
    credential_check: CredentialCheck
    upstream: Upstream
    store: GuardedStore
    summaries: SummaryScheduler  # summaries made in the background
    recorder: Recorder  # usage statistics, written in the background
    keepalive: KeepAlive | None = None  # keep-alive pings of the sessions that ask for them
    observed: ObservedSessions | None = None  # observe mode: each observed session's plan state, in memory


def services_of(request: Request) -> Services:
    return cast(Services, request.app.state.services)


def model_of(body: JsonObject) -> str | None:
    return body.get("model") if isinstance(body.get("model"), str) else None


RawHeaders = Sequence[tuple[bytes, bytes]]  # the client's headers as received (an ASGI scope's)


def compressor_for(
    services: Services,
    client_headers: RawHeaders,
    body: JsonObject,
    *,
    settings: OffloadSettings,
    caller: Caller,
    tenant: TenantStore,
    fmt: WireFormat,
    refs: RefStore,
    background: bool = True,
    cuts: CutContext | None = None,
    session: str | None = None,
) -> Compressor:
    """Summaries go to the caller's upstream with the caller's upstream credential: in the
    request's own format and endpoint (the prefix shape, `fmt` builds the request), or to chat
    completions whatever the format (`--summary-request transcript`, OpenAI's formats only: an
    Anthropic upstream has no chat completions, and caches prefixes); `fmt.view` reads the
    request's items. `background`: made ahead of time and not waited for below the hard limit
    (else inline). A tenant's `summary_prompt` replaces the transcript's system prompt and the
    prefix shape's instruction alike. `session`: the turn's in the statistics (derived when the
    client names none), whose bill a background summary's goes to."""
    custom = services.settings_resolver.tenant_extra(caller.tenant, "summary_prompt")
    model = settings.summary_model or model_of(body) or "gpt-4o-mini"
    # a summary call carries no context_management: the betas the proxy emulates have no place on it
    # (an upstream that knows them not may refuse the call, and the compaction with it)
    headers = without_emulated_betas(caller.upstream_headers(client_headers, body_replaced=True))

    def billed(bill: Bill, summary_model: str) -> None:  # a background summary's bill, for the statistics
        services.recorder.bill_call(
            caller.namespace, bill, call="summary", model=summary_model, session=settings.session or session
        )

    ctx = SummaryContext(
        upstream=services.upstream,
        headers=headers,
        model=model,
        prompt=custom or DEFAULT_PROMPT,
        timeout=services.settings.summary_timeout,
        wait=services.settings.summary_wait,
        base=caller.base,
        view=fmt.view,
        background=services.summaries if background else None,
        session=settings.session,
        request_model=model_of(body),
        metrics=services.metrics,
        refs=refs,
        tenant_scope=caller.scope,
        wire=fmt,
        body=body,
        summary_request="prefix" if caller.family == "anthropic" else services.settings.summary_request,
        instruction=custom or DEFAULT_INSTRUCTION,
        tally=functools.partial(services.recorder.count_summary, caller.namespace, session=settings.session),
        billed=billed,
        cuts=cuts,
        record=current_record.get(),
    )
    return Compressor(tenant, ctx)


def tenant_store(
    services: Services, client_headers: RawHeaders, caller: Caller, *, charged: bool = True
) -> TenantStore:
    """The store as the caller's tenant sees it; `charged`: its writes go through the caller's
    storage quota and credential check (`quota_for`)."""
    return TenantStore(
        services.store,
        caller.namespace,
        services.settings.store_ttl,
        services.sealer,
        names_key=services.settings.names_key,
        quota=quota_for(services, client_headers, caller) if charged else None,
    )


def request_settings(services: Services, client_headers: RawHeaders, caller: Caller) -> OffloadSettings:
    """Server defaults ← the caller's tenant ← X-Offload-* headers; a refused header is a
    SettingsError (a bad request naming it)."""
    return services.settings_resolver.resolve(Headers(raw=list(client_headers)), tenant=caller.tenant)


# Headers the check of a client's key sends with it: an Anthropic OAuth token is accepted only
# with its `anthropic-beta` (`oauth-2025-04-20`), a 401 without.
CHECK_HEADERS = CREDENTIAL_HEADERS + ACCOUNT_HEADERS + (b"anthropic-version", b"anthropic-beta")


def admission_for(services: Services, client_headers: RawHeaders, caller: Caller) -> Admission:
    """The caller gate's verdict on storing for this caller (`proxy.offload.tenant.Admission`): a
    proxy key or the server's own is admitted; a client's own key must be one the upstream
    accepts (known to the server's `CredentialCheck`, else asked once with `GET models` by the
    first step about to store, remembered for a while). Never asked for a request that stores
    nothing."""
    if caller.kind != "client":
        return ADMITTED

    async def ask() -> int | None:
        headers = [
            (k, v)
            for k, v in without_emulated_betas(caller.upstream_headers(client_headers, body_replaced=True))
            if k.lower() in CHECK_HEADERS
        ]
        try:
            response = await services.upstream.send(
                "GET", "models", headers=headers, base=caller.base, record=current_record.get()
            )
        except ProxyError:
            return None
        await response.aclose()
        return response.status_code

    return Admission(services.credential_check, caller.scope, ask)


def quota_for(services: Services, client_headers: RawHeaders, caller: Caller) -> Quota:
    """The storage quota of the caller's tenant, its writes admitted by `admission_for`."""
    return Quota(
        services.store,
        caller.scope,
        limit=services.settings.max_stored_bytes_per_namespace,
        ttl=services.settings.store_ttl,
        admission=admission_for(services, client_headers, caller),
    )
