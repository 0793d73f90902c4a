"""One managed exchange with the upstream, transport-free: built from an explicit context
(`ExchangeContext`: the tenant's store handle and admission, the upstream client with its base,
headers and query, the summariser factory, the settings, the request's record), run in explicit
steps:

1. `prepare`: the turn (`run_turn`), and the headers it goes upstream with;
2. send rounds: `send_round` is the one-round callable the reload loop is given; after each
   upstream request of the turn come its explicit steps (`answered`: the admission learns what
   the upstream thinks of the credential, the turn's background summaries start, a used-up
   chain is forgotten); `forward`, `complete` and `stream` are the three ways a turn is
   answered (as the upstream answered it, after the reload rounds whole, or streamed);
3. settle: `settle_chain` (what the next request of a stored chain needs, before the client's
   answer ends) and `settle` (once answered: the summaries if never started, the events).

Its answer (`Answer`) is transport-neutral: a status, the upstream response whose headers (or
whole body) go back, the proxy's own headers, a body or an async iterator of stream chunks, and
the background step (`settle`). No Starlette `Request` and no context variable: the HTTP layer
(`proxy.http.managed`, the WebSocket mode) reads the body, builds the context, calls these
steps and writes the response.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import httpx2

from proxy.core import jsonio
from proxy.core import jsonio as large_json
from proxy.core.jsonio import JsonObject
from proxy.core.settings import OffloadSettings
from proxy.core.wire import WireFormat
from proxy.formats.json_body import LARGE_BODY
from proxy.offload import cpu_pool
from proxy.offload import records as response_chains
from proxy.offload.records import TenantStore
from proxy.offload.tenant import Admission
from proxy.reload import loop as reload_loop
from proxy.reload import search as search_pool
from proxy.reload.search import SearchLimits
from proxy.telemetry import NO_RECORD, RequestRecord, TurnRecord
from proxy.turn._turn import CompressorFactory, Turn, TurnInput, run_turn
from proxy.upstream.client import Upstream

log = logging.getLogger("proxy.turn.exchange")

Headers = list[tuple[bytes, bytes]]
T = TypeVar("T")
# An upstream's answers to a request asking for a stream's usage that send it again as the client
# sent it: some refuse the field asking adds (Azure OpenAI's older API versions, strict gateways:
# "Unknown parameter: 'stream_options'"), and any other fault is then the client's own, answered so.
REFUSED = (400, 422)


class Watch(Protocol):
    """Runs a wait on the upstream, cut short when the client goes (`proxy.http.disconnect`)."""

    async def run(self, work: Awaitable[T]) -> T: ...


class _Unwatched:
    async def run(self, work: Awaitable[T]) -> T:
        return await work


UNWATCHED: Watch = _Unwatched()


class UpstreamHeaders(Protocol):
    """The client's headers as they go upstream, with the caller's credential (the HTTP layer's
    `Caller.upstream_headers`); `body_replaced`: the body is re-serialised, `emulating`: the
    provider's context management is the proxy's (its betas are not sent)."""

    def __call__(self, *, body_replaced: bool, emulating: bool) -> Headers: ...


@dataclass(frozen=True)
class ExchangeContext:
    """Everything an exchange needs, built by the HTTP layer from the request and its caller."""

    fmt: WireFormat
    tenant: TenantStore  # the store as the caller's tenant sees it (its writes admitted by `admission`)
    admission: Admission  # the caller gate's verdict on storing (it learns each upstream answer's status)
    upstream: Upstream
    upstream_headers: UpstreamHeaders
    compressor: CompressorFactory
    settings: OffloadSettings  # the request's (server defaults ← tenant ← headers)
    base: str | None = None  # the caller's upstream base (None: the server's)
    query: bytes = b""  # the request's query string, sent on
    record: RequestRecord | None = None  # the request's record (a sink; None keeps nothing)
    emulating: bool = False  # the proxy applies the request's context management
    shared_key: bool = False  # the server's own upstream key
    search_limits: SearchLimits = SearchLimits()
    reload_seconds: float = 60.0  # the reload rounds' time budget (`--reload-budget`)
    watch: Watch = UNWATCHED
    searches: bool = True  # the model may call context_search here (replay: no model, no search)


@dataclass(frozen=True)
class Sent:
    """The turn's first upstream request (the first answered 200: one refused for asking a
    stream's usage goes again): the session's prefix, as the prompt cache saw it."""

    content: bytes
    at: float  # time.time() when it went
    status: int


@dataclass(frozen=True)
class Answer:
    """The exchange's answer, transport-neutral. `upstream`: the upstream response whose headers
    the client gets (filtered by the transport), and whose body too when the answer has neither
    `body` nor `stream` (relayed as it came; `asked_usage`: with the stream's usage the proxy
    asked for, to be taken out). `headers`: the proxy's own, after the upstream's. `background`:
    the exchange's step once the client has its answer (`Exchange.settle`)."""

    status: int
    upstream: httpx2.Response
    headers: Headers = field(default_factory=list)
    body: bytes | None = None
    stream: AsyncIterator[bytes] | None = None
    asked_usage: bool = False
    background: Callable[[], Awaitable[None]] | None = None

    @property
    def relayed(self) -> bool:
        return self.body is None and self.stream is None


