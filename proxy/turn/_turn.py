"""One managed turn, as typed values in and out: between the HTTP layer (which reads the request
and sends what this decides) and the steps below it (the emulation steps, `proxy.turn._context_management`; `proxy.offload`).

`run_turn(TurnInput)` takes the body, its history, the format, the settings, the tenant's store
handle and a compressor factory, runs the steps in one order:

1. continue the stored chain (`proxy.offload.records`: the response that holds the
   whole exchange, the answers of the injected calls the client never saw put first);
2. begin the emulation (`proxy.turn._context_management`: the proxy's compaction tokens settled, the
   provider's `context_management` taken out when the proxy applies it); a `compaction_trigger`
   the proxy emulates (`ProviderCompaction.compacts_now`, `proxy.turn._context_management`) is compacted here
   and answers alone: the
   steps below are for a turn that goes upstream, and get the prompt caching the client did
   not ask for (`WireFormat.with_prompt_cache`: the summaries it makes share it);
3. the clearing edits (`proxy.turn._context_management`, the format's `WireFormat.clearing_edits`);
4. plan, compress and store (`proxy.offload.pipeline`; skipped for a request too small to offload;
   a client asking for its own summary gets the model's window as its thresholds,
   `proxy.core.compression`);
5. the inline threshold compaction (`proxy.turn._context_management`, the format's
   `WireFormat.compaction_emulation`);
6. settle: the items that go upstream, the format's `Rounds`, the reload tools, the headers;

and returns a frozen `Turn`. The Exchange's prepare step runs it (`proxy.turn._exchange`), for the
server (`proxy.http.managed`), `count_tokens` and `replay` alike, so replay covers the emulation
steps too. Nothing here reads a request object.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.core import compression as client_compaction
from proxy.core.compaction import Plan
from proxy.core.jsonio import JsonObject, RawJson
from proxy.core.rounds import Rounds
from proxy.core.settings import OffloadSettings
from proxy.core.texts import RELOAD_TOOL_SCHEMAS
from proxy.core.tokens import TokenCounter, counter_for_model_async
from proxy.core.wire import ProviderCompaction, WireFormat
from proxy.formats.json_body import LARGE_BODY
from proxy.offload import records as response_chains
from proxy.offload.cpu_pool import CPU
from proxy.offload.pipeline import Prepared, prepare
from proxy.offload.records import CompactionRecords, RefStore, TenantStore
from proxy.offload.summaries import Compressor
from proxy.reload.search import SearchLimits
from proxy.reload.tools import ReloadTools, collision_warning
from proxy.telemetry import NO_RECORD, TurnRecord
from proxy.turn import _context_management as context_management
from proxy.turn._context_management import EditsDone, Emulation, Inline

log = logging.getLogger("proxy.turn")

Headers = list[tuple[bytes, bytes]]


class CompressorFactory(Protocol):
    """Makes the turn's summariser (`proxy.http.call_parts.compressor_for` binds the caller):
    `body` the request as it goes on, `background` made ahead of time (else inline). None: no
    summariser (compaction only)."""

    def __call__(
        self, body: JsonObject, settings: OffloadSettings, refs: RefStore, *, background: bool
    ) -> Compressor | None: ...


@dataclass(frozen=True)
class TurnInput:
    fmt: WireFormat
    raw: bytes  # the body as sent (its Content-Encoding undone)
    body: JsonObject
    history: list[Any]  # `fmt.history(body)`
    settings: OffloadSettings
    tenant: TenantStore
    compressor: CompressorFactory
    emulating: bool = False  # the proxy applies the request's context management (`upstream.native.emulates`)
    shared_key: bool = False  # the proxy's own key: the upstream gets the object the checks read
    search_limits: SearchLimits = SearchLimits()
    new_summaries: bool = True  # False: the summaries ready in the store only (counting tokens)
    # add the prompt caching a client did not ask for (`WireFormat.with_prompt_cache`, settings
    # cache_control auto); `cache_key`: an OpenAI upstream's prompt_cache_key for the session
    prompt_cache: bool = False
    cache_key: str | None = None
    record: TurnRecord = NO_RECORD  # where the reload tools count their calls (the request's record)


@dataclass(frozen=True)
class TurnReport:
    """What a turn tells the request's record, as plain values: the HTTP layer writes them on
    its `RequestRecord` (`proxy.http.accounting.note`); nothing below it touches the record."""

    model: str | None
    stream: bool
    tokens_before: int
    tokens_after: int
    action: str
    refs: int  # references the forwarded payload carries
    refs_created: int  # of which stored for the first time now
    image_tokens_saved: int
    offloaded_bytes: int  # UTF-8 bytes of the content stored for the first time now
    warnings: list[str]
    session: str | None  # as the client named it (X-Offload-Session), else None


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))  # isascii: O(1)


@dataclass(frozen=True)
class Turn:
    """What a turn decided. `prepared` and `rounds` are the pipeline's and the reload loop's own
    objects (the loop and the background summaries go on with them)."""

    body: JsonObject  # as it goes upstream (continued, without an emulated `context_management`)
    history: list[Any]  # the history as planned (tokens replaced, clearing edits applied)
    items: list[Any]  # what goes upstream: the carried answers, then the reduced history
    settings: OffloadSettings  # as applied (a client's own reload tool names: mode off)
    counter: TokenCounter
    prepared: Prepared
    rounds: Rounds
    tools: ReloadTools
    emulation: Emulation
    edits: EditsDone
    inline: Inline
    changed: bool  # the body is re-serialised (else the raw bytes go as sent)
    inject_reload_tools: bool
    continued: bool  # previous_response_id replaced, or answers carried in front
    used_up: str | None  # a conversation's record, forgotten once the upstream accepts the turn
    extra_headers: Headers = field(default_factory=list)  # X-Offload-* for the client

    @property
    def warnings(self) -> list[str]:
        return self.prepared.warnings

    @property
    def events(self) -> list[JsonObject]:
        return self.prepared.events + self.tools.events

    def report(self) -> TurnReport:
        """The turn's figures for the request's record (`TurnReport`)."""
        prepared, plan = self.prepared, self.prepared.plan
        return TurnReport(
            model=_model(self.body),
            stream=self.body.get("stream") is True,
            tokens_before=plan.tokens_before,
            tokens_after=plan.tokens_after,
            action=prepared.action,
            refs=len(plan.refs),
            refs_created=len(prepared.written),
            image_tokens_saved=plan.media_tokens_saved,
            offloaded_bytes=sum(_utf8_size(o.text) for o in plan.offloads if o.ref in prepared.written),
            warnings=prepared.warnings,
            session=self.settings.session,
        )

    @property
    def answers_as_is(self) -> bool:
        """The upstream's answer goes to the client untouched: no reload rounds, no usage of the
        proxy's to add, no compaction or edits to show."""
        return (
            not self.inject_reload_tools
            and not self.prepared.summary_usage
            and not self.inline.lead
            and self.emulation.applied_edits is None
        )


