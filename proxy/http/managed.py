"""The managed endpoints (`POST /v1/chat/completions`, `POST /v1/responses`, `POST /v1/messages`
and `POST /v1/messages/count_tokens`): one request path for every wire format and every
transport (an HTTP request, `ManagedCall.open`; a WebSocket's `response.create`,
`proxy.http.websocket.dispatch`, from the parts `ManagedCall.read` takes): read the body,
build the exchange's context (`ExchangeContext`: the caller's store handle and admission, the
upstream, the summariser factory, the settings, the request's record), run the `Exchange`
(`proxy.turn`: prepare the turn → send rounds → settle) and write its answer as the response.

The format (`proxy.core.wire.WireFormat`) reads and writes the body; everything else (settings,
quota, the turn, headers, events, metrics, the reload loop) is the same for all.

A managed turn and its session's prompt cache: what the turn learns before it is planned (when
the session's prefix was last sent: `proxy.core.prompt_cache` prices its cuts with it), and what
it leaves after it was forwarded (the new record, `proxy.offload.cache_keepalive`; the exact prefix
held for keep-alive pings, `proxy.offload.cache_keepalive`).

The session is the statistics' (`X-Offload-Session`, else derived from the conversation's start,
`proxy.http.accounting.derived_session`), decided before the turn so the record read and the
record written are the same one. Neither step ever fails the request.

The answers the proxy writes itself when it emulates the providers' context management: a
turn whose compaction alone answers (no upstream call: a Messages turn paused after its
compaction, a Responses `compaction_trigger`), and `count_tokens` with the clearing edits'
`original_input_tokens` (`proxy.turn._context_management`, `proxy.turn._context_management`)."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import httpx2
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from proxy import telemetry
from proxy.core import jsonio
from proxy.core import prompt_cache as ka
from proxy.core import prompt_cache as pc
from proxy.core.jsonio import JsonObject
from proxy.core.prompt_cache import CutContext, LastSent, digest
from proxy.core.settings import OffloadSettings
from proxy.core.wire import WireFormat
from proxy.errors import Shape
from proxy.formats.chat import CHAT
from proxy.formats.json_body import LARGE_BODY
from proxy.formats.messages import MESSAGES, without_emulated_betas
from proxy.formats.prompt_cache import profile_name, session_cache_key
from proxy.formats.responses import RESPONSES
from proxy.http import accounting, error_map, observed
from proxy.http.body import codings_of, decoded_body, refuse_other_charsets
from proxy.http.call_parts import (
    RawHeaders,
    Services,
    admission_for,
    compressor_for,
    request_settings,
    services_of,
    tenant_store,
)
from proxy.http.caller import Caller
from proxy.http.disconnect import ClientWatch
from proxy.http.headers import response_headers_for_client
from proxy.http.relay import stream_back
from proxy.http.routing import family_of
from proxy.http.telemetry import current as current_record
from proxy.offload import cache_keepalive as last_sent
from proxy.offload import cpu_pool
from proxy.offload.cache_keepalive import KeepAlive, PingDone
from proxy.offload.cpu_pool import CPU
from proxy.offload.records import RefStore
from proxy.offload.summaries import Compressor
from proxy.reload.search import SearchLimits
from proxy.turn import Answer, EditsDone, Exchange, ExchangeContext, Turn
from proxy.upstream import sse
from proxy.upstream.base_url import accepts_cache_key, emulates

log = logging.getLogger("proxy.http.managed")


async def chat_completions(request: Request) -> Response:
    return await handle(request, CHAT)


async def responses(request: Request) -> Response:
    return await handle(request, RESPONSES)


async def messages(request: Request) -> Response:
    return await handle(request, MESSAGES)


async def handle(request: Request, fmt: WireFormat) -> Response:
    """Read → turn → send → answer."""
    return await respond(lambda: ManagedCall.open(request, fmt), shape=family_of(request.scope))


async def respond(opened: Callable[[], Awaitable[ManagedCall]], *, shape: Shape) -> Response:
    """The answer to the call `opened()` reads, or the proxy's own error in `shape` (`answered`):
    the managed route's, whatever carries the call (an HTTP request, a WebSocket's
    `response.create`)."""
    return await error_map.answered(lambda: answer_of(opened), shape=shape, store_failure_is_a_bug=True)


async def answer_of(opened: Callable[[], Awaitable[ManagedCall]]) -> Response:
    """The answer to the call `opened()` reads: observed, in the holdout, or managed (whatever
    carries it: an HTTP request, a WebSocket's `response.create`)."""
    call = await opened()
    if observed.observing(call.settings):  # forwarded as received, the plan made beside it
        return await observed.forward(call)
    arm, call.derived = await observed.arm_of(call)
    if arm is None:
        return await managed(call)
    await observed.mark(call, arm)
    if arm == "control":  # forwarded as received, recorded as a turn of its session
        return await observed.watched(call, lambda: observed.forward_control(call, call.derived))
    return await observed.watched(call, lambda: managed(call))


async def managed(call: ManagedCall) -> Response:
    """The managed turn of an open call and its answer."""
    turn = await call.offload()
    if turn.inline.paused:  # the compaction alone answers: no turn (pause_after_compaction, compaction_trigger)
        return paused_response(turn, background=call.after())
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
    """One request to a managed endpoint on its way through the proxy: read (`open` from an HTTP
    request, `read` from the parts of any: the server's services, the caller, the client's
    headers and query, its body), then its `Exchange` (`proxy.turn`: prepare, send rounds,
    settle) built from the call's context, and the exchange's answer written as a Starlette
    response."""

    turn: Turn

    def __init__(
        self,
        services: Services,
        caller: Caller,
        fmt: WireFormat,
        *,
        client_headers: RawHeaders,
        query: bytes,
        watch: ClientWatch,
        raw: bytes,
        body: JsonObject,
        history: list[Any],
        settings: OffloadSettings,
        decoded: bool = False,
    ) -> None:
        # `raw`: the body as sent, its Content-Encoding undone (`decoded`: there was one)
        self.fmt, self.raw, self.body, self.settings = fmt, raw, body, settings
        self.history, self.decoded = history, decoded
        self.services, self.caller, self.client_headers = services, caller, client_headers
        self.namespace, self.base = self.caller.namespace, self.caller.base
        self.watch, self.query = watch, query
        self.previous = body.get("previous_response_id")  # as the client sent it (the statistics' session)
        self.rec: telemetry.RequestRecord | None = None
        # the sink the turn's reload loop and tools report to: the request's record (`telemetry`)
        self.record: telemetry.TurnRecord = current_record.get() or telemetry.NO_RECORD
        self.headers: list[tuple[bytes, bytes]] = []
        self.cache = CacheSession()  # the session's prompt cache: its record, what went first
        self.derived: tuple[str | None, str | None] | None = None  # the statistics' session, once derived
        self.tenant = tenant_store(services, client_headers, self.caller)
        self.exchange = Exchange(self.context(), raw=raw, body=body, history=history, decoded=decoded)

    @classmethod
    async def open(cls, request: Request, fmt: WireFormat) -> ManagedCall:
        """Read, parse and validate; raises ProxyError (400) for what the proxy itself refuses.
        A body over LARGE_BODY is joined, parsed, checked and split into its history off the
        event loop (tens of MB take seconds of CPU)."""
        codings = codings_of(request.headers.getlist("content-encoding"))  # 415 for an unknown one
        refuse_other_charsets(request.headers.getlist("content-type"))  # read as the upstream reads it
        chunks = [chunk async for chunk in request.stream() if chunk]
        return await cls.read(
            services_of(request),
            request.state.caller,
            fmt,
            chunks=chunks,
            codings=codings,
            client_headers=request.scope["headers"],
            query=request.scope.get("query_string", b""),
            watch=ClientWatch(request, body_read=True),
        )

    @classmethod
    async def read(
        cls,
        services: Services,
        caller: Caller,
        fmt: WireFormat,
        *,
        chunks: list[bytes],
        codings: list[str],
        client_headers: RawHeaders,
        query: bytes,
        watch: ClientWatch,
    ) -> ManagedCall:
        """The call whose body is `chunks` (its Content-Encoding `codings`): parsed and validated
        as `open` says."""
        if codings:  # decided on what it inflates to (`body_encoding.decoded_body`)
            chunks = [await decoded_body(b"".join(chunks), codings, limit=services.settings.max_body_bytes)]

        def parsed() -> tuple[bytes, JsonObject, list[Any]]:
            raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            body = fmt.parse(raw, max_items=services.settings.max_messages)
            caller.check_body(body)
            return raw, body, fmt.history(body)

        raw, body, history = await cpu_pool.CPU(sum(map(len, chunks)) > LARGE_BODY)(parsed)
        settings = request_settings(services, client_headers, caller)
        if body.get("background") is True:  # nobody would run the injected calls of a background response
            settings = settings.model_copy(update={"reload_tools": False})
        return cls(
            services,
            caller,
            fmt,
            client_headers=client_headers,
            query=query,
            watch=watch,
            raw=raw,
            body=body,
            history=history,
            settings=settings,
            decoded=bool(codings),
        )

    def context(self) -> ExchangeContext:
        """The exchange's context from the call: the caller bound into the store handle, its
        admission, the upstream headers and the compressor factory."""
        services, caller, tenant, client_headers = self.services, self.caller, self.tenant, self.client_headers

        def compressor(body: JsonObject, settings: OffloadSettings, refs: RefStore, *, background: bool) -> Compressor:
            return compressor_for(
                services,
                client_headers,
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

        def upstream_headers(*, body_replaced: bool, emulating: bool) -> list[tuple[bytes, bytes]]:
            headers = caller.upstream_headers(client_headers, body_replaced=body_replaced)
            return without_emulated_betas(headers) if emulating else headers

        return ExchangeContext(
            fmt=self.fmt,
            tenant=tenant,
            admission=admission_for(services, client_headers, caller),
            upstream=services.upstream,
            upstream_headers=upstream_headers,
            compressor=compressor,
            settings=self.settings,
            base=self.base,
            query=self.query,
            record=current_record.get(),
            emulating=emulates(self.settings.context_management, self.base or services.settings.upstream_base),
            shared_key=caller.shared_key,
            search_limits=SearchLimits.of(services.settings),
            reload_seconds=services.settings.reload_budget,
            watch=self.watch,
        )

    async def cache_key(self) -> str | None:
        """The `prompt_cache_key` of this request's session, for OpenAI's own API and
        `--cache-control auto` only (`proxy.formats.prompt_cache`); None: none is added."""
        if self.settings.cache_control != "auto" or not accepts_cache_key(
            self.base or self.services.settings.upstream_base
        ):
            return None
        session = self.settings.session or (await accounting.derived_session(self, self.body, self.history))[0]
        return session_cache_key(self.namespace, session) if session else None

    async def offload(self, *, new_summaries: bool = True, prompt_cache: bool = True) -> Turn:
        """The exchange's first step (`Exchange.prepare`: the turn), and what the request's record
        learns of it. `new_summaries`: False uses the summaries ready in the store and never
        makes one (counting tokens); `prompt_cache`: False leaves the client's caching as sent
        (a count is the same with the proxy's)."""
        if new_summaries:  # a turn that goes upstream: its cuts priced with the session's cache
            await before(self)
        key = await self.cache_key() if prompt_cache else None
        turn = self.turn = await self.exchange.prepare(
            new_summaries=new_summaries, prompt_cache=prompt_cache, cache_key=key
        )
        self.body, self.settings, self.headers = turn.body, turn.settings, self.exchange.headers
        self.rec = await accounting.note(  # what the access log, the metrics and the statistics learn
            current_record.get(),
            turn.report(),
            namespace=self.namespace,
            derive=functools.partial(accounting.known_or_derived, self, self.derived),
        )
        return turn

    def after(self, answer: Answer | None = None) -> BackgroundTask:
        """Once the client has its answer: the exchange's last step (`Exchange.settle`), then what
        the statistics and the session's prompt cache learn."""

        async def record() -> None:
            await self.exchange.settle()
            accounting.learn_reply(self, self.turn.rounds.first_id)
            await after(self)  # the session's record, its prefix held for keep-alive

        return BackgroundTask(record)

    async def serialised(self, payload: JsonObject) -> bytes:
        return await self.exchange.serialised(payload)

    async def send_round(self, payload: JsonObject) -> httpx2.Response:
        return await self.exchange.send_round(payload)

    async def forward(self) -> Response:
        """No reload tools: the exchange's answer relayed as the upstream sent it."""
        return await self.write(await self.exchange.forward())

    async def forward_with_reload(self) -> Response:
        return await self.write(await self.exchange.complete())

    async def forward_streaming_with_reload(self) -> Response:
        return await self.write(await self.exchange.stream())

    async def write(self, answer: Answer) -> Response:
        """The exchange's answer as a Starlette response. Relayed: as the upstream sent it, its
        bill read as it passes (what asking for a stream's usage added taken out:
        `proxy.http.accounting`), the answer's id for the statistics; an answer with nothing to
        settle (a streamed turn's first round refused) goes back as it came, nothing more."""
        upstream, family = answer.upstream, self.caller.family
        if answer.relayed and answer.background is None:
            return await stream_back(upstream, answer.headers, shape=family)
        if answer.relayed:
            if answer.asked_usage:
                out = await accounting.unasked_stream(
                    upstream, answer.headers, shape=family, rec=self.rec, usage=self.fmt.usage
                )
            else:
                out = await stream_back(upstream, answer.headers, shape=family)
                accounting.tap(self.rec, out, self.fmt.usage)
            accounting.tap_reply(self, out)
            out.background = self.after()
            return out
        headers = response_headers_for_client(upstream.headers.raw, decoded=True)
        if answer.stream is not None:
            streamed = StreamingResponse(answer.stream, status_code=answer.status, background=self.after())
            if not upstream.headers.get("content-type", "").startswith("text/event-stream"):  # e.g. an HTML page:
                headers = [(k, v) for k, v in headers if k.lower() != b"content-type"]  # the events are the proxy's
                headers.append((b"content-type", b"text/event-stream; charset=utf-8"))
            streamed.raw_headers = headers + answer.headers
            return streamed
        out = Response(answer.body, status_code=answer.status, background=self.after())
        out.raw_headers = headers + answer.headers
        return out


@dataclass
class CacheSession:
    """One turn's part: the session, the record read before it (what went out first is the
    exchange's: `Exchange.sent`)."""

    session: str | None = None
    before: LastSent | None = None
    cuts: CutContext | None = None


class SessionCall(accounting.ManagedCall, Protocol):
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


async def before(call: SessionCall) -> None:
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


async def after(call: SessionCall) -> None:
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


def paused_response(turn: Turn, *, background: BackgroundTask) -> Response:
    """The answer of a turn whose compaction alone answers (`Inline.paused`: no upstream call),
    in the format's shape (`ProviderCompaction.paused_answer`), streamed when the request streams."""
    inline = turn.inline
    compaction = inline.made_by
    if compaction is None:  # a paused turn's lead is always its format's compaction
        raise RuntimeError("a paused turn without its compaction")
    message = compaction.paused_answer(
        inline.lead,
        body=turn.body,
        created_at=int(time.time()),
        tokens_in=inline.tokens_in,
        tokens_out=inline.tokens_out,
    )
    if turn.rounds.context_management is not None:  # clearing edits applied too (`proxy.turn._context_management`)
        message["context_management"] = turn.rounds.context_management
    if turn.body.get("stream") is True:
        events = compaction.paused_events(message)
        out: Response = StreamingResponse(
            iter([sse.encode_typed(e) for e in events]), media_type="text/event-stream; charset=utf-8"
        )
    else:
        out = Response(jsonio.dumps(message), media_type="application/json")
    out.raw_headers = [*out.raw_headers, *turn.extra_headers]
    out.background = background
    return out


async def count_answer(
    response: httpx2.Response, done: EditsDone, extra_headers: list[tuple[bytes, bytes]]
) -> Response:
    """`count_tokens`' answer: the upstream's count of the edited request, with
    `context_management.original_input_tokens` (that count plus what the edits cleared, counted
    by the proxy) as Anthropic answers; anything but a 200 count relayed as it is."""
    if response.status_code != 200:
        return await stream_back(response, extra_headers, shape="anthropic")
    try:
        raw = await response.aread()
    finally:
        await response.aclose()
    try:
        answer = jsonio.loads(raw)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and type(answer.get("input_tokens")) is int:
        answer["context_management"] = {"original_input_tokens": answer["input_tokens"] + done.cleared_tokens}
        raw = jsonio.dumps(answer)
    out = Response(raw, status_code=200)
    out.raw_headers = (
        response_headers_for_client(response.headers.raw, decoded=True)
        + [(b"content-length", str(len(raw)).encode())]
        + list(extra_headers)
    )
    return out
