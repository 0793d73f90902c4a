"""The managed endpoints (`POST /v1/chat/completions`, `POST /v1/responses`, `POST /v1/messages`
and `POST /v1/messages/count_tokens`): one request path for every wire format: settings → plan →
store → upstream → reload loop.

The format (`proxy.core.wire.WireFormat`) reads and writes the body; everything else (settings,
quota, the pipeline, headers, events, metrics, the reload loop) is the same for all.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from proxy.core import jsonio, large_json
from proxy.core.rounds import Rounds
from proxy.core.texts import RELOAD_TOOL_SCHEMAS
from proxy.core.settings import OffloadSettings
from proxy.core.tokens import counter_for_model_async
from proxy.core.wire import WireFormat
from proxy.formats.chat import CHAT
from proxy.formats.messages import MESSAGES
from proxy.formats.responses import RESPONSES
from proxy.http.family import family_of
from proxy.http import accounting
from proxy.http.body_encoding import codings_of, decoded_body
from proxy.http import emulated_answers, error_map
from proxy.http.call_parts import compressor_for, model_of, quota_for, request_settings
from proxy.http.caller import Caller
from proxy.http.disconnect import ClientWatch
from proxy.http.headers import offload_headers, response_headers_for_client
from proxy.http.relay import close_after, stream_back
from proxy.http.services import services_of
from proxy.formats.json_body import LARGE_BODY
from proxy.emulation import edits as emulation_edits, inline, request as emulation_request
from proxy.emulation.betas import without_emulated_betas
from proxy.offload import cpu_pool, events, response_chains
from proxy.offload.compaction_records import CompactionRecords
from proxy.upstream.native import emulates
from proxy.core.compaction import Plan
from proxy.offload.pipeline import Prepared, prepare
from proxy.offload.refs import RefStore
from proxy.reload import loop as reload_loop, search_pool
from proxy.reload.search import SearchLimits
from proxy.reload.tools import ReloadTools, collision_warning

log = logging.getLogger("proxy.http.managed")


async def chat_completions(request: Request) -> Response:
    return await handle(request, CHAT)


async def responses(request: Request) -> Response:
    return await handle(request, RESPONSES)


async def messages(request: Request) -> Response:
    return await handle(request, MESSAGES)


async def handle(request: Request, fmt: WireFormat) -> Response:
    async def run() -> Response:
        call = await ManagedCall.open(request, fmt)
        await call.offload()
        if call.inline.paused:  # the compaction alone answers: no turn (pause_after_compaction)
            return emulated_answers.paused_response(call)
        if (not call.inject_reload_tools and not call.prepared.summary_usage and not call.inline.lead
                and call.emulation.applied_edits is None):
            return await call.forward()  # the upstream's answer as it is
        if call.body.get("stream") is True:
            return await call.forward_streaming_with_reload()
        return await call.forward_with_reload()

    return await answered(request, run)


async def answered(request: Request, run: Callable[[], Awaitable[Response]]) -> Response:
    """`run()`'s response, or the proxy's own error in the shape of the API the client speaks
    (`proxy.http.error_map`). Every step of a managed turn degrades on a failing store, so one
    that reaches here is logged as a bug."""
    return await error_map.answered(run, shape=family_of(request.scope), store_failure_is_a_bug=True)


class ManagedCall:
    """One request to a managed endpoint on its way through the proxy."""

    def __init__(self, request: Request, fmt: WireFormat, *, raw: bytes, body: dict, history: list[Any],
                 settings: OffloadSettings, decoded: bool = False) -> None:
        # `raw`: the body as sent, its Content-Encoding undone (`decoded`: there was one)
        self.request, self.fmt, self.raw, self.body, self.settings = request, fmt, raw, body, settings
        self.decoded = decoded
        self.services = services_of(request)
        self.caller: Caller = request.state.caller
        self.namespace, self.base = self.caller.namespace, self.caller.base
        self.messages: list[Any] = history
        self.watch = ClientWatch(request, body_read=True)
        self.query = request.scope.get("query_string", b"")
        self.continued = False  # previous_response_id replaced by the response that holds the whole exchange
        self.carried: list[Any] = []  # answers to injected calls the client never saw: put first, never offloaded
        self.used_up: str | None = None  # a conversation's record, forgotten when the upstream accepts the request
        self.previous = body.get("previous_response_id")  # as the client sent it (the statistics' session)

    @classmethod
    async def open(cls, request: Request, fmt: WireFormat) -> ManagedCall:
        """Read, parse and validate; raises ProxyError (400) for what the proxy itself refuses.
        A body over LARGE_BODY is joined, parsed, checked and split into its history off the
        event loop (tens of MB take seconds of CPU)."""
        services = services_of(request)
        codings = codings_of(request.headers.getlist("content-encoding"))  # 415 for an unknown one
        chunks = [chunk async for chunk in request.stream() if chunk]
        caller: Caller = request.state.caller

        if codings:  # decided on what it inflates to (`body_encoding.decoded_body`)
            chunks = [await decoded_body(b"".join(chunks), codings, limit=services.settings.max_body_bytes)]

        def parsed() -> tuple[bytes, dict, list[Any]]:
            raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            body = fmt.parse(raw, max_items=services.settings.max_messages)
            caller.check_body(body)
            return raw, body, fmt.history(body)

        raw, body, history = await cpu_pool.CPU(sum(map(len, chunks)) > LARGE_BODY)(parsed)
        settings = request_settings(request, caller)
        if body.get("background") is True:  # nobody would run the injected calls of a background response
            settings = settings.model_copy(update={"reload_tools": False})
        return cls(request, fmt, raw=raw, body=body, history=history, settings=settings, decoded=bool(codings))

    async def _continue_chain(self) -> None:
        """Continue a stored exchange the way `proxy.offload.response_chains` remembers it: from the
        response that holds the whole exchange, with the answers of the injected calls the
        client never saw in front of its input."""
        services = self.services
        if not self.fmt.stored:
            return
        previous = self.body.get("previous_response_id")
        conversation = response_chains.conversation_key(self.body.get("conversation"))
        name = previous if isinstance(previous, str) else conversation
        if name is None:
            return
        found = await response_chains.resolve(services.store, self.namespace, name, services.settings.store_ttl,
                                     sealer=services.sealer)
        if found is None:
            return
        if name == conversation and found.outputs:
            self.used_up = conversation  # forgotten once the upstream has taken them (a 200)
        if found.response_id and found.response_id != previous and name == previous:
            self.body = {**self.body, "previous_response_id": found.response_id}
            self.continued = True
        if found.outputs:  # put in front of the reduced input: a reload result is never offloaded again
            self.carried, self.continued = found.outputs, True

    async def _settle_chain(self) -> None:
        """After the last round, before the client's answer: what its next request needs."""
        rounds, services = self.rounds, self.services
        if self.body.get("store") is False or not rounds.first_id:
            return
        outputs: list[Any] = []
        try:
            if rounds.unanswered:
                results = await reload_loop.run_calls(self.tools, rounds.unanswered, self.budget.deadline)
                outputs = rounds.carried(results)
            conversation = response_chains.conversation_key(self.body.get("conversation"))
            if conversation and outputs:
                await response_chains.remember(services.store, self.namespace, conversation, response_chains.Continuation(None, outputs),
                                      services.settings.store_ttl, sealer=services.sealer)
            elif not conversation and (rounds.last_id != rounds.first_id or outputs):
                later = rounds.last_id if rounds.last_id != rounds.first_id else None
                await response_chains.remember(services.store, self.namespace, rounds.first_id,
                                      response_chains.Continuation(later, outputs), services.settings.store_ttl,
                                      sealer=services.sealer)
        except Exception:  # noqa: BLE001 - the client's answer never waits on this failing
            log.exception("remembering the response chain failed")

    def _small_tokens(self) -> int | None:
        """The tokens of a request too small to offload anything, else None (the pipeline runs).

        Small: fewer bytes than the smallest threshold (without `ref=`, nor an escape that could
        spell it, nor a compaction token standing for one: no reference to offer the reload tools
        for), and then fewer tokens too (an image
        part counts more tokens than its bytes). The pipeline is skipped (most small requests)."""
        settings = self.settings
        limit = min(settings.max_total_tokens, settings.max_tool_message_tokens)
        # a compaction token replaced, or content cleared by an edit: their ref= is not in the raw body
        if (self.carried or self.emulation.replaced or self.edits.offloads or len(self.raw) > limit
                or b"ref=" in self.raw or b"\\u" in self.raw):
            return None
        tokens = self.counter.messages(self.messages)
        return tokens if tokens <= limit else None

    async def offload(self, *, new_summaries: bool = True) -> None:
        """Plan and store (the pipeline), then prepare what goes upstream. `new_summaries`:
        False uses the summaries ready in the store and never makes one (counting tokens)."""
        await self._continue_chain()
        await self._begin_emulation()
        collisions = self.fmt.colliding_tool_names(self.body)
        if collisions:  # the client's own context_reload/context_search: handled as X-Offload-Mode: off
            self.settings = self.settings.model_copy(update={"mode": "off", "reload_tools": False})
        # the provider's own context management (the emulation's when the proxy applies it)
        self.provider = inline.provider_for(self.fmt.provider_context(self.body), self.emulation)
        self.counter = await counter_for_model_async(model_of(self.body))
        self.refs = RefStore(self.services.store, self.namespace, self.services.settings.store_ttl, self.services.sealer,
                             quota=quota_for(self.request, self.caller))
        self.edits = await emulation_edits.apply(self.emulation, self.messages, fmt=self.fmt, body=self.body,
                                                 counter=self.counter, refs=self.refs, namespace=self.namespace,
                                                 session=self.settings.session)
        self.messages = self.edits.items
        tokens = self._small_tokens()
        if tokens is not None:
            self.prepared = prepared = Prepared(Plan(self.messages, tokens_before=tokens, tokens_after=tokens))
        else:
            compressor = compressor_for(self.request, self.body, self.settings, self.caller, fmt=self.fmt,
                                        refs=self.refs)
            self.prepared = prepared = await prepare(self.messages, self.settings, counter=self.counter,
                                                     namespace=self.namespace, refs=self.refs, compressor=compressor,
                                                     view=self.fmt.view, new_summaries=new_summaries,
                                                     provider=self.provider)
        self.inline = await inline.compact(self, new_summaries=new_summaries, compressor=functools.partial(
            compressor_for, self.request, self.body, self.settings, self.caller, fmt=self.fmt, refs=self.refs,
            background=False))
        if collisions:
            prepared.warnings.append(collision_warning(collisions))
        for warning in prepared.warnings:
            log.warning("offload: %s", warning)
        plan = prepared.plan
        # on the shared key the upstream gets the object the checks read (a duplicate key could
        # otherwise show it a value the proxy never saw): re-serialised, as a changed body is
        self.changed = (prepared.action != "none" or self.continued or self.caller.shared_key
                        or self.emulation.changed)
        # a compaction_trigger asks for a compaction, not a turn: it stays the last item, no round follows it
        self.inject_reload_tools = (self.settings.reload_tools and bool(plan.refs) and not prepared.store_failed
                                    and not self.provider.trigger)
        if self.inject_reload_tools:
            search_pool.warm()  # the model may search: its workers start while the upstream answers
        self.headers = self.caller.upstream_headers(
            self.request.scope["headers"], body_replaced=self.changed or self.inject_reload_tools or self.decoded)
        if self.emulation.emulating:
            self.headers = without_emulated_betas(self.headers)
        self.tools = ReloadTools(self.refs, self.counter, max_tokens=self.settings.max_reload_tokens,
                                 request_refs=plan.refs, session=self.settings.session,
                                 limits=SearchLimits.of(self.services.settings))
        self.items = [*self.carried, *plan.items]
        self.rounds: Rounds = self.fmt.rounds(self.body, self.items, RELOAD_TOOL_SCHEMAS,
                                              extra_usage=prepared.summary_usage, lead=self.inline.lead)
        emulation_edits.settle(self.edits, prepared, self.rounds)
        self.extra_headers = offload_headers(prepared)
        self.rec = await accounting.note(self)  # what the access log, the metrics and the statistics learn

    async def _begin_emulation(self) -> None:
        """The providers' context management, when the proxy applies it (`proxy.emulation`)."""
        services = self.services
        self.records = CompactionRecords(services.store, self.namespace, services.settings.store_ttl,
                                         services.sealer, secret=services.settings.names_key,
                                         quota=quota_for(self.request, self.caller),
                                         api=self.fmt.records_api)
        base = self.base or services.settings.upstream_base
        self.emulation = await emulation_request.begin(
            self.body, self.messages, view=self.fmt.view, tokens=self.fmt.compaction == "items", records=self.records,
            emulating=emulates(self.settings.context_management, base), blocks=self.fmt.compaction == "blocks", raw=self.raw)
        self.body, self.messages = self.emulation.body, self.emulation.items

    def after(self) -> BackgroundTask:
        """Once the client has its answer: the events."""
        async def record() -> None:
            self.prepared.start_background()  # if the upstream never answered
            accounting.learn_reply(self, self.rounds.first_id)
            services = self.services
            await events.record(services.store, self.namespace, self.settings.session,
                                self.prepared.events + self.tools.events, services.settings.store_ttl,
                                sealer=services.sealer)

        return BackgroundTask(record)

    async def _send(self, content: bytes) -> httpx2.Response:
        if self.rec is not None and self.rec.forwarded is None:  # the turn's first: its prefix reuse, measured later
            self.rec.forwarded = content
        response = await self.services.upstream.send("POST", self.fmt.endpoint, query=self.query,
                                                  headers=self.headers, content=content, base=self.base)
        if self.caller.kind == "client":  # what the upstream thinks of the client's own key
            self.services.credential_check.remember(self.caller.scope, response.status_code)
        self.prepared.start_background()  # the turn is out and answering: now its summaries
        if self.used_up and response.status_code == 200:
            used_up, self.used_up = self.used_up, None
            await response_chains.forget(self.services.store, self.namespace, used_up, sealer=self.services.sealer)
        return response

    async def serialised(self, payload: dict) -> bytes:
        """The payload as it goes upstream: a large one written off the loop, a piece at a time."""
        if len(self.raw) > LARGE_BODY:
            return await cpu_pool.CPU(True)(large_json.dumps_yielding, payload)
        return jsonio.dumps(payload)

    async def send_round(self, payload: dict) -> httpx2.Response:
        return await self._send(await self.serialised(payload))

    async def forward(self) -> Response:
        """No reload tools: the (reduced) request goes up, the answer comes back untouched."""
        if self.changed:
            content = await self.serialised(self.fmt.with_history(self.body, self.items))
        else:
            content = self.raw
        response = await self.watch.run(self._send(content))
        out = await stream_back(response, self.extra_headers, shape=self.caller.family)
        accounting.tap_reply(self, out)
        out.background = self.after()
        return out

    def _budget(self) -> reload_loop.Budget:
        """No reload rounds without injected tools (the loop then only adds the summary's usage)."""
        rounds = self.settings.max_reload_rounds if self.inject_reload_tools else 0
        return reload_loop.Budget(rounds, self.services.settings.reload_budget)

    async def forward_with_reload(self) -> Response:
        budget = self.budget = self._budget()
        result = await self.watch.run(reload_loop.complete(self.rounds, self.send_round, self.tools, budget))
        if result.status == 200:
            await self._settle_chain()
        out = Response(result.body, status_code=result.status, background=self.after())
        out.raw_headers = (
            response_headers_for_client(result.response.headers.raw, decoded=True)
            + [(b"content-length", str(len(result.body)).encode())]
            + self.extra_headers
            + [(reload_loop.RELOAD_ROUNDS_HEADER, str(result.rounds).encode())]
        )
        return out

    async def forward_streaming_with_reload(self) -> Response:
        budget = self.budget = self._budget()
        first = await self.watch.run(self.send_round(self.rounds.request(budget.more(0))))
        if first.status_code != 200:
            return await stream_back(first, self.extra_headers, shape=self.caller.family)
        events_ = reload_loop.stream(first, self.rounds, self.send_round, self.tools, budget,
                                     before_finish=self._settle_chain)
        out = StreamingResponse(close_after(first, events_), status_code=200, background=self.after())
        headers = response_headers_for_client(first.headers.raw, decoded=True)
        if not first.headers.get("content-type", "").startswith("text/event-stream"):  # e.g. an HTML page:
            headers = [(k, v) for k, v in headers if k.lower() != b"content-type"]  # the events are the proxy's
            headers.append((b"content-type", b"text/event-stream; charset=utf-8"))
        out.raw_headers = headers + self.extra_headers
        return out