@dataclass
class _Chain:
    body: JsonObject
    carried: list[Any] = field(default_factory=list)  # answers to injected calls the client never saw
    continued: bool = False
    used_up: str | None = None


async def _continue_chain(fmt: WireFormat, body: JsonObject, tenant: TenantStore) -> _Chain:
    """Step 1: continue a stored exchange the way `proxy.offload.records` remembers it."""
    chain = _Chain(body)
    if not fmt.stored:
        return chain
    previous = body.get("previous_response_id")
    conversation = response_chains.conversation_key(body.get("conversation"))
    name = previous if isinstance(previous, str) else conversation
    if name is None:
        return chain
    found = await tenant.resolve_chain(name)
    if found is None:
        return chain
    if name == conversation and found.outputs:
        chain.used_up = conversation  # forgotten once the upstream has taken them (a 200)
    if found.response_id and found.response_id != previous and name == previous:
        chain.body = {**body, "previous_response_id": found.response_id}
        chain.continued = True
    if found.outputs:  # put in front of the reduced input: a reload result is never offloaded again
        chain.carried, chain.continued = found.outputs, True
    return chain


async def small_tokens(
    raw: bytes, history: list[Any], settings: OffloadSettings, *, counter: TokenCounter, rewritten: bool
) -> int | None:
    """The tokens of a request too small to offload anything, else None (the pipeline runs).

    Small: fewer bytes than the smallest threshold (without `ref=`, nor an escape that could
    spell it, nor a compaction token standing for one: no reference to offer the reload tools
    for), and then fewer tokens too (an image part counts more tokens than its bytes).
    `rewritten`: the history is not the raw body's (carried answers, a token replaced, content
    cleared by an edit: their ref= is not in the raw bytes). The thresholds are the client's
    own (`X-Offload-*`, up to 10 million tokens): a large history is counted off the loop, as
    the pipeline counts it (5 MB counted here held the loop 3 s)."""
    limit = min(settings.max_total_tokens, settings.tool_result_limit())
    if rewritten or len(raw) > limit or b"ref=" in raw or b"\\u" in raw:
        return None
    tokens = await CPU.for_messages(history)(counter.messages, history)
    return tokens if tokens <= limit else None


