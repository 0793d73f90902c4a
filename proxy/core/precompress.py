"""When a summary is started ahead of time, and when a turn must wait for one. Pure.

A summary costs seconds; the turn that crosses the trigger should not pay them. So once the
part a summary would fold reaches `precompress_ratio` of the trigger, the summary is made in
the background; it covers items[head:tail] of that turn and is stored under the hash of that
prefix, so a later turn finds it as its prior summary and forwards it exactly as it would a
summary made inline for the same cut. A turn that crosses the trigger with nothing ready goes
out without it, unless what it would forward is above the hard limit: then it waits.
"""

from __future__ import annotations

from typing import Any

from proxy.core.compression import COMPRESS_KEEP_RECENT, Decision, PriorSummary, split, tokens_between, trigger
from proxy.core.settings import OffloadSettings
from proxy.core.tokens import TokenCounter
from proxy.core.view import ItemView

# Context windows (tokens) of well-known models, by name prefix; the longest prefix wins.
CONTEXT_WINDOWS: dict[str, int] = {
    "gpt-3.5-turbo": 16_385,
    "gpt-4-turbo": 128_000,
    "gpt-4o": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-5": 400_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "claude-": 200_000,
}


def context_window(model: str | None) -> int | None:
    """The model's context window when known (a dated or suffixed name matches its family)."""
    if not model:
        return None
    name = model.rsplit("/", 1)[-1].lower()  # "openai/gpt-4o" → "gpt-4o"
    best = max((prefix for prefix in CONTEXT_WINDOWS if name.startswith(prefix)), key=len, default=None)
    return CONTEXT_WINDOWS[best] if best else None


def hard_limit(settings: OffloadSettings, model: str | None) -> int:
    """Forwarded tokens above which a turn waits for its summary."""
    limit = settings.hard_max_tokens or 2 * settings.max_total_tokens
    window = context_window(model)
    return min(limit, window) if window else limit


def ahead(
    items: list[Any], view: ItemView, settings: OffloadSettings, *, counter: TokenCounter, prior: PriorSummary | None
) -> Decision | None:
    """The summary to start now, before the trigger is crossed, or None.

    What it folds: the items after the prior summary (or after the leading system items) up to
    the kept tail, once they reach `precompress_ratio` of the trigger. The cut is this turn's
    tail, so the summary is the one an inline summary of this turn's history would be.
    """
    ratio = settings.precompress_ratio
    if ratio <= 0:
        return None
    head, tail = split(items, view, settings.keep_recent_for(COMPRESS_KEEP_RECENT))
    usable = prior if prior is not None and head <= prior.cut <= tail else None
    start = usable.cut if usable is not None else head
    limit = trigger(items, view, head, settings=settings, counter=counter)
    if tail - start < 2 or tokens_between(items, view, start, end=tail, counter=counter) < ratio * limit:
        return None
    return Decision("summarize", head, tail, usable, (start, tail))
