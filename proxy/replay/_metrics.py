"""The replay's figures: pure functions of the replayed and forwarded histories, where their cache-
weighted cost goes, and the cheapest summary schedule a summariser's latency allows.

The replay's figures that are pure functions of the replayed and forwarded histories.

Format-neutral: an item is a chat message, a Responses input item or an Anthropic message (or
part of one), and `item_text` reads every shape, so the same conversation gives the same recall
in every format.

- prefix_reuse: Σ over consecutive turns of the tokens of the longest common prefix of whole
  forwarded items of turn k and k+1, divided by Σ tokens of forwarded turn k.
- recall: for each turn k, the identifiers (`IDENTIFIER`) the model wrote in assistant message
  k (its text and its tool calls' names and arguments) that occur in the text of an earlier tool
  result and in no earlier non-tool item ("kept": facts only a tool result had told it);
  recall = Σ kept that occur verbatim (as a substring) in the text of turn k's forwarded items /
  Σ kept. An identifier counts once per turn.
- cache cost, at a `Pricing`: a turn's tokens in its longest common whole-item prefix with the
  previous turn are cache reads (`read`: 10 % of an input token's price), the others are input
  written to the cache (`write`: 1.0 for OpenAI, the default and the figures before `--pricing`
  existed, i.e. a turn costs its tokens minus 0.9 × its prefix; 1.25 for Anthropic's 5-minute
  cache); a summary call costs its input tokens, discounted the same way against the previous
  forwarded turn only when it carries the same tools. cache_cost_ratio = (forwarded turns +
  summary calls) / raw turns. Where that cost goes: `proxy.replay._metrics`.
- latency: per-turn added latency (the wall time of the pipeline's `prepare`), p50 / p99 (nearest
  rank) / max, and the stalled turns: those whose added latency exceeds half the summary delay.

Where the cache-weighted cost of a replay goes (`replay`'s `cost_breakdown`).

Each forwarded item is one part of the window: `system` (the leading system items), `task` (the
first user message and what is attached to it), `summary` (a compression summary message),
`previews` (items carrying the marker of an offloaded tool result or image), `window` (the rest:
what is forwarded verbatim since the last summary, or since the task); the billed tokens of the
images still forwarded are the part `images`, out of the item that carries them. (An Anthropic
request merges the summary into the task's user message: that message is split between them by
the length of their parts, `merged_summary`.)

The cost of a forwarded turn (`proxy.replay._metrics`: its common whole-item prefix with the
previous turn read from the cache, every other token written) splits into:

- `new`: the tokens of the items the turn adds to the history (the last n forwarded items, n the
  items the raw request grew by since the previous turn; all of the first turn), outside the
  cached prefix: content paid once at the write price;
- `read_<part>`: the cached prefix, by part, at the read price;
- `resend`: the other tokens outside the cached prefix: items already sent before, sent again
  uncached because an earlier item changed (a compression's summary, a tool result compacted, an
  image offloaded): the cache writes and misses a rewritten prefix causes;
- `summary_calls`: the summariser's requests, as `summary_call_cost` prices them.

They sum to `cache_cost` of the same turns. The raw history's cost splits into `new`
and `read` the same way; `floor` = raw `new` / raw cost: every new token paid once, at the price
of a token written (1.0 OpenAI, 1.25 Anthropic), everything else free.

What a summariser's latency must cost: the cheapest summary schedule, by dynamic programming.

A summary started on turn i covers the history up to that turn's kept tail (`tails[i]`) and can
be used from turn i + `lag` on (lag 1: it is ready for the next turn, as in a replay without a
summary delay). A turn forwards the head (system items, task), then either nothing else
summarised (the whole history) or one summary (`summary_tokens`) and every item after its cut.

The cost model is the replay's (`proxy.replay._metrics`), simplified: a turn that keeps the cut
of the turn before reads that turn's forwarded tokens from the cache and writes the rest; a turn
that changes its cut (a compression) reads the head and writes the summary and everything after
its cut; each summary a schedule uses costs one call, its prefix read from the cache
(`call_cost`). Every turn's verbatim window (after the cut, to the kept tail) must stay within
the trigger, as `proxy.core.compression.decide` keeps it, or with a `limit`, every forwarded turn
within it (the hard limit: while its summary is being made, the proxy lets a turn go out above
the trigger, `proxy.core.compression`). Summaries are never chained here
(each may cover any tail, whatever the one before): a relaxation, so `lower_bound` is a lower
bound for every online schedule with that latency and limit, the proxy's included with the hard
limit (`current_policy` replays the proxy's: `precompress.ahead` then `compression.decide`).

`per_compression` (a penalty added to each compression, not counted in the cost) trades cost for
fewer compressions: raising it finds the cheapest schedule with as few compressions as another
one, i.e. with the same prefix reuse.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from proxy.core import compression as cp
from proxy.core.tokens import IMAGE_PARTS, part_image_tokens
from proxy.core.view import ItemView

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[./][A-Za-z0-9_]+)+|[A-Za-z]+_[A-Za-z0-9_]+|\b\d{3,}\b")
CACHED_PRICE = 0.1  # a cached input token costs 10 % of an uncached one
SEPARATOR = "\0"  # between the texts of two items: no identifier spans it


def common_prefix(a: list[Any], b: list[Any]) -> int:
    """The number of leading whole items `a` and `b` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def prefix_reuse(forwarded: list[list[Any]], tokens: list[list[int]]) -> float:
    reused = total = 0
    for k in range(len(forwarded) - 1):
        reused += sum(tokens[k][: common_prefix(forwarded[k], forwarded[k + 1])])
        total += sum(tokens[k])
    return reused / total if total else 1.0