def offload_headers(prepared: Prepared) -> Headers:
    """What the client learns of its turn (`X-Offload-*`)."""
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


async def _compaction_turn(
    given: TurnInput,
    emulation: Emulation,
    *,
    compaction: ProviderCompaction,
    refs: RefStore,
    records: CompactionRecords,
) -> Turn:
    """A `compaction_trigger` the proxy emulates: the history before it compacted now
    (`proxy.turn._context_management`), the turn's answer that compaction alone (`Inline.paused`)."""
    fmt, settings, body = given.fmt, given.settings, emulation.body
    counter = await counter_for_model_async(_model(body))
    prepared, lead = await context_management.compact_now(
        emulation.items,
        compaction=compaction,
        view=fmt.view,
        endpoint=fmt.endpoint,
        settings=settings,
        counter=counter,
        refs=refs,
        records=records,
        compressor=functools.partial(given.compressor, body, settings, refs, background=False),
    )
    tools = ReloadTools(
        refs,
        counter,
        max_tokens=settings.max_reload_tokens,
        request_refs=[],
        session=settings.session,
        limits=given.search_limits,
        record=given.record,
    )
    return Turn(
        body=body,
        history=emulation.items,
        items=[],
        settings=settings,
        counter=counter,
        prepared=prepared,
        rounds=fmt.rounds(body, [], (), extra_usage=None),
        tools=tools,
        emulation=emulation,
        edits=EditsDone(emulation.items),
        inline=lead,
        changed=False,
        inject_reload_tools=False,
        continued=False,
        used_up=None,
        extra_headers=offload_headers(prepared),
    )


def _model(body: JsonObject) -> str | None:
    return body.get("model") if isinstance(body.get("model"), str) else None


