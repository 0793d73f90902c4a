"""The managed endpoints (`POST /v1/chat/completions`, `POST /v1/responses`, `POST /v1/messages`
and `POST /v1/messages/count_tokens`): one request path for every wire format: read → the turn
(`proxy.turn`: chain, emulation, edits, plan and store, inline compaction) → send → answer
(the reload loop).

The format (`proxy.core.wire.WireFormat`) reads and writes the body; everything else (settings,
quota, the turn, headers, events, metrics, the reload loop) is the same for all.
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

from proxy import telemetry
from proxy.core import jsonio, large_json
from proxy.core.jsonio import JsonObject
from proxy.core.settings import OffloadSettings
from proxy.core.wire import WireFormat
from proxy.formats.chat import CHAT
from proxy.formats.json_body import LARGE_BODY
from proxy.formats.messages import MESSAGES, without_emulated_betas
from proxy.formats.openai_cache import session_cache_key
from proxy.formats.responses import RESPONSES
from proxy.http import accounting, billing, cache_session, emulated_answers, error_map, holdout, observed
from proxy.http.body_charset import refuse_other_charsets
from proxy.http.body_encoding import codings_of, decoded_body
from proxy.http.call_parts import compressor_for, request_settings, tenant_store
from proxy.http.caller import Caller
from proxy.http.disconnect import ClientWatch
from proxy.http.family import family_of
from proxy.http.headers import response_headers_for_client
from proxy.http.relay import close_after, stream_back
from proxy.http.services import services_of
from proxy.http.telemetry import current as current_record
from proxy.offload import cpu_pool, response_chains
from proxy.offload.refs import RefStore
from proxy.offload.summaries import Compressor
from proxy.reload import loop as reload_loop
from proxy.reload import search_pool
from proxy.reload.search import SearchLimits
from proxy.turn import Turn, TurnInput, run_turn
from proxy.upstream.native import accepts_cache_key, emulates

log = logging.getLogger("proxy.http.managed")
# An upstream's answers to a request asking for a stream's usage that send it again as the client
# sent it: some refuse the field asking adds (Azure OpenAI's older API versions, strict gateways:
# "Unknown parameter: 'stream_options'"), and any other fault is then the client's own, answered so.
REFUSED = (400, 422)


async def chat_completions(request: Request) -> Response:
    return await handle(request, CHAT)


async def responses(request: Request) -> Response:
    return await handle(request, RESPONSES)


async def messages(request: Request) -> Response:
    return await handle(request, MESSAGES)


async def handle(request: Request, fmt: WireFormat) -> Response:
    """Read → turn → send → answer."""

    async def run() -> Response:
        call = await ManagedCall.open(request, fmt)
        if observed.observing(call.settings):  # forwarded as received, the plan made beside it
            return await observed.forward(call)
        arm, call.derived = await holdout.arm_of(call)
        if arm is None:
            return await managed(call)
        await holdout.mark(call, arm)
        if arm == "control":  # forwarded as received, recorded as a turn of its session
            return await holdout.watched(call, lambda: holdout.forward_control(call, call.derived))
        return await holdout.watched(call, lambda: managed(call))

    return await answered(request, run)


async def managed(call: ManagedCall) -> Response:
    """The managed turn of an open call and its answer."""
    turn = await call.offload()
    if turn.inline.paused:  # the compaction alone answers: no turn (pause_after_compaction, compaction_trigger)
        return emulated_answers.paused_response(turn, background=call.after())
    if turn.answers_as_is:
        return await call.forward()  # the upstream's answer as it is
    if turn.body.get("stream") is True:
        return await call.forward_streaming_with_reload()
    return await call.forward_with_reload()


async def answered(request: Request, run: Callable[[], Awaitable[Response]]) -> Response:
    """`run()`'s response, or the proxy's own error in the shape of the API the client speaks
    (`proxy.http.error_map`). Every step of a managed turn degrades on a failing store, so one
    that reaches here is logged as a bug."""
    return await error_map.answered(run, shape=family_of(request.scope), store_failure_is_a_bug=True)


class ManagedCall:
    """One request to a managed endpoint on its way through the proxy: read (`open`), the turn
    (`offload`, `proxy.turn`), then sent and answered."""

    turn: Turn

    def __init__(
        self,
        request: Request,
        fmt: WireFormat,
        *,
        raw: bytes,
        body: JsonObject,
        history: list[Any],
        settings: OffloadSettings,
        decoded: bool = False,
    ) -> None:
        # `raw`: the body as sent, its Content-Encoding undone (`decoded`: there was one)
        self.request, self.fmt, self.raw, self.body, self.settings = request, fmt, raw, body, settings
        self.history, self.decoded = history, decoded
        self.services = services_of(request)
        self.caller: Caller = request.state.caller
        self.namespace, self.base = self.caller.namespace, self.caller.base
        self.watch = ClientWatch(request, body_read=True)
        self.query = request.scope.get("query_string", b"")
        self.previous = body.get("previous_response_id")  # as the client sent it (the statistics' session)
        self.used_up: str | None = None  # a conversation's record, forgotten when the upstream accepts the request
        self.rec: telemetry.RequestRecord | None = None
        # the sink the turn's reload loop and tools report to: the request's record (`telemetry`)
        self.record: telemetry.TurnRecord = current_record.get() or telemetry.NO_RECORD
        self.headers: list[tuple[bytes, bytes]] = []
        self.cache = cache_session.CacheSession()  # the session's prompt cache: its record, what went first
        self.derived: tuple[str | None, str | None] | None = None  # the statistics' session, once derived

    @classmethod
    async def open(cls, request: Request, fmt: WireFormat) -> ManagedCall:
        """Read, parse and validate; raises ProxyError (400) for what the proxy itself refuses.
        A body over LARGE_BODY is joined, parsed, checked and split into its history off the
        event loop (tens of MB take seconds of CPU)."""
        services = services_of(request)
        codings = codings_of(request.headers.getlist("content-encoding"))  # 415 for an unknown one
        refuse_other_charsets(request.headers.getlist("content-type"))  # read as the upstream reads it
        chunks = [chunk async for chunk in request.stream() if chunk]
        caller: Caller = request.state.caller

        if codings:  # decided on what it inflates to (`body_encoding.decoded_body`)
            chunks = [await decoded_body(b"".join(chunks), codings, limit=services.settings.max_body_bytes)]

        def parsed() -> tuple[bytes, JsonObject, list[Any]]:
            raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            body = fmt.parse(raw, max_items=services.settings.max_messages)
            caller.check_body(body)
            return raw, body, fmt.history(body)

        raw, body, history = await cpu_pool.CPU(sum(map(len, chunks)) > LARGE_BODY)(parsed)
        settings = request_settings(request, caller)
        if body.get("background") is True:  # nobody would run the injected calls of a background response
            settings = settings.model_copy(update={"reload_tools": False})
        return cls(request, fmt, raw=raw, body=body, history=history, settings=settings, decoded=bool(codings))

    def turn_input(
        self, *, new_summaries: bool = True, prompt_cache: bool = True, cache_key: str | None = None
    ) -> TurnInput:
        """The turn of this request as plain values: the caller bound into the store handle and
        the compressor factory."""
        services, caller = self.services, self.caller
        tenant = tenant_store(self.request, caller)

        def compressor(body: JsonObject, settings: OffloadSettings, refs: RefStore, *, background: bool) -> Compressor:
            return compressor_for(
                self.request,
                body,
                settings=settings,
                caller=caller,
                tenant=tenant,
                fmt=self.fmt,
                refs=refs,
                background=background,
                cuts=self.cache.cuts,
                session=self.cache.session,
            )

        return TurnInput(
            self.fmt,
            self.raw,
            self.body,
            self.history,
            self.settings,
            tenant,
            compressor,
            emulating=emulates(self.settings.context_management, self.base or services.settings.upstream_base),
            shared_key=caller.shared_key,
            search_limits=SearchLimits.of(services.settings),
            new_summaries=new_summaries,
            prompt_cache=prompt_cache,
            cache_key=cache_key,
            record=self.record,
        )

    async def cache_key(self) -> str | None:
        """The `prompt_cache_key` of this request's session, for OpenAI's own API and
        `--cache-control auto` only (`proxy.formats.openai_cache`); None: none is added."""
        if self.settings.cache_control != "auto" or not accepts_cache_key(
            self.base or self.services.settings.upstream_base
        ):
            return None
        session = self.settings.session or (await accounting.derived_session(self, self.body, self.history))[0]
        return session_cache_key(self.namespace, session) if session else None

    async def offload(self, *, new_summaries: bool = True, prompt_cache: bool = True) -> Turn:
        """The turn (`proxy.turn`), then what goes upstream with it. `new_summaries`: False uses
        the summaries ready in the store and never makes one (counting tokens); `prompt_cache`:
        False leaves the client's caching as sent (a count is the same with the proxy's)."""
        if new_summaries:  # a turn that goes upstream: its cuts priced with the session's cache
            await cache_session.before(self)
        key = await self.cache_key() if prompt_cache else None
        given = self.turn_input(new_summaries=new_summaries, prompt_cache=prompt_cache, cache_key=key)
        self.tenant = given.tenant
        turn = self.turn = await run_turn(given)
        if turn.inject_reload_tools:
            search_pool.warm()  # the model may search: its workers start while the upstream answers
        self.body, self.settings, self.used_up = turn.body, turn.settings, turn.used_up
        self.headers = self.caller.upstream_headers(
            self.request.scope["headers"],
            body_replaced=turn.changed
            or turn.inject_reload_tools
            or self.decoded
            or self.fmt.usage.asking(self.body) is not None,
        )
        if turn.emulation.emulating:
            self.headers = without_emulated_betas(self.headers)
        self.rec = await accounting.note(  # what the access log, the metrics and the statistics learn
            current_record.get(),
            turn.report(),
            namespace=self.namespace,
            derive=functools.partial(accounting.known_or_derived, self, self.derived),
        )
        return turn

    async def _settle_chain(self) -> None:
        """After the last round, before the client's answer: what its next request needs."""
        rounds = self.turn.rounds
        if self.body.get("store") is False or not rounds.first_id:
            return
        outputs: list[Any] = []
        try:
            if rounds.unanswered:
                results = await reload_loop.run_calls(self.turn.tools, rounds.unanswered, self.budget.deadline)
                outputs = rounds.carried(results)
            conversation = response_chains.conversation_key(self.body.get("conversation"))
            if conversation and outputs:
                await self.tenant.remember_chain(conversation, response_chains.Continuation(None, outputs))
            elif not conversation and (rounds.last_id != rounds.first_id or outputs):
                later = rounds.last_id if rounds.last_id != rounds.first_id else None
                await self.tenant.remember_chain(rounds.first_id, response_chains.Continuation(later, outputs))
        except Exception:  # noqa: BLE001 - the client's answer never waits on this failing
            log.exception("remembering the response chain failed")

    def after(self) -> BackgroundTask:
        """Once the client has its answer: the events."""

        async def record() -> None:
            turn = self.turn
            await turn.prepared.start_background()  # if the upstream never answered
            accounting.learn_reply(self, turn.rounds.first_id)
            await self.tenant.record_events(turn.settings.session, turn.events)
            await cache_session.after(self)  # the session's record, its prefix held for keep-alive

        return BackgroundTask(record)

    async def _send(self, content: bytes) -> httpx2.Response:
        if self.rec is not None and self.rec.forwarded is None:  # the turn's first: its prefix reuse, measured later
            self.rec.forwarded = content
        response = await self.services.upstream.send(
            "POST",
            self.fmt.endpoint,
            query=self.query,
            headers=self.headers,
            content=content,
            base=self.base,
            record=current_record.get(),
        )
        cache_session.sent(self, content, response.status_code)
        if self.caller.kind == "client":  # what the upstream thinks of the client's own key
            self.services.credential_check.remember(self.caller.scope, response.status_code)
        await self.turn.prepared.start_background()  # the turn is out and answering: now its summaries
        if self.used_up and response.status_code == 200:
            used_up, self.used_up = self.used_up, None
            await self.tenant.forget_chain(used_up)
        return response

    async def serialised(self, payload: JsonObject) -> bytes:
        """The payload as it goes upstream: a large one written off the loop, a piece at a time."""
        if len(self.raw) > LARGE_BODY:
            return await cpu_pool.CPU(True)(large_json.dumps_yielding, payload)
        return jsonio.dumps(payload)

    async def send_round(self, payload: JsonObject) -> httpx2.Response:
        """One round's request, asking for the usage of its stream where the client did not
        (`UsageReader.asking`: the format's rounds take out what that adds), sent again as it is
        when the upstream refuses the request asking (`REFUSED`)."""
        asking = self.fmt.usage.asking(payload)
        response = await self._send(await self.serialised(asking or payload))
        if asking is not None and response.status_code in REFUSED:
            await response.aclose()
            response = await self._send(await self.serialised(payload))
        return response

    async def forward(self) -> Response:
        """No reload tools: the (reduced) request goes up, the answer comes back untouched (but
        for what asking for a stream's usage added: `proxy.http.billing`), its bill read as it
        passes. A request asking that the upstream refuses goes again as the client sent it."""
        payload = self.fmt.with_history(self.body, self.turn.items) if self.turn.changed else None
        asking = self.fmt.usage.asking(payload or self.body)
        sent = asking if asking is not None else payload
        content = self.raw if sent is None else await self.serialised(sent)
        response = await self.watch.run(self._send(content))
        if asking is not None and response.status_code in REFUSED:  # it may not know the field asking adds
            await response.aclose()
            asking = None
            content = self.raw if payload is None else await self.serialised(payload)
            response = await self.watch.run(self._send(content))
        if asking is not None:
            out = await billing.unasked_stream(
                response, self.turn.extra_headers, shape=self.caller.family, rec=self.rec, usage=self.fmt.usage
            )
        else:
            out = await stream_back(response, self.turn.extra_headers, shape=self.caller.family)
            billing.tap(self.rec, out, self.fmt.usage)
        accounting.tap_reply(self, out)
        out.background = self.after()
        return out

    def _budget(self) -> reload_loop.Budget:
        """No reload rounds without injected tools (the loop then only adds the summary's usage)."""
        rounds = self.turn.settings.max_reload_rounds if self.turn.inject_reload_tools else 0
        return reload_loop.Budget(rounds, self.services.settings.reload_budget)

    async def forward_with_reload(self) -> Response:
        budget = self.budget = self._budget()
        result = await self.watch.run(
            reload_loop.complete(
                self.turn.rounds,
                self.send_round,
                tools=self.turn.tools,
                budget=budget,
                usage=self.fmt.usage,
                record=self.record,
            )
        )
        if result.status == 200:
            await self._settle_chain()
        out = Response(result.body, status_code=result.status, background=self.after())
        out.raw_headers = (
            response_headers_for_client(result.response.headers.raw, decoded=True)
            + [(b"content-length", str(len(result.body)).encode())]
            + self.turn.extra_headers
            + [(reload_loop.RELOAD_ROUNDS_HEADER, str(result.rounds).encode())]
        )
        return out

    async def forward_streaming_with_reload(self) -> Response:
        budget = self.budget = self._budget()
        turn = self.turn
        first = await self.watch.run(self.send_round(turn.rounds.request(budget.more(0))))
        if first.status_code != 200:
            return await stream_back(first, turn.extra_headers, shape=self.caller.family)
        events_ = reload_loop.stream(
            first,
            turn.rounds,
            self.send_round,
            tools=turn.tools,
            budget=budget,
            before_finish=self._settle_chain,
            usage=self.fmt.usage,
            record=self.record,
        )
        out = StreamingResponse(close_after(first, events_), status_code=200, background=self.after())
        headers = response_headers_for_client(first.headers.raw, decoded=True)
        if not first.headers.get("content-type", "").startswith("text/event-stream"):  # e.g. an HTML page:
            headers = [(k, v) for k, v in headers if k.lower() != b"content-type"]  # the events are the proxy's
            headers.append((b"content-type", b"text/event-stream; charset=utf-8"))
        out.raw_headers = headers + turn.extra_headers
        return out
