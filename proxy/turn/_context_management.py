"""The provider's context management, emulated by the proxy (format-neutral steps of
`proxy.turn`; what a format contributes comes through `proxy.core.wire`):

- `begin`: the proxy's compaction tokens settled, `context_management` taken out of the body;
- the clearing edits (`apply`, `settle`: Anthropic's `clear_tool_uses`, `clear_thinking`);
- threshold compaction inside a turn (`compact_at_threshold`, `provider_for`);
- a compaction asked now (`compact`: `/responses/compact`; `compact_now`: a `compaction_trigger`).

Each step's own account follows as the comment that opens its section.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.core import jsonio
from proxy.core.answers import add_usage
from proxy.core.compaction import (
    COMPACTION_ACTION,
    EDITS_ACTION,
    Offload,
    Plan,
    ProviderContext,
    Records,
    Threshold,
    TokenError,
    may_hold_token,
    present_refs,
    sealed_fields,
)
from proxy.core.compression import COMPRESS_KEEP_RECENT
from proxy.core.rounds import Rounds
from proxy.core.settings import OffloadSettings
from proxy.core.texts import refs_in
from proxy.core.tokens import TokenCounter
from proxy.core.view import ItemView
from proxy.core.wire import ProviderCompaction, WireFormat
from proxy.errors import Failure, Kind, ProxyError
from proxy.formats.json_body import LARGE_BODY
from proxy.offload import cpu_pool
from proxy.offload.cpu_pool import CPU
from proxy.offload.pipeline import Prepared
from proxy.offload.records import CompactionRecords, RefStore, event
from proxy.offload.summaries import Compressor
from proxy.offload.tenant import WRITE_REFUSED, CredentialRejected, QuotaExceeded, refusal_warning
from proxy.store import StoreUnavailable

# What one managed request needs of the emulation before it is planned (a step of `proxy.turn`).
#
# `begin` decides whether the proxy applies the request's context management itself
# (`proxy.upstream.base_url.emulates`), settles the proxy's own compaction tokens (whichever way),
# and, when emulating, takes `context_management` out of the body that goes upstream (an
# upstream without it would refuse or ignore it) and keeps it in `asked` for the emulation to
# apply.
#
# It is the one place that keeps the rule: no compaction token of the proxy's reaches any
# upstream. Every managed request (chat, Responses, Messages, `count_tokens`) and the relayed
# Responses paths (`/responses/input_tokens`, `/responses/compact`, emulated or relayed) go
# through it. A token in a compaction position (a Responses `compaction` item, a Messages
# `compaction` block: `ProviderCompaction.settles`) is expanded or dropped by its format's rule
# (`ProviderCompaction.expand`); one in any other `encrypted_content` (a reasoning item, a block nested
# in a tool result, a chat message) is a 400 `invalid_compaction` naming the field. Text that
# merely spells a token is content and goes as it is.


@dataclass
class Emulation:
    emulating: bool  # the proxy applies context management for this request's upstream
    body: dict[str, Any]  # the body as it goes on (without `context_management` when emulating)
    items: list[Any]  # the history as it goes on (the proxy's tokens replaced)
    asked: Any = None  # the `context_management` the client asked for, when the proxy applies it
    replaced: bool = False  # a token of ours was replaced (or may be spelled in it): the body is re-serialised
    threshold: Threshold | None = None  # the threshold compaction asked, when the proxy applies it
    # what the answer's `context_management.applied_edits` says (Messages, `proxy.turn._context_management`);
    # None: the answer is not rewritten for it
    applied_edits: list[dict[str, Any]] | None = None

    @property
    def changed(self) -> bool:
        return self.replaced or self.asked is not None


def _stray(value: Any, *, where: str, settled: Callable[[str], bool] | None = None) -> None:
    """ProxyError 400 for a token of ours in an `encrypted_content` of `value` that is not a
    compaction position (`settled(path)` says which ones its format settles)."""
    for path in sealed_fields(value, where):
        if settled is None or not settled(path):
            raise ProxyError(
                Kind.BAD_REQUEST,
                f"{path} holds a compaction token of this proxy's outside a compaction item: only a "
                "`compaction` item (Responses) or block (Messages) may carry one.",
                code="invalid_compaction",
                param=path,
            )


def _may_hold(raw: jsonio.RawJson | None, body: dict[str, Any]) -> bool:
    """`may_hold_token` of the body's bytes, when they escape no printable ASCII character; else
    of the document written again (such an escape may spell the key)."""
    if raw is not None and not raw.escapes:
        return may_hold_token(raw.raw)
    return may_hold_token(jsonio.dumps(body))


async def begin(
    body: dict[str, Any],
    items: list[Any],
    *,
    fmt: WireFormat,
    emulating: bool,
    records: Records | None,
    raw: jsonio.RawJson | None = None,
) -> Emulation:
    """`fmt`: the request's format (its `compaction_emulation` settles its compaction positions;
    `records` are its records, unused by a format without one); `raw`: the body's bytes, when
    at hand (a quick test that it holds no token at all)."""
    compaction = fmt.compaction_emulation
    cpu = CPU(raw is None or len(raw.raw) > LARGE_BODY)  # a large body is searched and walked off the event loop
    scan = await cpu(_may_hold, raw, body)
    if scan:  # before anything else: no token in another position is expanded, nor sent
        settled = None if compaction is None else (lambda path: compaction.settles(body, path))
        await cpu(lambda: _stray(body, where="", settled=settled))
    result = Emulation(emulating, body, items)
    if emulating and "context_management" in body:  # checked first: a malformed one is a 400 whatever the input
        asked = body["context_management"]
        result.threshold = None if compaction is None else compaction.threshold(asked)
        result.asked = asked
        result.body = body = {k: v for k, v in body.items() if k != "context_management"}
    try:
        expanded = None
        if compaction is not None and records is not None:
            expanded = await compaction.expand(body, items, records, emulating=emulating)
        if expanded is not None:
            result.body, result.items, result.replaced = expanded.body, expanded.items, True
            if scan:  # what the records brought: none may hold a token any more
                await cpu(lambda: _stray(expanded.checked, where=expanded.where))  # a large one off the loop
        # the upstream gets the object checked, re-serialised: a duplicate key in the bytes as sent
        # cannot show it a token the check never saw
        result.replaced = result.replaced or scan
    except StoreUnavailable as exc:
        raise ProxyError(
            Kind.STORE_UNAVAILABLE,
            "The proxy's store is unavailable, and this input holds a compaction item whose "
            f"content the store keeps; try again ({exc}).",
            code="store_unavailable",
        ) from exc
    return result


# Anthropic's clearing edits (`clear_tool_uses_20250919`, `clear_thinking_20251015`) applied by
# the proxy for an upstream that does not apply them (a step of `proxy.turn`: the IO side; the
# rules are the format's, `WireFormat.clearing_edits`: `proxy.formats.messages._clearing_edits`, the
# config `proxy.formats.messages._clearing_edits`).
#
# `apply` checks the request's `context_management` (a 400 for a bad one), applies the edits to
# the history before the proxy's own planning, and stores what the cleared tool results and
# inputs were, so every marker stays reloadable. When nothing can be stored the tool results stay
# as they are (a warning says so) and only thinking is cleared: a marker whose ref resolves to
# nothing would lose the content. `settle` tells the rest of the request: `X-Offload-Action`
# gains `+context-edits`, a `context_edit` event is recorded, and the answer (streamed or not)
# carries `context_management.applied_edits` (`MessagesRounds.context_management`).
# `count_tokens` adds Anthropic's `context_management.original_input_tokens`
# (`proxy.http.managed`).

log = logging.getLogger("proxy.turn._context_management")


@dataclass
class EditsDone:
    items: list[Any]
    applied: list[dict[str, Any]] | None = None  # None: no edits emulated in this request
    offloads: list[Offload] = field(default_factory=list)
    cleared_tokens: int = 0
    warnings: list[str] = field(default_factory=list)


async def apply(
    emulation: Emulation,
    items: list[Any],
    *,
    fmt: WireFormat,
    body: dict[str, Any],
    counter: TokenCounter,
    refs: RefStore,
    namespace: str,
    session: str | None,
) -> EditsDone:
    """The history with the request's clearing edits applied (see the module docstring); the
    HTTP layer's 400 error for a malformed `context_management`."""
    clearing = fmt.clearing_edits
    if not emulation.emulating or emulation.asked is None or clearing is None:
        return EditsDone(items)
    counter = counter.for_request()
    fixed = counter.outside_history(body)
    run = functools.partial(
        clearing.apply, emulation.asked, items, counter=counter, namespace=namespace, fixed_tokens=fixed
    )
    cpu = cpu_pool.CPU.for_messages(items)
    edited = await cpu(run)
    warnings: list[str] = []
    if edited.offloads:
        try:
            await refs.admit()
            await refs.save(edited.offloads, [o.ref for o in edited.offloads], session, cpu=cpu)
        except WRITE_REFUSED as exc:
            warnings.append(
                f"{refusal_warning(exc)}; clear_tool_uses_20250919 not applied (the cleared content could not be kept)"
            )
            log.warning("context edits: %s", warnings[-1])
            edited = await cpu(functools.partial(run, tool_uses=False))
    emulation.applied_edits = edited.applied
    return EditsDone(edited.items, edited.applied, edited.offloads, edited.cleared_tokens, warnings)


