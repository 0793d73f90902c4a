"""POST /v1/chat/completions: settings → plan → store → upstream → reload loop."""

from __future__ import annotations

import logging
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from starlette.background import BackgroundTask

from proxy import events, jsonio, observe, reload_loop
from proxy.compression import Compressor, SummaryContext
from proxy.disconnect import ClientDisconnected, ClientWatch
from proxy.errors import ProxyError, error_response
from proxy.headers import request_headers_for_upstream, response_headers_for_client
from proxy.pipeline import Prepared, prepare
from proxy.refs import RefStore
from proxy.relay import close_after, stream_back
from proxy.reload_tools import RELOAD_TOOL_SCHEMAS, ReloadTools
from proxy.store import StoreUnavailable
from proxy.summarizer import DEFAULT_PROMPT
from proxy.tenant import tenant_namespace
from proxy.tokens import counter_for_model_async
from proxy.upstream import Upstream
from proxy.upstream_choice import chosen_base

log = logging.getLogger("proxy.chat")


def parse_chat_body(raw: bytes) -> dict:
    try:
        body = jsonio.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProxyError(400, f"Request body is not valid JSON: {exc}", code="invalid_json") from exc
    if not isinstance(body, dict):
        raise ProxyError(400, "Request body must be a JSON object.", code="invalid_json")
    return body


def offload_headers(prepared: Prepared) -> list[tuple[bytes, bytes]]:
    plan = prepared.plan
    headers = [
        (b"x-offload-action", prepared.action.encode()),
        (b"x-offload-tokens-before", str(plan.tokens_before).encode()),
        (b"x-offload-tokens-after", str(plan.tokens_after).encode()),
        (b"x-offload-refs", str(len(plan.offloads)).encode()),
    ]
    if prepared.summary_tokens:
        headers.append((b"x-offload-summary-tokens", str(prepared.summary_tokens).encode()))
    if prepared.warnings:
        headers.append((b"x-offload-warning", "; ".join(prepared.warnings).encode("ascii", "replace")))
    return headers


def compressor_for(request: Request, body: dict, settings, namespace: str, headers, base: str | None) -> Compressor:
    state = request.app.state
    prompt = state.settings_resolver.tenant_extra(settings.tenant, "summary_prompt") or DEFAULT_PROMPT
    model = settings.summary_model or (body.get("model") if isinstance(body.get("model"), str) else "gpt-4o-mini")
    ctx = SummaryContext(state.upstream, headers, model, prompt, state.settings.summary_timeout,
                         state.settings.summary_wait, state.sealer, base)
    return Compressor(state.store, namespace, state.settings.store_ttl, ctx)


async def chat_completions(request: Request) -> Response:
    state = request.app.state
    raw = await request.body()
    try:
        body = parse_chat_body(raw)
        settings = state.settings_resolver.resolve(request.headers)
        base = chosen_base(request.headers, state.settings_resolver, state.settings.upstream_allowlist)
    except ProxyError as exc:
        return exc.response()

    namespace = tenant_namespace(request.headers.get("authorization"), settings.tenant)
    rec = observe.current.get()
    counter = await counter_for_model_async(body.get("model") if isinstance(body.get("model"), str) else None)
    messages = body.get("messages")
    if not isinstance(messages, list):
        messages = []  # nothing to plan; the upstream validates the request itself
    if len(messages) > state.settings.max_messages:
        return ProxyError(400, f"Too many messages: {len(messages)} > {state.settings.max_messages}.",
                          code="too_many_messages", param="messages").response()
    ttl = state.settings.store_ttl
    refs = RefStore(state.store, namespace, ttl, state.touch_memo, state.sealer)
    summary_headers = request_headers_for_upstream(request.scope["headers"], body_replaced=True)
    compressor = compressor_for(request, body, settings, namespace, summary_headers, base)
    prepared = await prepare(messages, settings, counter, namespace, refs, compressor)
    plan = prepared.plan
    for warning in prepared.warnings:
        log.warning("offload: %s", warning)
    if rec is not None:
        rec.tenant, rec.stream = namespace[:12], bool(body.get("stream"))
        rec.model = body.get("model") if isinstance(body.get("model"), str) else None
        rec.tokens_before, rec.tokens_after, rec.action = plan.tokens_before, plan.tokens_after, prepared.action
        rec.refs_created, rec.offloaded_bytes = len(prepared.written), sum(len(o.text.encode()) for o in plan.offloads
                                                                           if o.ref in prepared.written)
        rec.warnings = prepared.warnings

    inject = settings.reload_tools and bool(plan.refs) and not prepared.store_failed
    extra = offload_headers(prepared)
    upstream: Upstream = state.upstream
    changed = prepared.action != "none"
    headers = request_headers_for_upstream(request.scope["headers"], body_replaced=changed or inject)
    tools = ReloadTools(refs, counter, settings.max_reload_tokens, plan.refs, settings.session)

    async def record_events() -> None:
        try:
            await events.record(state.store, namespace, settings.session, prepared.events + tools.events, ttl)
        except StoreUnavailable:
            pass

    background = BackgroundTask(record_events)
    query = request.scope.get("query_string", b"")
    watch = ClientWatch(request, body_read=True)

    async def send(round_messages: list[Any], with_tools: bool) -> httpx.Response:
        payload = {**body, "messages": round_messages}
        if with_tools:
            payload["tools"] = [*(body.get("tools") or []), *RELOAD_TOOL_SCHEMAS]
        return await upstream.send("POST", "chat/completions", query=query, headers=headers,
                                   content=jsonio.dumps(payload), base=base)

    try:
        if not inject:
            content = jsonio.dumps({**body, "messages": plan.messages}) if changed else raw
            response = await watch.run(
                upstream.send("POST", "chat/completions", query=query, headers=headers, content=content, base=base)
            )
            out = await stream_back(response, extra)
            out.background = background
            return out

        budget = reload_loop.Budget(settings.max_reload_rounds, state.settings.reload_budget)
        if body.get("stream"):
            offered = budget.more(0)
            first = await watch.run(send(plan.messages, offered))
            if first.status_code != 200:
                return await stream_back(first, extra)
            out = StreamingResponse(
                close_after(first, reload_loop.stream(first, offered, plan.messages, send, tools, budget)),
                status_code=200,
                background=background,
            )
            out.raw_headers = response_headers_for_client(first.headers.raw, decoded=True) + extra
            return out
        result = await watch.run(reload_loop.complete(plan.messages, send, tools, budget))
        out = Response(result.body, status_code=result.status, background=background)
        out.raw_headers = (
            response_headers_for_client(result.response.headers.raw, decoded=True)
            + [(b"content-length", str(len(result.body)).encode())]
            + extra
        )
        return out
    except ProxyError as exc:
        return exc.response()
    except ClientDisconnected:
        return error_response(499, "Client closed the request.")
