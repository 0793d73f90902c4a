"""Threshold compaction emulated inside a turn (Responses `context_management` compaction,
Messages `compact_20260112`).

When the history as the proxy would forward it (after its own compaction, counted with the
request's counter) holds more tokens than the threshold, the proxy compacts in this request:
`Compressor.fold` summarises all but the head (system items, the task) and the recent tail,
the reduced history goes upstream, and the answer opens with the compaction the client keeps
instead of everything before it:

- Responses: a `compaction` item whose `encrypted_content` is the proxy's token; its record
  (`CompactionRecords`) is everything the client may drop: the whole reduced input forwarded
  now, less the system/developer items (the summary with its `ref=`, the kept user messages,
  the tail verbatim). `proxy.formats.responses._compaction` expands it on the next request.
- Messages: a `compaction` block whose `content` is the proxy's summary (its marker line with
  `ref=`) and whose `encrypted_content` is the token of the messages forwarded now;
  `proxy.formats.messages._emulation` expands it on the next request. With
  `pause_after_compaction` the answer is that block alone (`stop_reason: "compaction"`,
  `proxy.http.emulated_answers`) and no turn is asked of the upstream.

Which record and which lead is the format's (`ProviderCompaction.record`, `.lead`); the fold,
the stores and the plan are this step's, the same for every format.

While a threshold compaction is asked, the proxy never compresses the history on its own (two
summaries of one history would fight): the emulation plays the provider (`provider_for`).
A failing summariser or store never fails the turn: it goes on uncompacted, with a warning.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.core.answers import add_usage
from proxy.core.compaction import COMPACTION_ACTION, Plan, ProviderContext, TokenError, present_refs
from proxy.core.compression import COMPRESS_KEEP_RECENT
from proxy.core.settings import OffloadSettings
from proxy.core.texts import refs_in
from proxy.core.tokens import TokenCounter
from proxy.core.wire import ProviderCompaction, WireFormat
from proxy.offload.cpu_pool import CPU
from proxy.offload.pipeline import Prepared
from proxy.offload.quota import WRITE_REFUSED, CredentialRejected, QuotaExceeded, refusal_warning
from proxy.offload.records import CompactionRecords, RefStore, event
from proxy.offload.summaries import Compressor
from proxy.store import StoreUnavailable
from proxy.turn._context_tokens import Emulation

log = logging.getLogger("proxy.turn._context_compaction")


@dataclass
class Inline:
    """What an emulated threshold compaction adds to the turn."""

    lead: list[dict[str, Any]] = field(default_factory=list)  # first in the answer: the compaction item / block
    paused: bool = False  # the answer is the lead alone, no upstream turn (Messages pause_after_compaction,
    # a Responses compaction_trigger: `proxy.turn._compact_now`)
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


async def compact(
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
        folder.ctx.instruction = threshold.instructions
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