def settle(done: EditsDone, prepared: Prepared, rounds: Rounds) -> Prepared:
    """After planning: `prepared` with the action, event and warnings of the edits (a new
    value); the answer's field set on `rounds`."""
    if done.applied is None:
        return prepared
    if done.applied:
        prepared = dataclasses.replace(
            prepared,
            events=[*prepared.events, event("context_edit", emulated=True, edits=done.applied)],
            plan=dataclasses.replace(
                prepared.plan, tokens_before=prepared.plan.tokens_before + done.cleared_tokens
            ),  # what the client sent
        ).with_action(EDITS_ACTION)
    rounds.context_management = {"applied_edits": done.applied}
    return dataclasses.replace(prepared, warnings=[*prepared.warnings, *done.warnings])


# Threshold compaction emulated inside a turn (Responses `context_management` compaction,
# Messages `compact_20260112`).
#
# When the history as the proxy would forward it (after its own compaction, counted with the
# request's counter) holds more tokens than the threshold, the proxy compacts in this request:
# `Compressor.fold` summarises all but the head (system items, the task) and the recent tail,
# the reduced history goes upstream, and the answer opens with the compaction the client keeps
# instead of everything before it:
#
# - Responses: a `compaction` item whose `encrypted_content` is the proxy's token; its record
#   (`CompactionRecords`) is everything the client may drop: the whole reduced input forwarded
#   now, less the system/developer items (the summary with its `ref=`, the kept user messages,
#   the tail verbatim). `proxy.formats.responses._compaction` expands it on the next request.
# - Messages: a `compaction` block whose `content` is the proxy's summary (its marker line with
#   `ref=`) and whose `encrypted_content` is the token of the messages forwarded now;
#   `proxy.formats.messages._emulation` expands it on the next request. With
#   `pause_after_compaction` the answer is that block alone (`stop_reason: "compaction"`,
#   `proxy.http.managed`) and no turn is asked of the upstream.
#
# Which record and which lead is the format's (`ProviderCompaction.record`, `.lead`); the fold,
# the stores and the plan are this step's, the same for every format.
#
# While a threshold compaction is asked, the proxy never compresses the history on its own (two
# summaries of one history would fight): the emulation plays the provider (`provider_for`).
# A failing summariser or store never fails the turn: it goes on uncompacted, with a warning.


