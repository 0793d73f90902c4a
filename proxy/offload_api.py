"""Direct API for non-proxy use (ReMe-style), tenant-scoped like everything else.

POST /v1/offload        {"messages": [...], "model"?: str} → reduced messages, refs, token counts
GET  /v1/offload/{ref}  → the stored original
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from proxy import events
from proxy.chat import compressor_for, model_of, parse_chat_body
from proxy.errors import ProxyError
from proxy.headers import request_headers_for_upstream
from proxy.pipeline import prepare
from proxy.refs import RefStore
from proxy.store import StoreUnavailable
from proxy.tenant import tenant_namespace
from proxy.upstream_choice import chosen_base
from proxy.tokens import counter_for_model_async


def _scope(request: Request):
    settings = request.app.state.settings_resolver.resolve(request.headers)
    namespace = tenant_namespace(request.headers.get("authorization"), settings.tenant)
    refs = RefStore(request.app.state.store, namespace, request.app.state.settings.store_ttl,
                    sealer=request.app.state.sealer)
    return settings, namespace, refs


def _store_down(exc: StoreUnavailable) -> Response:
    return ProxyError(503, f"Store unavailable: {exc}", type_="server_error", code="store_unavailable").response()


async def offload(request: Request) -> Response:
    try:
        body = parse_chat_body(await request.body())
        settings, namespace, refs = _scope(request)
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise ProxyError(400, "'messages' must be a list.", param="messages")
        base = chosen_base(request.headers, request.app.state.settings_resolver,
                           request.app.state.settings.upstream_allowlist)
    except ProxyError as exc:
        return exc.response()
    model = model_of(body)
    headers = request_headers_for_upstream(request.scope["headers"], body_replaced=True)
    compressor = compressor_for(request, body, settings, namespace, headers, base)
    counter = await counter_for_model_async(model)
    prepared = await prepare(messages, settings, counter, namespace, refs, compressor)
    if prepared.store_failed:
        return _store_down(StoreUnavailable(prepared.warnings[0]))
    plan = prepared.plan
    await events.record(request.app.state.store, namespace, settings.session, prepared.events,
                        request.app.state.settings.store_ttl)
    return JSONResponse(
        {
            "messages": plan.messages,
            "refs": [{"ref": o.ref, "kind": o.kind, "tokens": o.tokens} for o in plan.offloads],
            "tokens_before": plan.tokens_before,
            "tokens_after": plan.tokens_after,
            "action": prepared.action,
            "summary_tokens": prepared.summary_tokens,
            "warnings": prepared.warnings,
        }
    )


async def list_events(request: Request) -> Response:
    """GET /v1/offload/events?session=…: this tenant's events, newest last."""
    try:
        settings, namespace, _ = _scope(request)
        session = request.query_params.get("session") or settings.session
        data = await events.recent(request.app.state.store, namespace, session)
    except ProxyError as exc:
        return exc.response()
    except StoreUnavailable as exc:
        return _store_down(exc)
    return JSONResponse({"object": "list", "data": data})


async def get_offloaded(request: Request) -> Response:
    ref = request.path_params["ref"]
    try:
        _, _, refs = _scope(request)
        item = await refs.load(ref)
    except ProxyError as exc:
        return exc.response()
    except StoreUnavailable as exc:
        return _store_down(exc)
    if item is None:
        return ProxyError(404, f"No offloaded content ref={ref} for this credential.", code="ref_not_found",
                          param="ref").response()
    return JSONResponse({"ref": item.ref, "kind": item.kind, "content": item.text})
