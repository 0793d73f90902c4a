"""POST /v1/chat/completions: settings → plan → store → upstream → reload loop."""

from __future__ import annotations

import logging
from typing import Any

import httpx
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from proxy.offload import events

from proxy.core import jsonio

from proxy.http import observe

from proxy.reload import loop as reload_loop
from proxy.http.caller import ACCOUNT_HEADERS, CREDENTIAL_HEADERS, Caller
from proxy.formats.chat_body import parse_chat_body
from proxy.offload.summaries import Compressor, SummaryContext
from proxy.http.disconnect import ClientDisconnected, ClientWatch
from proxy.http.services import services_of
from proxy.errors import ProxyError, error_response
from proxy.formats import chat as chat_format
from proxy.http.headers import response_headers_for_client
from proxy.core.settings import OffloadSettings, SettingsError
from proxy.offload.pipeline import Prepared, prepare
from proxy.offload.quota import Quota
from proxy.offload.refs import RefStore
from proxy.http.relay import close_after, stream_back
from proxy.core.texts import RELOAD_TOOL_SCHEMAS
from proxy.reload.tools import ReloadTools, colliding_tool_names, collision_warning
from proxy.reload.search import SearchLimits
from proxy.offload.summarizer import DEFAULT_PROMPT
from proxy.core.tokens import counter_for_model_async

log = logging.getLogger("proxy.http.chat")


async def chat_completions(request: Request) -> Response:
    try:
        call = await ChatCall.open(request)
    except ProxyError as exc:
        return exc.response()
    await call.offload()
    try:
        if not call.inject_reload_tools and not call.prepared.summary_usage:
            return await call.forward()  # the upstream's answer as it is
        if call.body.get("stream"):
            return await call.forward_streaming_with_reload()
        return await call.forward_with_reload()
    except ProxyError as exc:
        return exc.response()
    except ClientDisconnected:
        return error_response(499, "Client closed the request.")


def model_of(body: dict) -> str | None:
    return body.get("model") if isinstance(body.get("model"), str) else None


def compressor_for(request: Request, body: dict, settings: OffloadSettings, caller: Caller) -> Compressor:
    """Summaries go to the caller's upstream with the caller's upstream credential."""
    services = services_of(request)
    prompt = services.settings_resolver.tenant_extra(caller.tenant, "summary_prompt") or DEFAULT_PROMPT
    model = settings.summary_model or model_of(body) or "gpt-4o-mini"
    headers = caller.upstream_headers(request.scope["headers"], body_replaced=True)
    ctx = SummaryContext(upstream=services.upstream, headers=headers, model=model, prompt=prompt,
                         timeout=services.settings.summary_timeout, wait=services.settings.summary_wait,
                         sealer=services.sealer, base=caller.base)
    return Compressor(services.store, caller.namespace, services.settings.store_ttl, ctx)


def request_settings(request: Request, caller: Caller) -> OffloadSettings:
    """Server defaults ← the caller's tenant ← X-Offload-* headers; a refused header is a 400."""
    try:
        return services_of(request).settings_resolver.resolve(request.headers, tenant=caller.tenant)
    except SettingsError as exc:
        raise ProxyError(400, exc.message, code="invalid_offload_header", param=exc.param) from exc


def quota_for(request: Request, caller: Caller) -> Quota:
    """The storage quota of the caller's tenant; a client's own key must also be one the
    upstream accepts (asked once with `GET models`, remembered for a while)."""
    services = services_of(request)
    verify = None
    if caller.kind == "client":
        async def ask() -> int | None:
            headers = [(k, v) for k, v in caller.upstream_headers(request.scope["headers"], body_replaced=True)
                       if k.lower() in CREDENTIAL_HEADERS + ACCOUNT_HEADERS]
            try:
                response = await services.upstream.send("GET", "models", headers=headers, base=caller.base)
            except ProxyError:
                return None
            await response.aclose()
            return response.status_code

        verify = services.credential_check.verifier(caller.scope, ask)
    return Quota(services.store, caller.scope, limit=services.settings.max_stored_bytes_per_namespace,
                 ttl=services.settings.store_ttl, verify=verify)


def offload_headers(prepared: Prepared) -> list[tuple[bytes, bytes]]:
    plan = prepared.plan
    headers = [
        (b"x-offload-action", prepared.action.encode()),
        (b"x-offload-tokens-before", str(plan.tokens_before).encode()),
        (b"x-offload-tokens-after", str(plan.tokens_after).encode()),
        (b"x-offload-refs", str(len(plan.refs)).encode()),  # references the forwarded payload carries
        (b"x-offload-refs-created", str(len(prepared.written)).encode()),  # stored for the first time now
    ]
    if prepared.summary_tokens:
        headers.append((b"x-offload-summary-tokens", str(prepared.summary_tokens).encode()))
    if prepared.warnings:
        headers.append((b"x-offload-warning", "; ".join(prepared.warnings).encode("ascii", "replace")))
    return headers