async def run_turn(given: TurnInput, *, refs: RefStore | None = None, records: CompactionRecords | None = None) -> Turn:
    """The turn's steps in order (see the module docstring). `refs`, `records`: the tenant's,
    unless given (replay keeps what each turn stored)."""
    fmt, settings, tenant = given.fmt, given.settings, given.tenant
    compaction = fmt.compaction_emulation  # None: the format has no compaction to emulate
    # a compaction asked now, and the proxy plays the provider (its bad input refused before anything)
    compacting = (
        given.emulating
        and given.new_summaries
        and compaction is not None
        and compaction.compacts_now(given.body, given.history)
    )
    chain = await _continue_chain(fmt, given.body, tenant)  # 1
    if records is None and compaction is not None:
        records = tenant.records(compaction.records_api)
    # the body's bytes, asked once whether they escape ASCII: what may be looked for in them
    raw = await CPU(len(given.raw) > LARGE_BODY)(RawJson.of, given.raw)
    emulation = await context_management.begin(  # 2
        chain.body,
        given.history,
        fmt=fmt,
        records=records,
        emulating=given.emulating,
        raw=raw,
    )
    if compacting and compaction is not None and records is not None:
        return await _compaction_turn(
            given, emulation, compaction=compaction, refs=refs or tenant.refs(), records=records
        )
    body = emulation.body
    if given.prompt_cache and settings.cache_control == "auto":  # before the summaries: they share it
        # a walk of the whole body (for a client's own caching): off the loop for a large one
        # the body's bytes stand for it while it is the client's (no record expanded, no chain carried)
        mentions = raw.may_hold if chain.body is given.body and not emulation.replaced else None
        body = await CPU.for_messages(given.history)(
            fmt.with_prompt_cache, body, key=given.cache_key, mentions=mentions
        )
    cached = body is not emulation.body
    collisions = fmt.colliding_tool_names(body)
    if collisions:  # the client's own context_reload/context_search: handled as X-Offload-Mode: off
        settings = settings.model_copy(update={"mode": "off", "reload_tools": False})
    # the provider's own context management (the emulation's when the proxy applies it)
    provider = context_management.provider_for(fmt.provider_context(body), emulation)
    counter = await counter_for_model_async(_model(body))
    refs = refs or tenant.refs()
    edits = await context_management.apply(
        emulation,
        emulation.items,
        fmt=fmt,
        body=body,
        counter=counter,  # 3
        refs=refs,
        namespace=tenant.namespace,
        session=settings.session,
    )
    history = edits.items
    client_compacting = await CPU.for_messages(history[-client_compaction.LAST_ITEMS :])(
        client_compaction.asked, history, fmt.view
    )
    if client_compacting is not None:  # the agent's own summary: from the originals wherever they fit
        settings = client_compaction.settings_for(
            settings, model=_model(body), output=client_compaction.max_output(body)
        )
    tokens = await small_tokens(
        given.raw,
        history,
        settings,
        counter=counter,
        rewritten=bool(chain.carried or emulation.replaced or edits.offloads),
    )
    if tokens is not None:  # 4
        prepared = Prepared(Plan(history, tokens_before=tokens, tokens_after=tokens))
    else:
        prepared = await prepare(
            history,
            settings,
            counter=counter,
            namespace=tenant.namespace,
            refs=refs,
            compressor=given.compressor(body, settings, refs, background=True),
            view=fmt.view,
            new_summaries=given.new_summaries,
            provider=provider,
        )
    prepared, lead = await context_management.compact_at_threshold(  # 5
        emulation,
        prepared,
        fmt=fmt,
        settings=settings,
        counter=counter,
        history=history,
        refs=refs,
        records=records,
        new_summaries=given.new_summaries,
        compressor=functools.partial(given.compressor, body, settings, refs, background=False),
    )
    if collisions:  # 6
        prepared.warnings.append(collision_warning(collisions))
    for warning in prepared.warnings:
        log.warning("offload: %s", warning)
    plan = prepared.plan
    # on the shared key the upstream gets the object the checks read (a duplicate key could
    # otherwise show it a value the proxy never saw): re-serialised, as a changed body is
    changed = prepared.action != "none" or chain.continued or given.shared_key or emulation.changed or cached
    # a compaction_trigger asks for a compaction, not a turn: it stays the last item, no round follows it
    inject = settings.reload_tools and bool(plan.refs) and not prepared.store_failed and not provider.trigger
    tools = ReloadTools(
        refs,
        counter,
        max_tokens=settings.max_reload_tokens,
        request_refs=plan.refs,
        session=settings.session,
        limits=given.search_limits,
        record=given.record,
    )
    items = [*chain.carried, *plan.items]
    if lead.made_by is not None:  # the format's compaction first in the answer
        rounds = lead.made_by.rounds(
            body, items, RELOAD_TOOL_SCHEMAS, extra_usage=prepared.summary_usage, lead=lead.lead
        )
    else:
        rounds = fmt.rounds(body, items, RELOAD_TOOL_SCHEMAS, extra_usage=prepared.summary_usage)
    prepared = context_management.settle(edits, prepared, rounds)
    return Turn(
        body=body,
        history=history,
        items=items,
        settings=settings,
        counter=counter,
        prepared=prepared,
        rounds=rounds,
        tools=tools,
        emulation=emulation,
        edits=edits,
        inline=lead,
        changed=changed,
        inject_reload_tools=inject,
        continued=chain.continued,
        used_up=chain.used_up,
        extra_headers=[*offload_headers(prepared), *client_compaction_header(client_compacting)],
    )


def client_compaction_header(agent: str | None) -> Headers:
    """`X-Offload-Client-Compaction: <agent>` on a turn that asked for the agent's own summary."""
    return [] if agent is None else [(b"x-offload-client-compaction", agent.encode())]
