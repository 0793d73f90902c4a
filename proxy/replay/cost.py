"""Where the cache-weighted cost of a replay goes (`replay`'s `cost_breakdown`).

Each forwarded item is one part of the window: `system` (the leading system items), `task` (the
first user message and what is attached to it), `summary` (a compression summary message),
`previews` (items carrying the marker of an offloaded tool result or image), `window` (the rest:
what is forwarded verbatim since the last summary, or since the task); the billed tokens of the
images still forwarded are the part `images`, out of the item that carries them. (An Anthropic
request merges the summary into the task's user message: that message is split between them by
the length of their parts, `merged_summary`.)

The cost of a forwarded turn (`proxy.replay.metrics`: its common whole-item prefix with the
previous turn read from the cache, every other token written) splits into:

- `new`: the tokens of the items the turn adds to the history (the last n forwarded items, n the
  items the raw request grew by since the previous turn; all of the first turn), outside the
  cached prefix: content paid once at the write price;
- `read_<part>`: the cached prefix, by part, at the read price;
- `resend`: the other tokens outside the cached prefix: items already sent before, sent again
  uncached because an earlier item changed (a compression's summary, a tool result compacted, an
  image offloaded): the cache writes and misses a rewritten prefix causes;
- `summary_calls`: the summariser's requests, as `metrics.summary_call_cost` prices them.

They sum to `metrics.cache_cost` of the same turns. The raw history's cost splits into `new`
and `read` the same way; `floor` = raw `new` / raw cost: every new token paid once, at the price
of a token written (1.0 OpenAI, 1.25 Anthropic), everything else free.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from proxy.core import compression as cp
from proxy.core.tokens import IMAGE_PARTS, part_image_tokens
from proxy.core.view import ItemView
from proxy.replay import metrics
from proxy.replay.metrics import PRICINGS, Pricing, SummaryCall, common_prefix

PARTS = ("system", "task", "summary", "window", "previews", "images")
COST_PARTS = ("new", *(f"read_{p}" for p in PARTS), "resend", "summary_calls")
RAW_PARTS = ("new", "read")
SUMMARY_MARK = "[offloaded history: "
PREVIEW_MARKS = (
    "[offloaded tool result: ",
    "[image offloaded: ",
    "[file offloaded: ",
    "[document offloaded: ",
    "[audio offloaded: ",
)


def image_tokens(value: Any) -> int:
    """The billed tokens of the image parts anywhere in `value` (an item)."""
    if isinstance(value, list):
        return sum(image_tokens(v) for v in value)
    if not isinstance(value, dict):
        return 0
    if value.get("type") in IMAGE_PARTS:
        return part_image_tokens(value)
    return sum(image_tokens(v) for v in value.values() if isinstance(v, (dict, list)))


def item_parts(items: list[Any], view: ItemView) -> list[str]:
    """The part (`PARTS`, never "images") of each forwarded item."""
    parts = ["window"] * len(items)
    head = 0
    while head < len(items) and view.role(items[head]) == "system":
        parts[head] = "system"
        head += 1
    task = cp.task_end(items, view, head)
    for i in range(head, task):
        parts[i] = "task"
    for i in range(task, len(items)):
        text = metrics.item_text(items[i])
        if SUMMARY_MARK in text:
            parts[i] = "summary"
        elif any(mark in text for mark in PREVIEW_MARKS):
            parts[i] = "previews"
    return parts


def merged_summary(item: Any, part: str) -> dict[str, float]:
    """An item's share of each part: all of `part`, unless a summary part sits inside a message
    of other content (Anthropic: the summary merged into the task's user message); then its
    content parts before the summary are `part`, the summary `summary`, those after `window`,
    each by the length of its JSON."""
    content = item.get("content") if isinstance(item, dict) and part != "summary" else None
    if not isinstance(content, list):
        return {part: 1.0}
    marked = [SUMMARY_MARK in metrics.item_text({"content": [p]}) for p in content]
    if True not in marked:
        return {part: 1.0}
    sizes = [len(json.dumps(p, ensure_ascii=False)) for p in content]
    at, total = marked.index(True), sum(sizes) or 1
    shares = {part: sum(sizes[:at]) / total, "summary": sizes[at] / total}
    shares["window"] = shares.get("window", 0.0) + sum(sizes[at + 1 :]) / total
    return shares


class Window:
    """What one forwarded turn is made of: per item its parts' shares, tokens and image tokens."""

    def __init__(self, items: list[Any], tokens: list[int], view: ItemView) -> None:
        self.items, self.tokens = items, tokens
        self.parts = [merged_summary(item, part) for item, part in zip(items, item_parts(items, view))]
        self.images = [min(image_tokens(item), n) for item, n in zip(items, tokens)]

    def by_part(self, start: int = 0, end: int | None = None) -> dict[str, float]:
        """Tokens of items[start:end] by part (`PARTS`)."""
        out = dict.fromkeys(PARTS, 0.0)
        for shares, n, image in zip(self.parts[start:end], self.tokens[start:end], self.images[start:end]):
            for part, share in shares.items():
                out[part] += share * (n - image)
            out["images"] += image
        return out


def new_items(request_lengths: Sequence[int]) -> list[int]:
    """Per turn, the items its raw request added to the previous turn's (all of the first)."""
    return [n - (request_lengths[k - 1] if k else 0) for k, n in enumerate(request_lengths)]


def breakdown(
    windows: list[Window],
    added: list[int],
    *,
    tools: list[Any] | None,
    summaries: Sequence[SummaryCall],
    pricing: Pricing,
) -> dict[str, float]:
    """The forwarded turns' cost (and their summary calls') by `COST_PARTS`."""
    out = dict.fromkeys(COST_PARTS, 0.0)
    for k, window in enumerate(windows):
        shared = common_prefix(window.items, windows[k - 1].items) if k else 0
        for part, n in window.by_part(0, shared).items():
            out[f"read_{part}"] += pricing.read * n
        fresh = max(shared, len(window.items) - added[k])
        out["resend"] += pricing.write * sum(window.tokens[shared:fresh])
        out["new"] += pricing.write * sum(window.tokens[fresh:])
    turns = [w.items for w in windows]
    out["summary_calls"] = sum(metrics.summary_call_cost(c, turns, tools, pricing=pricing) for c in summaries)
    return out


def raw_breakdown(request_tokens: list[list[int]], pricing: Pricing) -> dict[str, float]:
    """The raw turns' cost (each request a prefix of the next) by `RAW_PARTS`."""
    out = dict.fromkeys(RAW_PARTS, 0.0)
    before = 0
    for counts in request_tokens:
        out["read"] += pricing.read * sum(counts[:before])
        out["new"] += pricing.write * sum(counts[before:])
        before = len(counts)
    return out


def conversation_costs(
    windows: list[Window],
    added: list[int],
    request_tokens: list[list[int]],
    *,
    tools: list[Any] | None,
    summaries: Sequence[SummaryCall],
) -> dict[str, dict[str, Any]]:
    """Per pricing (`PRICINGS`): `cost`, `raw_cost`, `parts`, `raw_parts`."""
    out = {}
    for name, pricing in PRICINGS.items():
        parts = breakdown(windows, added, tools=tools, summaries=summaries, pricing=pricing)
        raw = raw_breakdown(request_tokens, pricing)
        out[name] = {"cost": sum(parts.values()), "raw_cost": sum(raw.values()), "parts": parts, "raw_parts": raw}
    return out


def forwarded_by_part(windows: list[Window]) -> dict[str, float]:
    """Forwarded tokens by part, summed over the turns."""
    out = dict.fromkeys(PARTS, 0.0)
    for window in windows:
        for part, n in window.by_part().items():
            out[part] += n
    return out


def summed(costs: list[dict[str, dict[str, Any]]], tokens: list[dict[str, float]]) -> dict[str, Any]:
    """The overall breakdown of several conversations: per pricing the parts summed, each as a
    share of the raw cost (`ratios`; they sum to the cache_cost_ratio), and the floor; and the
    forwarded tokens by part with their shares."""
    out: dict[str, Any] = {}
    for name in PRICINGS:
        parts = {p: sum(c[name]["parts"][p] for c in costs) for p in COST_PARTS}
        raw_parts = {p: sum(c[name]["raw_parts"][p] for c in costs) for p in RAW_PARTS}
        cost, raw = sum(parts.values()), sum(raw_parts.values())
        out[name] = {
            "cost": cost,
            "raw_cost": raw,
            "cache_cost_ratio": cost / raw if raw else 1.0,
            "floor": raw_parts["new"] / raw if raw else 1.0,
            "parts": parts,
            "raw_parts": raw_parts,
            "ratios": {p: v / raw if raw else 0.0 for p, v in parts.items()},
        }
    forwarded = {p: sum(t[p] for t in tokens) for p in PARTS}
    total = sum(forwarded.values())
    out["forwarded_tokens"] = forwarded
    out["forwarded_shares"] = {p: n / total if total else 0.0 for p, n in forwarded.items()}
    return out