class ChatCall:
    """One chat completion request on its way through the proxy."""

    def __init__(self, request: Request, raw: bytes, body: dict, settings: OffloadSettings) -> None:
        self.request, self.raw, self.body, self.settings = request, raw, body, settings
        self.services = services_of(request)
        self.caller: Caller = request.state.caller
        self.namespace, self.base = self.caller.namespace, self.caller.base
        messages = body.get("messages")
        self.messages: list[Any] = messages if isinstance(messages, list) else []  # else: upstream validates
        self.watch = ClientWatch(request, body_read=True)
        self.query = request.scope.get("query_string", b"")

    @classmethod
    async def open(cls, request: Request) -> ChatCall:
        """Parse and validate; raises ProxyError (400) for what the proxy itself refuses."""
        services = services_of(request)
        raw = await request.body()
        body = parse_chat_body(raw, max_messages=services.settings.max_messages)
        settings = request_settings(request, request.state.caller)
        return cls(request, raw, body, settings)

    async def offload(self) -> None:
        """Plan and store (the pipeline), then prepare what goes upstream."""
        collisions = colliding_tool_names(self.body)
        if collisions:  # the client's own context_reload/context_search: handled as X-Offload-Mode: off
            self.settings = self.settings.model_copy(update={"mode": "off", "reload_tools": False})
        self.counter = await counter_for_model_async(model_of(self.body))
        self.refs = RefStore(self.services.store, self.namespace, self.services.settings.store_ttl, self.services.sealer,
                             quota=quota_for(self.request, self.caller))
        compressor = compressor_for(self.request, self.body, self.settings, self.caller)
        self.prepared = prepared = await prepare(self.messages, self.settings, self.counter, self.namespace,
                                                 self.refs, compressor, view=chat_format.VIEW)
        if collisions:
            prepared.warnings.append(collision_warning(collisions))
        for warning in prepared.warnings:
            log.warning("offload: %s", warning)
        plan = prepared.plan
        self.changed = prepared.action != "none"
        self.inject_reload_tools = self.settings.reload_tools and bool(plan.refs) and not prepared.store_failed
        self.headers = self.caller.upstream_headers(self.request.scope["headers"],
                                                    body_replaced=self.changed or self.inject_reload_tools)
        self.tools = ReloadTools(self.refs, self.counter, self.settings.max_reload_tokens, plan.refs,
                                 self.settings.session, SearchLimits.of(self.services.settings))
        self.extra_headers = offload_headers(prepared)
        self._note()

    def _note(self) -> None:
        """What the access log and the metrics need to know about this request."""
        rec = observe.current.get()
        if rec is None:
            return
        plan, prepared = self.prepared.plan, self.prepared
        rec.tenant, rec.stream, rec.model = self.namespace[:12], bool(self.body.get("stream")), model_of(self.body)
        rec.tokens_before, rec.tokens_after, rec.action = plan.tokens_before, plan.tokens_after, prepared.action
        rec.refs, rec.refs_created = len(plan.refs), len(prepared.written)
        rec.offloaded_bytes = sum(len(o.text.encode("utf-8", "surrogatepass")) for o in plan.offloads
                                  if o.ref in prepared.written)
        rec.warnings = prepared.warnings

    def _record_events(self) -> BackgroundTask:
        async def record() -> None:
            await events.record(self.services.store, self.namespace, self.settings.session,
                                self.prepared.events + self.tools.events, self.services.settings.store_ttl,
                                sealer=self.services.sealer)

        return BackgroundTask(record)

    async def _send(self, content: bytes) -> httpx.Response:
        response = await self.services.upstream.send("POST", "chat/completions", query=self.query,
                                                  headers=self.headers, content=content, base=self.base)
        if self.caller.kind == "client":  # what the upstream thinks of the client's own key
            self.services.credential_check.remember(self.caller.scope, response.status_code)
        return response

    async def send_round(self, messages: list[Any], with_tools: bool) -> httpx.Response:
        payload = {**self.body, "messages": messages}
        if with_tools:
            payload["tools"] = [*(self.body.get("tools") or []), *RELOAD_TOOL_SCHEMAS]
        return await self._send(jsonio.dumps(payload))

    async def forward(self) -> Response:
        """No reload tools: the (reduced) request goes up, the answer comes back untouched."""
        content = jsonio.dumps({**self.body, "messages": self.prepared.plan.items}) if self.changed else self.raw
        response = await self.watch.run(self._send(content))
        out = await stream_back(response, self.extra_headers)
        out.background = self._record_events()
        return out

    def _budget(self) -> reload_loop.Budget:
        """No reload rounds without injected tools (the loop then only adds the summary's usage)."""
        rounds = self.settings.max_reload_rounds if self.inject_reload_tools else 0
        return reload_loop.Budget(rounds, self.services.settings.reload_budget)

    async def forward_with_reload(self) -> Response:
        budget = self._budget()
        result = await self.watch.run(reload_loop.complete(self.prepared.plan.items, self.send_round, self.tools,
                                                           budget, extra_usage=self.prepared.summary_usage))
        out = Response(result.body, status_code=result.status, background=self._record_events())
        out.raw_headers = (
            response_headers_for_client(result.response.headers.raw, decoded=True)
            + [(b"content-length", str(len(result.body)).encode())]
            + self.extra_headers
        )
        return out

    async def forward_streaming_with_reload(self) -> Response:
        budget = self._budget()
        messages = self.prepared.plan.items
        offered = budget.more(0)
        first = await self.watch.run(self.send_round(messages, offered))
        if first.status_code != 200:
            return await stream_back(first, self.extra_headers)
        events_ = reload_loop.stream(first, offered, messages, self.send_round, self.tools, budget,
                                     extra_usage=self.prepared.summary_usage)
        out = StreamingResponse(close_after(first, events_), status_code=200, background=self._record_events())
        headers = response_headers_for_client(first.headers.raw, decoded=True)
        if not first.headers.get("content-type", "").startswith("text/event-stream"):  # e.g. an HTML page:
            headers = [(k, v) for k, v in headers if k.lower() != b"content-type"]  # the events are the proxy's
            headers.append((b"content-type", b"text/event-stream; charset=utf-8"))
        out.raw_headers = headers + self.extra_headers
        return out