# ------------------------------------------------------------------------------------- recall


def _content_texts(content: Any) -> list[str]:
    """A content (or a tool output): a string, or the `text` of its parts (chat `text`,
    Responses `input_text` / `output_text`, Anthropic `text`), an Anthropic `tool_result`'s
    content and a `tool_use`'s name and input (as JSON)."""
    if isinstance(content, str):
        return [content]
    texts: list[str] = []
    for part in content if isinstance(content, list) else ():
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif part.get("type") == "tool_result":
            texts += _content_texts(part.get("content"))
        elif part.get("type") == "tool_use" and isinstance(part.get("name"), str):
            texts += [part["name"], json.dumps(part.get("input"), ensure_ascii=False)]
    return texts


def _call_texts(call: Any) -> list[str]:
    """A call's name and arguments: a chat tool call (`function` or `custom`) or a Responses
    `function_call` / `custom_tool_call` item."""
    if not isinstance(call, dict):
        return []
    inner = call.get("function") if isinstance(call.get("function"), dict) else call.get("custom")
    source = inner if isinstance(inner, dict) else call
    return [v for v in (source.get("name"), source.get("arguments"), source.get("input")) if isinstance(v, str)]


def item_text(item: Any) -> str:
    """All the text the model sees of one item: its content (string or parts), a tool result's
    output, and its tool calls' names and arguments (chat `tool_calls`, or a call item itself)."""
    if not isinstance(item, dict):
        return ""
    texts = _content_texts(item.get("content")) + _content_texts(item.get("output"))
    calls = item.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        texts += _call_texts(call)
    if item.get("type") in ("function_call", "custom_tool_call"):
        texts += _call_texts(item)
    return "\n".join(t for t in texts if t)


def items_text(items: Sequence[Any]) -> str:
    return SEPARATOR.join(item_text(item) for item in items)


def identifiers(text: str) -> set[str]:
    return set(IDENTIFIER.findall(text))


@dataclass
class Recall:
    kept: int = 0  # identifiers only an earlier tool result had shown (Σ over turns)
    found: int = 0  # of which the forwarded turn still carries

    @property
    def value(self) -> float:
        return self.found / self.kept if self.kept else 1.0

    def add(self, other: Recall) -> None:
        self.kept += other.kept
        self.found += other.found