async def _closing(response: httpx2.Response, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Yield `chunks` and always release the upstream connection (also on cancel)."""
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        await response.aclose()


class Exchange:
    """One request's exchange with the upstream (see the module docstring). `raw`: the body as
    sent (its Content-Encoding undone; `decoded`: there was one), `body` parsed, `history` the
    format's items of it."""

    def __init__(
        self, ctx: ExchangeContext, *, raw: bytes, body: JsonObject, history: list[Any], decoded: bool = False
    ) -> None:
        self.ctx, self.raw, self.body, self.history, self.decoded = ctx, raw, body, history, decoded
        self.settings = ctx.settings
        self.headers: Headers = []
        self.sent: Sent | None = None
        self._used_up: str | None = None  # a conversation's record, forgotten when the upstream accepts the turn
        self._turn: Turn | None = None
        self._budget: reload_loop.Budget | None = None

    @property
    def turn(self) -> Turn:
        if self._turn is None:
            raise RuntimeError("the exchange is not prepared")
        return self._turn

    @property
    def record(self) -> TurnRecord:
        return self.ctx.record if self.ctx.record is not None else NO_RECORD

    # 1. prepare

    def turn_input(
        self, *, new_summaries: bool = True, prompt_cache: bool = True, cache_key: str | None = None
    ) -> TurnInput:
        """The turn of this exchange as plain values."""
        ctx = self.ctx
        return TurnInput(
            ctx.fmt,
            self.raw,
            self.body,
            self.history,
            self.settings,
            ctx.tenant,
            ctx.compressor,
            emulating=ctx.emulating,
            shared_key=ctx.shared_key,
            search_limits=ctx.search_limits,
            new_summaries=new_summaries,
            prompt_cache=prompt_cache,
            cache_key=cache_key,
            record=self.record,
        )

    async def prepare(
        self, *, new_summaries: bool = True, prompt_cache: bool = True, cache_key: str | None = None
    ) -> Turn:
        """The turn (`proxy.turn.run_turn`), then the headers it goes upstream with.
        `new_summaries`: False uses the summaries ready in the store and never makes one
        (counting tokens); `prompt_cache`: False leaves the client's caching as sent;
        `cache_key`: the session's `prompt_cache_key` (OpenAI's own API)."""
        turn = self._turn = await run_turn(
            self.turn_input(new_summaries=new_summaries, prompt_cache=prompt_cache, cache_key=cache_key)
        )
        if turn.inject_reload_tools and self.ctx.searches:
            search_pool.warm()  # the model may search: its workers start while the upstream answers
        self.body, self.settings, self._used_up = turn.body, turn.settings, turn.used_up
        self.headers = self.ctx.upstream_headers(
            body_replaced=turn.changed
            or turn.inject_reload_tools
            or self.decoded
            or self.ctx.fmt.usage.asking(self.body) is not None,
            emulating=turn.emulation.emulating,
        )
        return turn

    # 2. send rounds

    async def serialised(self, payload: JsonObject) -> bytes:
        """The payload as it goes upstream: a large one written off the loop, a piece at a time."""
        if len(self.raw) > LARGE_BODY:
            return await cpu_pool.CPU(True)(large_json.dumps_yielding, payload)
        return jsonio.dumps(payload)

    async def _post(self, content: bytes) -> httpx2.Response:
        """One upstream request of the turn; what went first is noted (`sent`)."""
        ctx, record = self.ctx, self.ctx.record
        if record is not None and record.forwarded is None:  # the turn's first: its prefix reuse, measured later
            record.forwarded = content
        response = await ctx.upstream.send(
            "POST",
            ctx.fmt.endpoint,
            query=ctx.query,
            headers=self.headers,
            content=content,
            base=ctx.base,
            record=record,
        )
        if self.sent is None or self.sent.status != 200:
            self.sent = Sent(content, time.time(), response.status_code)
        return response

    async def answered(self, response: httpx2.Response) -> None:
        """The steps after each upstream request of the turn: the admission learns what the
        upstream thinks of the credential, the turn's summaries start (it is out and answering),
        a used-up chain is forgotten once the upstream accepted the turn."""
        self.ctx.admission.learn(response.status_code)
        await self.start_summaries()
        if response.status_code == 200:
            await self.forget_used_chain()

    async def start_summaries(self) -> None:
        """The background summaries the turn prepared, handed to the scheduler (once)."""
        await self.turn.prepared.start_background()

    async def forget_used_chain(self) -> None:
        """A conversation's carried answers, forgotten once the upstream has taken them."""
        if self._used_up:
            used_up, self._used_up = self._used_up, None
            await self.ctx.tenant.forget_chain(used_up)

    async def _request(self, content: bytes) -> httpx2.Response:
        response = await self._post(content)
        await self.answered(response)
        return response

    async def send_round(self, payload: JsonObject) -> httpx2.Response:
        """One round's request, asking for the usage of its stream where the client did not
        (`UsageReader.asking`: the format's rounds take out what that adds), sent again as it is
        when the upstream refuses the request asking (`REFUSED`). The reload loop's `send`."""
        asking = self.ctx.fmt.usage.asking(payload)
        response = await self._request(await self.serialised(asking or payload))
        if asking is not None and response.status_code in REFUSED:
            await response.aclose()
            response = await self._request(await self.serialised(payload))
        return response

    def _new_budget(self) -> reload_loop.Budget:
        """No reload rounds without injected tools (the loop then only adds the summary's usage)."""
        turn = self.turn
        rounds = turn.settings.max_reload_rounds if turn.inject_reload_tools else 0
        self._budget = reload_loop.Budget(rounds, self.ctx.reload_seconds)
        return self._budget

    async def forward(self) -> Answer:
        """No reload tools: the (reduced) request goes up, the answer comes back as it came (but
        for what asking for a stream's usage added: `asked_usage`). A request asking that the
        upstream refuses goes again as the client sent it."""
        turn, fmt, watch = self.turn, self.ctx.fmt, self.ctx.watch
        payload = fmt.with_history(self.body, turn.items) if turn.changed else None
        asking = fmt.usage.asking(payload or self.body)
        sent = asking if asking is not None else payload
        content = self.raw if sent is None else await self.serialised(sent)
        response = await watch.run(self._request(content))
        if asking is not None and response.status_code in REFUSED:  # it may not know the field asking adds
            await response.aclose()
            asking = None
            content = self.raw if payload is None else await self.serialised(payload)
            response = await watch.run(self._request(content))
        return Answer(
            response.status_code,
            response,
            list(turn.extra_headers),
            asked_usage=asking is not None,
            background=self.settle,
        )

    async def complete(self) -> Answer:
        """The reload rounds run whole (`proxy.reload.loop.complete`), the last answer's body."""
        turn = self.turn
        result = await self.ctx.watch.run(
            reload_loop.complete(
                turn.rounds,
                self.send_round,
                tools=turn.tools,
                budget=self._new_budget(),
                usage=self.ctx.fmt.usage,
                record=self.record,
            )
        )
        if result.status == 200:
            await self.settle_chain()
        headers = [
            (b"content-length", str(len(result.body)).encode()),
            *turn.extra_headers,
            (reload_loop.RELOAD_ROUNDS_HEADER, str(result.rounds).encode()),
        ]
        return Answer(result.status, result.response, headers, body=result.body, background=self.settle)

    async def stream(self) -> Answer:
        """The reload rounds streamed (`proxy.reload.loop.stream`); a first answer other than a
        200 goes back as it came."""
        turn = self.turn
        budget = self._new_budget()
        first = await self.ctx.watch.run(self.send_round(turn.rounds.request(budget.more(0))))
        if first.status_code != 200:
            return Answer(first.status_code, first, list(turn.extra_headers), background=self.settle)
        events = reload_loop.stream(
            first,
            turn.rounds,
            self.send_round,
            tools=turn.tools,
            budget=budget,
            before_finish=self.settle_chain,
            usage=self.ctx.fmt.usage,
            record=self.record,
        )
        return Answer(200, first, list(turn.extra_headers), stream=_closing(first, events), background=self.settle)

    # 3. settle

    async def settle_chain(self) -> None:
        """After the last round, before the client's answer: what its next request needs."""
        turn, tenant = self.turn, self.ctx.tenant
        rounds = turn.rounds
        if self.body.get("store") is False or not rounds.first_id:
            return
        outputs: list[Any] = []
        try:
            if rounds.unanswered:
                deadline = self._budget.deadline if self._budget is not None else time.monotonic()
                results = await reload_loop.run_calls(turn.tools, rounds.unanswered, deadline)
                outputs = rounds.carried(results)
            conversation = response_chains.conversation_key(self.body.get("conversation"))
            if conversation and outputs:
                await tenant.remember_chain(conversation, response_chains.Continuation(None, outputs))
            elif not conversation and (rounds.last_id != rounds.first_id or outputs):
                later = rounds.last_id if rounds.last_id != rounds.first_id else None
                await tenant.remember_chain(rounds.first_id, response_chains.Continuation(later, outputs))
        except Exception:  # noqa: BLE001 - the client's answer never waits on this failing
            log.exception("remembering the response chain failed")

    async def settle(self) -> None:
        """Once the client has its answer: the summaries (if the upstream never answered), the
        turn's events."""
        turn = self.turn
        await self.start_summaries()
        await self.ctx.tenant.record_events(turn.settings.session, turn.events)