@dataclass
class Inline:
    """What an emulated threshold compaction adds to the turn."""

    lead: list[dict[str, Any]] = field(default_factory=list)  # first in the answer: the compaction item / block
    paused: bool = False  # the answer is the lead alone, no upstream turn (Messages pause_after_compaction,
    # a Responses compaction_trigger: `proxy.turn._context_management`)
    tokens_in: int = 0  # the summary's own usage, for a paused answer
    tokens_out: int = 0
    made_by: ProviderCompaction | None = None  # the format's compaction that made the lead (None: no lead)


def provider_for(provider: ProviderContext, emulation: Emulation) -> ProviderContext:
    """While the proxy applies a threshold compaction, it does not compress on its own too."""
    if emulation.threshold is None:
        return provider
    return dataclasses.replace(provider, compacts=True)


def _warned(prepared: Prepared, why: str) -> Prepared:
    return dataclasses.replace(prepared, warnings=[*prepared.warnings, f"threshold compaction not made: {why}"])


def _text(item: Any) -> str:
    content = item.get("content") if isinstance(item, dict) else None
    if isinstance(content, str):
        return content
    return "".join(b["text"] for b in content or () if isinstance(b, dict) and isinstance(b.get("text"), str))


async def compact_at_threshold(
    emulation: Emulation,
    prepared: Prepared,
    *,
    fmt: WireFormat,
    settings: OffloadSettings,
    counter: TokenCounter,
    history: list[Any],
    refs: RefStore,
    records: CompactionRecords | None,
    compressor: Callable[[], Compressor | None],
    new_summaries: bool = True,
) -> tuple[Prepared, Inline]:
    """The threshold compaction of a turn (`proxy.turn`) once its pipeline has run: `prepared`
    as it goes on (a new value: the reduced plan, the summary's usage, events, action, or a
    warning) and the lead.
    `history`: the turn's items as planned (after the clearing edits). Nothing without an asked
    threshold, below it, or when counting tokens (`new_summaries` False: no summary is made for
    a count)."""
    threshold, compaction = emulation.threshold, fmt.compaction_emulation
    if threshold is None or compaction is None or records is None or not new_summaries:
        return prepared, Inline()
    view = fmt.view
    items = prepared.plan.items
    cpu = CPU.for_messages(items)
    tokens = await cpu.light(counter.messages, items)
    limit = threshold.tokens if threshold.tokens is not None else settings.max_total_tokens
    if tokens <= limit:
        return prepared, Inline()
    folder = compressor()  # made inline (not in the background), with the request's summariser
    if folder is None:
        return _warned(prepared, "no summariser"), Inline()
    if threshold.instructions:
        folder = folder.with_instruction(threshold.instructions)
    try:
        made = await folder.fold(
            items,
            history,
            settings,
            counter=counter,
            keep_recent=settings.keep_recent_for(COMPRESS_KEEP_RECENT),
            cpu=cpu,
        )
    except WRITE_REFUSED as exc:
        return _warned(prepared, refusal_warning(exc)), Inline()
    if made.items is None or made.summary_at is None:
        return _warned(prepared, made.warning or "nothing to summarise"), Inline()
    reduced = made.items
    record = compaction.record(reduced)
    present = await cpu(present_refs, reduced, view)  # reads every text: a large task's too
    try:
        await records.admit()  # a record is stored whatever the refs: the caller admitted first
        written = await refs.save(made.stored, [*present, *made.kept], settings.session, cpu=cpu)
        token = await records.save(record)
    except (StoreUnavailable, QuotaExceeded, CredentialRejected, TokenError) as exc:  # WRITE_REFUSED, and a bad token
        return _warned(prepared, f"the store refused it ({exc})"), Inline()
    summary = _text(reduced[made.summary_at])
    lead = compaction.lead(summary, token)
    plan = prepared.plan
    after = await cpu(counter.messages, reduced)
    summary_refs = refs_in(summary)
    events = [
        *prepared.events,
        *made.events,
        event(
            "provider_compaction",
            emulated=True,
            endpoint=fmt.endpoint,
            messages=len(items) - len(reduced) + 1,
            tokens_before=tokens,
            tokens_after=after,
            ref=summary_refs[0] if summary_refs else None,
        ),
    ]
    compacted = dataclasses.replace(
        prepared,
        plan=Plan(reduced, [*plan.offloads, *made.stored], present, plan.tokens_before, after, plan.media_tokens_saved),
        written=prepared.written | written,
        summary_tokens=prepared.summary_tokens + made.summary_tokens,
        summary_usage=add_usage(prepared.summary_usage, made.usage),
        events=events,
    ).with_action(COMPACTION_ACTION)
    usage = made.usage or {}
    return compacted, Inline(
        [lead],
        paused=threshold.pause,  # only a Messages threshold pauses
        tokens_in=usage.get("prompt_tokens") or 0,
        tokens_out=usage.get("completion_tokens") or 0,
        made_by=compaction,
    )


