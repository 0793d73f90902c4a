"""The offload pipeline of one request: compaction, then compression, then the store.

Run by every managed turn (`proxy.turn`: the server's routes, `count_tokens` and `replay`) and
by the direct offload API, so all behave the same.
The pure, CPU-heavy steps of a large request (planning with token counts, hashing, encoding
what is stored) run off the event loop (`proxy.offload.cpu_pool`); a small request's run inline,
unless the diffs its folds may take are long (`proxy.core.fold.diff_cells`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.core.compaction import NONE, Plan, ProviderContext, plan_compaction, present_refs
from proxy.core.fold import MAX_CELLS, diff_cells
from proxy.core.jsonio import JsonObject
from proxy.core.settings import OffloadSettings
from proxy.core.tokens import TokenCounter
from proxy.core.view import ItemView
from proxy.offload.cpu_pool import CPU
from proxy.offload.records import RefStore, event
from proxy.offload.summaries import Compressor
from proxy.offload.summarizer import Compressed
from proxy.offload.tenant import WRITE_REFUSED, refusal_warning
from proxy.store import StoreUnavailable


@dataclass(frozen=True)
class Prepared:
    """What the pipeline made of a turn's history: built once by `prepare`, never changed after
    (a later step's action by `with_action`, a copy). `deferred` alone is drained, once, by
    `start_background`."""

    plan: Plan
    action: str = "none"  # none | compact | compress | compact+compress; "compress-pending" for compress when
    # the summary this turn needed was not ready and is being made in the background
    summary_tokens: int = 0
    summary_usage: JsonObject | None = None  # added to the usage the client is answered with
    warnings: list[str] = field(default_factory=list)
    events: list[JsonObject] = field(default_factory=list)
    store_failed: bool = False  # nothing could be stored: the original messages go through
    refused: Exception | None = None  # ...because the quota refused the writes (QuotaExceeded, CredentialRejected)
    written: set[str] = field(default_factory=set)  # refs stored for the first time by this request
    # Background summaries to start once the turn's upstream request is out (`start_background`).
    deferred: list[Callable[[], Awaitable[object]]] = field(default_factory=list)
    summary_prefix: str = ""  # the prefix hash of the summary forwarded ("" none): the session's record keeps it

    def with_action(self, part: str) -> Prepared:
        """A copy with `part` (an emulated step: `proxy.turn._context_management`, `proxy.turn._context_management`)
        added to the action: alone, or after a `+`."""
        return dataclasses.replace(self, action=part if self.action == "none" else f"{self.action}+{part}")

    async def start_background(self) -> None:
        """Hand the summaries this turn prepared to the scheduler (once; later calls do nothing),
        each under its conversation's lease: taken before this returns, so a turn that follows
        this one's answer, on any replica, finds it."""
        deferred = list(self.deferred)
        self.deferred.clear()
        for start in deferred:
            await start()


def _action(compacted: bool, compressed: bool, pending: bool = False) -> str:
    compress = "compress-pending" if pending else "compress"
    return (
        "+".join(name for name, done in (("compact", compacted), (compress, compressed or pending)) if done) or "none"
    )


def _measure(items: list[Any], view: ItemView, counter: TokenCounter) -> tuple[list[str], int]:
    """The refs `items` carry, and their tokens."""
    return present_refs(items, view), counter.messages(items)


async def prepare(
    messages: list[Any],
    settings: OffloadSettings,
    *,
    counter: TokenCounter,
    namespace: str,
    refs: RefStore,
    compressor: Compressor | None,
    view: ItemView,
    new_summaries: bool = True,
    provider: ProviderContext = NONE,
) -> Prepared:
    """Reduce `messages` (a wire format's history items, seen through `view`) and make every
    reference in the result resolvable. `new_summaries`: False uses the summaries the store
    holds and never makes a new one (nor waits for one). `provider`: the context management
    the request asks of the provider; the proxy steps aside where it acts (no compression of a
    history the provider compacts, no compaction of what its clear edit may clear).

    Never raises for the store: when it is unreachable the original messages go through,
    with a warning.
    """
    if compressor is not None and compressor.view is not view:
        raise ValueError("the compressor reads the items through another view than the planner")
    counter = counter.for_request()
    cpu = CPU.for_messages(messages)
    compact_mode = settings.mode in ("auto", "compact")
    compress_mode = settings.mode in ("auto", "compress") and compressor is not None and not provider.compacts
    # A plan whose folds may align more lines than one diff at its bound runs off the loop too.
    folds = settings.fold and settings.mode != "off"
    planner = cpu if cpu.large or not folds else CPU(diff_cells(messages, view) > MAX_CELLS)
    plan = await planner(
        plan_compaction,
        messages,
        view,
        settings,
        counter=counter,
        namespace=namespace,
        provider=provider,
        compact=compact_mode,
    )
    compacted = list(plan.offloads)  # compaction's own, not what a summary stores
    compressed_now = pending = False
    kept: tuple[str, ...] = ()  # the media a summary's stored originals name: kept alive with it
    summary: Compressed | None = None
    try:
        if compress_mode and compressor is not None:
            before = max(plan.tokens_before, 1)
            # auto: compress when compaction saved too little, or left the history over the trigger
            allow_new = new_summaries and (
                settings.mode == "compress"
                or plan.tokens_after / before > settings.compaction_ratio
                or plan.tokens_after > settings.max_total_tokens
            )
            compressor.unfold = plan.unfold  # a fold whose base a summary hides goes without (`cp.assemble`)
            summary = await compressor.run(
                plan.items, messages, settings, counter=counter, allow_new=allow_new, cpu=cpu
            )
            pending = summary.pending
            kept = summary.kept
            if summary.items is not None:
                # the reduced items: small but for a history that is large even once compressed
                refs_after, tokens_after = await cpu.for_part(summary.items)(_measure, summary.items, view, counter)
                # the folds' indices name the items before the summary: none holds after it
                plan = dataclasses.replace(
                    plan,
                    items=summary.items,
                    offloads=plan.offloads + summary.stored,
                    refs=refs_after,
                    tokens_after=tokens_after,
                    unfold={},
                )
                compressed_now = True
        if plan.offloads:  # new content may be stored: the caller admitted first
            await refs.admit()
        written = await refs.save(plan.offloads, [*plan.refs, *kept], settings.session, cpu=cpu)
    except WRITE_REFUSED as exc:
        return Prepared(
            Plan(messages, tokens_before=plan.tokens_before, tokens_after=plan.tokens_before),
            warnings=[f"{refusal_warning(exc)}; forwarded without offloading"],
            store_failed=True,
            refused=None if isinstance(exc, StoreUnavailable) else exc,
        )
    events: list[JsonObject] = []
    new = [o for o in compacted if o.ref in written]
    if new:  # an item compacted on an earlier turn is not a new action
        events.append(
            event(
                "compaction",
                messages=len(new),
                tokens_before=plan.tokens_before,
                tokens_after=plan.tokens_after,
                refs=[o.ref for o in new],
            )
        )
    if summary is None:
        return Prepared(plan, action=_action(bool(compacted), compressed_now, pending), written=written, events=events)
    return Prepared(
        plan,
        action=_action(bool(compacted), compressed_now, pending),
        summary_tokens=summary.summary_tokens,
        summary_usage=summary.usage,
        warnings=[summary.warning] if summary.warning else [],
        events=events + summary.events,
        written=written,
        deferred=compressor.deferred if compressor is not None else [],
        summary_prefix=summary.summary_prefix,
    )
