"""The summary the session forwarded last stays: below the trigger, and while a newer cut would not pay.

`proxy.offload.summaries.Compressor.run` forwards the longest summary ready for a history. When
a newer one is ready while the one the session's last turn forwarded still leaves what follows
it under the trigger, taking the newer one now rewrites the cached rest of the prefix; with the
cache warm that costs more than it saves unless the cut removes enough (`proxy.core.prompt_cache`).
And a cut forwarded below the trigger (made early on a cold cache, or the history's foldable part
shrinking as results are compacted) is forwarded again by the next turns rather than undone: the
history is never rewritten back and forth. The session's record (`proxy.offload.last_sent`) names
the summary it forwarded.
"""

from __future__ import annotations

from typing import Any, Protocol

from proxy.core import compression as cp
from proxy.core.prompt_cache import CutContext, keep_previous
from proxy.core.tokens import TokenCounter
from proxy.core.view import ItemView
from proxy.offload.cpu_pool import CPU
from proxy.offload.summary_context import Compressed


class Compressing(Protocol):
    """What this reads of the compressor (`proxy.offload.summaries.Compressor`, which uses this
    module: named by its shape so neither imports the other)."""

    view: ItemView

    @property
    def cuts(self) -> CutContext | None: ...

    async def _load(self, prefix_hash: str) -> cp.PriorSummary | None: ...

    def _using(self, compacted: list[Any], head: int, prior: cp.PriorSummary, **more: Any) -> Compressed: ...


async def forwarded(
    compressor: Compressing, originals: list[Any], *, chain: cp.PrefixHashes, head: int, tail: int, cpu: CPU
) -> cp.PriorSummary | None:
    """The summary the session's last turn forwarded, when it is one of this very history
    standing for items[head:cut] with cut <= `tail`; None otherwise (no record, none forwarded,
    expired, a fork's)."""
    ctx = compressor.cuts
    if ctx is None or ctx.sent is None or not ctx.sent.summary:
        return None
    old = await compressor._load(ctx.sent.summary)
    if old is None or not head <= old.cut <= tail:
        return None
    if not await cpu.for_part(originals[: old.cut])(chain.matches, old.cut, ctx.sent.summary):
        return None  # a summary of another history (a fork of the session's start)
    return old


async def previous(
    compressor: Compressing,
    compacted: list[Any],
    originals: list[Any],
    *,
    chain: cp.PrefixHashes,
    head: int,
    tail: int,
    trigger: int,
    newer: cp.PriorSummary,
    counter: TokenCounter,
    cpu: CPU,
) -> tuple[cp.PriorSummary, Compressed] | None:
    """The summary the session forwarded last and the items with it, to forward instead of
    `newer`: when it is another one, of this very history, what follows it fits `trigger`, the
    cache is warm and the newer cut would cost more than it saves. None: `newer` goes."""
    ctx = compressor.cuts
    if ctx is None or ctx.sent is None or ctx.cold or not ctx.sent.summary or ctx.sent.summary == newer.prefix:
        return None
    old = await forwarded(compressor, originals, chain=chain, head=head, tail=tail, cpu=cpu)
    if old is None or not old.cut < newer.cut:
        return None
    view = compressor.view
    if await cpu.light(cp.tokens_between, compacted, view, old.cut, end=tail, counter=counter) > trigger:
        return None  # the trigger is crossed with the old one: the newer one goes
    kept, cut = compressor._using(compacted, head, old), compressor._using(compacted, head, newer)
    assert kept.items is not None and cut.items is not None
    head_tokens = await cpu.light(counter.messages, compacted[:head])
    kept_tokens = await cpu.light(counter.messages, kept.items)
    cut_tokens = await cpu.light(counter.messages, cut.items)
    if not keep_previous(ctx, after=cut_tokens - head_tokens, removed=kept_tokens - cut_tokens):
        return None
    return old, kept