def recall(
    history: list[Any], answers: list[tuple[int, int]], forwarded: list[list[Any]], *, is_tool: Callable[[Any], bool]
) -> list[Recall]:
    """Per turn: `answers[k] = (start, end)` are the items of assistant message k in `history`
    (the request of turn k is history[:start], ascending), `forwarded[k]` what turn k forwarded."""
    out = []
    tool_texts: list[str] = []
    other_texts: list[str] = []
    tool_blob = other_blob = ""
    seen = 0
    for (start, end), sent in zip(answers, forwarded):
        if start > seen:
            for item in history[seen:start]:
                (tool_texts if is_tool(item) else other_texts).append(item_text(item))
            tool_blob, other_blob = SEPARATOR.join(tool_texts), SEPARATOR.join(other_texts)
            seen = start
        written = identifiers(items_text(history[start:end]))
        kept = [x for x in written if x in tool_blob and x not in other_blob]
        text = items_text(sent) if kept else ""
        out.append(Recall(len(kept), sum(1 for x in kept if x in text)))
    return out


# --------------------------------------------------------------------------------- cache cost


@dataclass
class SummaryCall:
    """One request the summariser received: its history items, tools, and their tokens."""

    turn: int  # the replayed turn (0-based) whose pipeline made the call
    items: list[Any]
    tools: Any
    tokens: list[int]


@dataclass(frozen=True)
class Pricing:
    """What an input token costs, in units of the provider's base input price."""

    name: str
    read: float  # a token of the cached prefix (a cache read)
    write: float  # any other input token (written to the cache, where the provider bills writes)


OPENAI = Pricing("openai", CACHED_PRICE, 1.0)  # reads at 10 %, no write premium: the default
ANTHROPIC = Pricing("anthropic", CACHED_PRICE, 1.25)  # reads at 10 %, 5-minute cache writes at 1.25 ×
PRICINGS = {p.name: p for p in (OPENAI, ANTHROPIC)}
DEFAULT_PRICING = OPENAI.name


def cached_cost(items: list[Any], tokens: list[int], previous: list[Any] | None, *, pricing: Pricing = OPENAI) -> float:
    """`tokens` summed at `pricing.write`, the common whole-item prefix with `previous` at `pricing.read`."""
    shared = common_prefix(items, previous) if previous is not None else 0
    return pricing.write * sum(tokens) - (pricing.write - pricing.read) * sum(tokens[:shared])


def same_tools(a: Any, b: Any) -> bool:
    return (a or []) == (b or [])


def summary_call_cost(
    call: SummaryCall, turns: list[list[Any]], tools: list[Any] | None, *, pricing: Pricing = OPENAI
) -> float:
    """A summary call's input cost: cached against the previous forwarded turn when it carries its tools."""
    k = call.turn
    same = k > 0 and tools is not None and same_tools(call.tools, tools[k - 1])
    return cached_cost(call.items, call.tokens, turns[k - 1] if same else None, pricing=pricing)


def cache_cost(
    turns: list[list[Any]],
    tokens: list[list[int]],
    tools: list[Any] | None = None,
    *,
    summaries: Sequence[SummaryCall] = (),
    pricing: Pricing = OPENAI,
) -> float:
    """The input cost of `turns` (and of the summary calls they made) with a prompt cache: see
    the module's docstring. `tools[k]` are the tools turn k forwarded."""
    total = 0.0
    for k, (items, counts) in enumerate(zip(turns, tokens)):
        total += cached_cost(items, counts, turns[k - 1] if k else None, pricing=pricing)
    for call in summaries:
        total += summary_call_cost(call, turns, tools, pricing=pricing)
    return total


# ------------------------------------------------------------------------------------ latency


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest rank: the smallest value with at least p % of the values at or below it."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[max(math.ceil(p / 100 * len(ordered)), 1) - 1]


