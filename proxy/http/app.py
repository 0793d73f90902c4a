"""The ASGI application: routes and the lifespan that owns the upstream client and the store.

Request path of the managed endpoints (chat completions, Responses, Anthropic Messages): app →
http.managed (settings, the format's body) → offload (plan, store) → upstream → reload loop.
Everything else under /v1 is relayed unchanged, to OpenAI's or Anthropic's upstream
(`proxy.http.routing`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute

from proxy.config import ServerSettings
from proxy.core.settings import SettingsResolver
from proxy.core.tokens import counter_for_encoding
from proxy.http.body import BodyLimit
from proxy.http.call_parts import Services, services_of
from proxy.http.caller import CallerGate, Gatekeeper, load_tenants_file
from proxy.http.headers import UnknownHeaderWarning
from proxy.http.managed import chat_completions, keepalive_service, messages, responses
from proxy.http.relay import relay
from proxy.http.routing import CanonicalPath, not_routed
from proxy.http.side_routes import (
    count_tokens,
    get_offloaded,
    list_events,
    offload,
    responses_compact,
    responses_input_tokens,
)
from proxy.http.stats_api import AdminGate, Dashboard, StatsApi, tenant_names
from proxy.http.telemetry import (
    Metrics,
    Observe,
    Recording,
    configure_logging,
    configure_text_logging,
    install,
    metrics_endpoint,
)
from proxy.http.websocket.connection import Limits as SocketLimits
from proxy.http.websocket.connection import ResponsesSocket
from proxy.offload.canary import check_timeout, keep_if_served
from proxy.offload.summarizer import CANCEL_WAIT, SummaryScheduler
from proxy.offload.tenant import CredentialCheck
from proxy.reload import search as search_pool
from proxy.stats import STOP_TIMEOUT, PriceTable, Recorder
from proxy.store import open_store, sealer_for
from proxy.store.guarded import GuardedStore
from proxy.store.memory import ObservedSessions
from proxy.upstream.client import Upstream

log = logging.getLogger("proxy")
ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


async def healthz(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> JSONResponse:
    """Ready while the proxy can answer, which it does with its store down too (unoffloaded:
    degraded). A 503 here would take every replica out of its load balancer at once, the store
    being shared; the store's health is `offload_store_up`'s to alert on."""
    if await services_of(request).store.ping():
        return JSONResponse({"status": "ready", "store": "ok", "degraded": False})
    return JSONResponse({"status": "ready", "store": "unavailable", "degraded": True})


def shutdown_budget(settings: ServerSettings) -> float:
    """The longest time (s) from SIGTERM to exit: the requests' and streams' grace (uvicorn's), then
    the lifespan's: the background summaries' grace, the wait for those cancelled past it, the
    search workers' reaping, the statistics' last flush, the secrets check made again
    (`proxy.offload.canary.after_serve`), and a second for the rest. An orchestrator's grace
    period must cover it."""
    return (
        2 * settings.shutdown_grace
        + CANCEL_WAIT
        + search_pool.REAP_WAIT
        + STOP_TIMEOUT
        + check_timeout(settings.store_timeout)
        + 1
    )


_frozen = False


def _freeze_startup_objects() -> None:
    """What startup allocated (modules, encoders) lives forever: keep it out of every collection."""
    global _frozen
    if not _frozen:
        gc.freeze()
        _frozen = True


def create_app(settings: ServerSettings | None = None) -> Starlette:
    settings = settings or ServerSettings()
    install()  # client text in log lines, clipped (json or text, ours or uvicorn's)
    tenants = load_tenants_file(settings.tenants_file)
    resolver = SettingsResolver(settings.offload_defaults(), tenants, settings.header_caps)
    gatekeeper = Gatekeeper(
        tenants,
        server_key=settings.upstream_api_key,
        anthropic_key=settings.anthropic_api_key,
        anthropic_upstream=settings.anthropic_upstream,
        allow_anonymous=settings.allow_anonymous,
        upstream_allowlist=settings.upstream_allowlist,
        secret=settings.names_key,
    )
    metrics = Metrics(tenant_label=settings.metrics_tenant_label)
    recorder = Recorder(PriceTable(settings.prices), settings.stats_retention, on_dropped=metrics.stats_dropped.inc)
    stats_api = StatsApi(tenant_names(gatekeeper.tenants, settings.names_key))
    socket = ResponsesSocket(
        gatekeeper,
        resolver,
        SocketLimits(
            settings.max_body_bytes,
            settings.ws_idle_timeout,
            settings.ws_held_responses,
            max_items=settings.max_messages,
            held_bytes=settings.ws_held_bytes,
        ),
        recording=Recording(metrics, recorder.observe, on_started=recorder.opened),  # as Observe records a request
        per_tenant=settings.ws_connections_per_tenant,
        total=settings.ws_connections,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        for note in gatekeeper.startup_notes():
            log.warning(note)  # ours (an argument would be clipped as client text)
        await asyncio.to_thread(counter_for_encoding, "o200k_base")  # now, not on a request
        _freeze_startup_objects()
        upstream = Upstream(settings)
        services = Services(
            settings=settings,
            settings_resolver=resolver,
            metrics=metrics,
            sealer=sealer_for(settings),
            credential_check=CredentialCheck(),
            upstream=upstream,
            store=GuardedStore(open_store(settings), ping_timeout=settings.store_timeout, metrics=metrics),
            # one credential (whatever its X-Offload-Tenant) holds half the slots at most, queued or running
            summaries=SummaryScheduler(
                concurrency=settings.summary_concurrency,
                queue=settings.summary_queue,
                per_tenant=max(1, settings.summary_concurrency // 2),
                max_age=2 * settings.summary_timeout,
                on_change=metrics.summaries_state,
            ),
            recorder=recorder,
            keepalive=keepalive_service(settings, upstream, metrics, recorder=recorder),
            observed=ObservedSessions(settings.observe_bytes),
        )
        app.state.services = services
        metrics.watch_summaries(services.summaries.state)
        services.store.start()
        recorder.start(services.store, services.sealer)
        assert services.keepalive is not None
        services.keepalive.start()
        canary = keep_if_served(
            services.store,
            services.sealer,
            settings.names_key,
            workers=settings.workers,
            woken=services.store.answering_again,
        )
        try:
            yield
        finally:
            if canary is not None:
                canary.cancel()
            # uvicorn has given the requests their grace already; summaries still running get their own
            await services.summaries.shutdown(settings.shutdown_grace)
            await services.keepalive.stop()  # what it held (credentials among it) goes with it
            await search_pool.shutdown()  # the context_search worker processes
            await services.upstream.aclose()
            await recorder.stop()  # what the last second queued
            await services.store.close()

    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_endpoint(settings.admin_token, metrics), methods=["GET"]),
        *Dashboard().routes(),
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        WebSocketRoute("/v1/responses", socket),  # the WebSocket mode (proxy.http.websocket)
        Route("/v1/responses/compact", responses_compact, methods=["POST"]),
        Route("/v1/responses/input_tokens", responses_input_tokens, methods=["POST"]),
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        Route("/v1/offload", offload, methods=["POST"]),
        Route("/v1/offload/events", list_events, methods=["GET"]),
        *stats_api.routes(),
        Route("/v1/offload/{ref}", get_offloaded, methods=["GET"]),
        Route("/v1/{path:path}", relay, methods=ALL_METHODS),
    ]
    middleware = [
        Middleware(CanonicalPath),
        Middleware(Observe, metrics=metrics, on_finished=recorder.observe, on_started=recorder.opened),
        Middleware(BodyLimit, max_bytes=settings.max_body_bytes, idle_timeout=settings.body_timeout),
        Middleware(AdminGate, admin_token=settings.admin_token, stats=stats_api),
        Middleware(CallerGate, gatekeeper=gatekeeper),
        Middleware(UnknownHeaderWarning, metrics=metrics),
    ]
    app = Starlette(
        routes=routes, lifespan=lifespan, middleware=middleware, exception_handlers={HTTPException: not_routed}
    )
    app.state.ws_max_size = frame_limit(settings)
    return app


def frame_limit(settings: ServerSettings) -> int:
    """The largest WebSocket frame the server reads (uvicorn's ws_max_size): a body of
    --max-body-bytes and its event's envelope; one beyond it closes the connection (1009), one
    between --max-body-bytes and it is refused with an error event."""
    return settings.max_body_bytes + 64 * 1024


def create_app_from_env() -> Starlette:
    """uvicorn factory: settings from OFFLOAD_* environment variables."""
    settings = ServerSettings()
    if settings.log_format == "json":
        configure_logging(settings.log_level)
    else:
        configure_text_logging(settings.log_level)
    return create_app(settings)