# A compaction asked now: `POST /v1/responses/compact` emulated, the history summarised now by
# the proxy's own summariser, and a token of the proxy's standing for what the client may drop.
# A `/v1/responses` request ending in a `compaction_trigger` (`proxy.formats.responses`)
# is compacted by the same `compact` (`compact_now`, for the turn).
#
# The history (the request's `input`, the proxy's own newest token in it already replaced by
# what it stands for: `proxy.turn._context_management.begin`) is folded whole (`Compressor.fold`,
# keep_recent 0): what stays is the head (system items, the task), the summary item, and the
# system items and later user messages `proxy.core.compression.assemble` keeps. All of that is
# the compaction's record (`CompactionRecords.save`), and the summarised originals are stored
# under the summary's `ref=`, so a later request carrying the token gets, in its place, the
# task, the summary (every byte behind it reloadable) and the kept user messages, in their
# order. The client is answered, as OpenAI answers, the user messages (the task and the kept
# ones) followed by one compaction item carrying the token.
#
# Nothing to fold (the history is the task alone, or empty): the record is the history as it is
# (the token stands for it unchanged). A summary that cannot be made, or a store that cannot
# keep the record, fails the compaction (`CompactionFailed`): a compaction that cannot compact
# says so rather than answer a token standing for nothing.

ENDPOINT = "responses/compact"


class CompactionFailed(Failure):
    """No summary could be made of this history (the summariser's reason in the message)."""

    kind = Kind.COMPACTION_FAILED
    code = "compaction_failed"