def latency(added_ms: Sequence[float], summary_delay_ms: float, turn_latency_ms: float) -> dict[str, Any]:
    """The added latency of the turns: p50, p99, max, and the turns stalled by a summary."""
    threshold = summary_delay_ms / 2
    return {
        "summary_delay_ms": summary_delay_ms,
        "turn_latency_ms": turn_latency_ms,
        "added_ms_p50": round(percentile(added_ms, 50), 2),
        "added_ms_p99": round(percentile(added_ms, 99), 2),
        "added_ms_max": round(max(added_ms, default=0.0), 2),
        "stall_threshold_ms": threshold,
        "stalled_turns": sum(1 for ms in added_ms if ms > threshold),
    }


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
        text = item_text(items[i])
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
    marked = [SUMMARY_MARK in item_text({"content": [p]}) for p in content]
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
    out["summary_calls"] = sum(summary_call_cost(c, turns, tools, pricing=pricing) for c in summaries)
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


NONE = -1  # the state of a turn that forwards no summary


@dataclass(frozen=True)
class Turn:
    tokens: list[int]  # each item the turn forwards before any summary (compacted), in order
    head: int  # items[:head]: system items and the task, never summarised
    tail: int  # items[tail:]: the kept tail; a summary started on this turn covers items[head:tail]
    trigger: int  # what the window after a cut may hold (`compression.trigger`)


@dataclass(frozen=True)
class Schedule:
    cost: float  # the turns and the summary calls, in tokens at the pricing
    compressions: int  # turns whose cut differs from the turn before's (the first summary's included)
    cuts: tuple[int, ...] = ()  # per turn: the turn whose summary it forwards, or NONE


def _sums(turns: list[Turn]) -> list[list[int]]:
    return [list(accumulate(t.tokens, initial=0)) for t in turns]


def call_cost(
    turns: list[Turn],
    i: int,
    *,
    summary_tokens: int,
    ratio: float,
    pricing: Pricing = OPENAI,
    sums: list[list[int]] | None = None,
) -> float:
    """A summary call started on turn i: its prefix (the head, a summary, a window of `ratio` x
    the trigger) read from the cache, what the turn added written."""
    sums = sums or _sums(turns)
    added = sums[i][-1] - (sums[i - 1][-1] if i else 0)
    head = sums[i][turns[i].head]
    return pricing.read * (head + summary_tokens + ratio * turns[i].trigger) + pricing.write * max(added, 0)


def _turn_cost(forwarded: float, previous: float | None, head: float, *, switched: bool, pricing: Pricing) -> float:
    if previous is None:
        return pricing.write * forwarded
    if switched:
        return pricing.read * head + pricing.write * (forwarded - head)
    return pricing.read * previous + pricing.write * max(forwarded - previous, 0)


def _check_lag(lag: int) -> None:
    if lag < 0:
        raise ValueError(f"lag must be 0 or more turns, not {lag}")


