"""Direct API for non-proxy use (ReMe-style), tenant-scoped like everything else.

POST /v1/offload        {"messages": [...], "model"?: str} → reduced messages, refs, token counts
GET  /v1/offload/{ref}  → the stored original
"""

from __future__ import annotations

import functools

from starlette.requests import Request
from starlette.responses import Response

from proxy.core.settings import OffloadSettings
from proxy.core.tokens import counter_for_model_async
from proxy.errors import Kind, ProxyError
from proxy.formats import chat
from proxy.formats.chat import parse_chat_body
from proxy.formats.json_body import LARGE_BODY
from proxy.http import error_map
from proxy.http.body import decoded
from proxy.http.call_parts import compressor_for, model_of, request_settings, tenant_store
from proxy.http.caller import Caller
from proxy.http.error_map import JSONResponse, json_answer
from proxy.http.services import services_of
from proxy.offload.cpu_pool import CPU
from proxy.offload.pipeline import prepare
from proxy.offload.records import TenantStore
from proxy.store import StoreUnavailable


def _scope(request: Request) -> tuple[OffloadSettings, Caller, TenantStore]:
    caller: Caller = request.state.caller
    services, headers = services_of(request), request.scope["headers"]
    settings = request_settings(services, headers, caller)
    if settings.mode == "observe":  # asked to offload: observe mode is about the forwarded turns
        settings = settings.model_copy(update={"mode": "auto"})
    return settings, caller, tenant_store(services, headers, caller)


async def offload(request: Request) -> Response:
    return await error_map.answered(lambda: _offload(request), doing="Nothing stored")


async def _offload(request: Request) -> Response:
    limits = services_of(request).settings
    raw, _ = await decoded(
        await request.body(), request.headers.getlist("content-encoding"), limit=limits.max_body_bytes
    )
    body = await CPU(len(raw) > LARGE_BODY)(functools.partial(parse_chat_body, max_messages=limits.max_messages), raw)
    settings, caller, tenant = _scope(request)
    refs = tenant.refs()
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise ProxyError(Kind.BAD_REQUEST, "'messages' must be a list.", param="messages")
    model = model_of(body)
    namespace = caller.namespace
    # the caller asked for the reduced messages now: a summary they need is made before answering
    compressor = compressor_for(
        services_of(request),
        request.scope["headers"],
        body,
        settings=settings,
        caller=caller,
        tenant=tenant,
        fmt=chat.CHAT,
        refs=refs,
        background=False,
    )
    counter = await counter_for_model_async(model)
    prepared = await prepare(
        messages, settings, counter=counter, namespace=namespace, refs=refs, compressor=compressor, view=chat.VIEW
    )
    if prepared.refused is not None:  # the quota, or the upstream's verdict on the credential
        raise prepared.refused
    if prepared.store_failed:
        raise StoreUnavailable(prepared.warnings[0])
    plan = prepared.plan
    await tenant.record_events(settings.session, prepared.events)
    return await json_answer(
        {
            "messages": plan.items,
            "refs": [{"ref": o.ref, "kind": o.kind, "tokens": o.tokens} for o in plan.offloads],
            "tokens_before": plan.tokens_before,
            "tokens_after": plan.tokens_after,
            "action": prepared.action,
            "summary_tokens": prepared.summary_tokens,
            "warnings": prepared.warnings,
        },
        cpu=CPU.for_messages(plan.items),
    )


async def list_events(request: Request) -> Response:
    """GET /v1/offload/events?session=…: this tenant's events, newest last."""
    return await error_map.answered(lambda: _list_events(request))


async def _list_events(request: Request) -> Response:
    settings, caller, tenant = _scope(request)
    if caller.kind == "anonymous":
        raise ProxyError(
            Kind.UNAUTHORIZED,
            "Listing events needs a credential: anonymous clients share one namespace.",
            code="missing_api_key",
        )
    session = request.query_params.get("session") or settings.session
    data = await tenant.recent_events(session)
    return JSONResponse({"object": "list", "data": data})


async def get_offloaded(request: Request) -> Response:
    return await error_map.answered(lambda: _get_offloaded(request))


async def _get_offloaded(request: Request) -> Response:
    ref = request.path_params["ref"]
    _, _, tenant = _scope(request)
    item = await tenant.refs().load(ref)
    if item is None:
        raise ProxyError(
            Kind.NOT_FOUND, f"No offloaded content ref={ref} for this credential.", code="ref_not_found", param="ref"
        )
    return await json_answer(
        {"ref": item.ref, "kind": item.kind, "content": item.text}, cpu=CPU(len(item.text) > LARGE_BODY)
    )