@dataclass
class Compaction:
    token: str
    record: list[Any]  # what the token stands for
    kept_users: list[Any]  # the user messages of the record, in order: what the client keeps
    tokens_before: int  # of the history compacted
    tokens_after: int  # of the record
    tokens_in: int = 0  # what the summary calls used (0: a summary of this history was made before)
    tokens_out: int = 0
    ref: str | None = None  # the summary's, when there is one
    written: set[str] = field(default_factory=set)  # refs stored for the first time
    events: list[dict[str, Any]] = field(default_factory=list)


async def compact(
    items: list[Any],
    *,
    view: ItemView,
    compressor: Compressor,
    refs: RefStore,
    records: CompactionRecords,
    settings: OffloadSettings,
    counter: TokenCounter,
    endpoint: str = ENDPOINT,
) -> Compaction:
    """Summarise `items` and store what the token stands for. CompactionFailed when the summary
    could not be made; the store's and the quota's exceptions as they come (StoreUnavailable,
    QuotaExceeded, CredentialRejected). `endpoint`: what asked for it, as the event says
    (`responses/compact`, or `responses` for a `compaction_trigger`, `compact_now`)."""
    cpu = CPU.for_messages(items)
    folded = await compressor.fold(items, items, settings, counter=counter, keep_recent=0, cpu=cpu)
    if folded.items is None and folded.warning:
        raise CompactionFailed(folded.warning)
    record = folded.items if folded.items is not None else list(items)
    at = folded.summary_at if folded.items is not None else None
    written: set[str] = set()
    ref = None
    await records.admit()  # a record is stored whatever the refs: the caller admitted first
    if at is not None:
        if folded.offload is not None:  # newly made: its originals behind the ref
            ref = folded.offload.ref
            written = await refs.save(folded.stored, [ref], settings.session, cpu=cpu)
        else:  # made before (and stored then): kept alive as long as the record
            found = present_refs([record[at]], view)
            ref = found[0] if found else None
            if found:
                written = await refs.save([], [*found, *folded.kept], settings.session, cpu=cpu)
    token = await records.save(record)
    kept = [m for i, m in enumerate(record) if i != at and view.role(m) == "user"]
    tokens_before = await cpu(counter.messages, items)  # new strings (a loaded record's) are hashed for their count
    tokens_after = await cpu(counter.messages, record)
    done = event(
        "provider_compaction",
        emulated=True,
        endpoint=endpoint,
        messages=len(items) - len(record) + (1 if at is not None else 0),
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        ref=ref,
    )
    return Compaction(
        token,
        record,
        kept,
        tokens_before,
        tokens_after,
        folded.usage_in,
        folded.usage_out,
        ref,
        written,
        [*folded.events, done],
    )


async def compact_now(
    items: list[Any],
    *,
    compaction: ProviderCompaction,
    view: ItemView,
    endpoint: str,
    settings: OffloadSettings,
    counter: TokenCounter,
    refs: RefStore,
    records: CompactionRecords,
    compressor: Callable[[], Compressor | None],
) -> tuple[Prepared, Inline]:
    """Compact the history `items` (the input as planned, its trigger last): the turn's figures
    (`Prepared`: the action, the tokens before and after, the refs written, the events) and its
    answer (`Inline`: the format's compaction, paused). CompactionFailed when no summary could be
    made; ProxyError 503 when the store is unavailable; the quota's exceptions as they come."""
    history = items[:-1]
    if not history:
        raise ProxyError(
            Kind.BAD_REQUEST,
            "input holds nothing before its compaction_trigger: there is no history to compact.",
            code="invalid_value",
            param="input",
        )
    folder = compressor()  # made inline, with the request's summariser
    if folder is None:
        raise CompactionFailed("no summariser")
    try:
        done = await compact(
            history,
            view=view,
            compressor=folder,
            refs=refs,
            records=records,
            settings=settings,
            counter=counter,
            endpoint=endpoint,
        )
    except StoreUnavailable as exc:
        raise ProxyError(
            Kind.STORE_UNAVAILABLE,
            f"The compaction failed: the proxy's store is unavailable ({exc}); try again.",
            code="store_unavailable",
        ) from exc
    plan = Plan(
        done.record,
        refs=[done.ref] if done.ref else [],
        tokens_before=done.tokens_before,
        tokens_after=done.tokens_after,
    )
    prepared = Prepared(
        plan,
        action=COMPACTION_ACTION,
        summary_tokens=done.tokens_in + done.tokens_out,
        events=done.events,
        written=done.written,
    )
    lead = compaction.lead("", done.token)
    return prepared, Inline(
        [lead], paused=True, tokens_in=done.tokens_in, tokens_out=done.tokens_out, made_by=compaction
    )