def lower_bound(
    turns: list[Turn],
    *,
    lag: int,
    summary_tokens: int,
    ratio: float = 0.8,
    per_compression: float = 0.0,
    limit: int | None = None,
    pricing: Pricing = OPENAI,
) -> Schedule:
    """The cheapest schedule whose summaries are used `lag` turns or more after they start (no
    turns: nothing to pay)."""
    _check_lag(lag)
    if not turns:
        return Schedule(0.0, 0)

    def fits(window: float, forwarded: float, trigger: int) -> bool:
        return window <= trigger if limit is None else forwarded <= limit

    sums = _sums(turns)
    inf = float("inf")
    # state (NONE or the turn whose tail is the cut) -> (cost with penalties, cost, compressions, forwarded, cuts)
    states: dict[int, tuple[float, float, int, float, tuple[int, ...]]] = {}
    for j, turn in enumerate(turns):
        sums_j, head = sums[j], sums[j][turn.head]
        best = sorted(states.items(), key=lambda kv: kv[1][0])[:2]
        new: dict[int, tuple[float, float, int, float, tuple[int, ...]]] = {}
        if fits(sums_j[turn.tail] - head, sums_j[-1], turn.trigger) and (j == 0 or NONE in states):
            forwarded = float(sums_j[-1])
            before = states.get(NONE)
            step = _turn_cost(forwarded, before[3] if before else None, head, switched=False, pricing=pricing)
            new[NONE] = (
                (before[0] if before else 0.0) + step,
                (before[1] if before else 0.0) + step,
                before[2] if before else 0,
                forwarded,
                (before[4] if before else ()) + (NONE,),
            )
        for i in range(0, j - lag + 1):
            cut = turns[i].tail
            if not turn.head <= cut <= turn.tail:
                continue
            forwarded = head + summary_tokens + sums_j[-1] - sums_j[cut]
            if not fits(sums_j[turn.tail] - sums_j[cut], forwarded, turn.trigger):
                continue
            options = []
            if i in states:
                kept = states[i]
                step = _turn_cost(forwarded, kept[3], head, switched=False, pricing=pricing)
                options.append((kept[0] + step, kept[1] + step, kept[2], forwarded, kept[4] + (i,)))
            switch = next((kv[1] for kv in best if kv[0] != i), None)
            if switch is not None:
                step = _turn_cost(forwarded, switch[3], head, switched=True, pricing=pricing) + call_cost(
                    turns, i, summary_tokens=summary_tokens, ratio=ratio, pricing=pricing, sums=sums
                )
                options.append(
                    (switch[0] + step + per_compression, switch[1] + step, switch[2] + 1, forwarded, switch[4] + (i,))
                )
            if options:
                new[i] = min(options, key=lambda o: o[0])
        states = new
        if not states:
            return Schedule(inf, 0)
    final = min(states.values(), key=lambda s: s[0])
    return Schedule(final[1], final[2], final[4])


def current_policy(
    turns: list[Turn], *, lag: int, summary_tokens: int, ratio: float = 0.8, pricing: Pricing = OPENAI
) -> Schedule:
    """The proxy's schedule: a summary starts (one at a time) once the window after the newest
    usable summary reaches `ratio` x the trigger, or crosses the trigger (then the turn goes out
    with the summary before); the newest usable summary is forwarded while its window stays
    within the trigger; before the first compression the history goes whole up to the trigger."""
    _check_lag(lag)
    sums = _sums(turns)
    ready: list[int] = []  # turns whose summary has landed
    flight: tuple[int, int] | None = None  # (the turn it is usable from, the turn it started on)
    cost, compressions = 0.0, 0
    cuts: list[int] = []
    previous: float | None = None
    for j, turn in enumerate(turns):
        sums_j, head = sums[j], sums[j][turn.head]
        if flight is not None and j >= flight[0]:
            ready.append(flight[1])
            flight = None
        usable = [i for i in ready if turn.head <= turns[i].tail <= turn.tail]
        prior = max(usable, key=lambda i: turns[i].tail, default=NONE)
        start_from = head if prior == NONE else sums_j[turns[prior].tail]
        window = sums_j[turn.tail] - start_from
        cut = NONE if sums_j[turn.tail] - head <= turn.trigger else prior
        start = window >= ratio * turn.trigger  # from the newest usable summary's cut (`precompress.ahead`)
        if start and flight is None and j not in ready:
            flight = (j + lag, j)
            cost += call_cost(turns, j, summary_tokens=summary_tokens, ratio=ratio, pricing=pricing, sums=sums)
        forwarded = float(sums_j[-1]) if cut == NONE else head + summary_tokens + sums_j[-1] - sums_j[turns[cut].tail]
        switched = bool(cuts) and cut != cuts[-1]
        cost += _turn_cost(forwarded, previous, head, switched=switched, pricing=pricing)
        compressions += switched
        cuts.append(cut)
        previous = forwarded
    return Schedule(cost, compressions, tuple(cuts))
