"""`replay --compare`: the replayed conversations also through the simple strategies people use
instead of the proxy (`proxy.replay._compare`), measured with the replay's own definitions
(`proxy.replay._metrics`): forwarded / raw tokens, prefix reuse, cache-weighted cost, recall.

Each strategy sees each turn's raw request (the same items the proxy's pipeline receives) and
its output is what would be forwarded; they make no summary calls. The proxy's figures are those
of the replay itself (`report["overall"]`), so the table compares like with like.

The simple context strategies `replay --compare` measures beside the proxy, as pure functions
of one turn's request (its history items, in any wire format, read through the format's view).

- observation masking: every tool result but the last `keep` has its output replaced by a
  placeholder (`MASKED_TOOL_RESULT`), everything else sent as is. M = 10, as in "The Complexity
  Trap" (Lindenbauer et al., 2025), whose masking kept SWE-agent's last 10 observations.
- middle-out truncation: whole items dropped from the middle of the history until it fits a token
  budget (the leading system items and the task, i.e. up to the first user item, and the last
  unit always stay); a call is dropped with its results (`proxy.core.compression.units`: the
  runs of items no cut may split), so no result is left without its call.

Neither keeps anything retrievable: what is masked or dropped is gone for the model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proxy.core.compression import units
from proxy.core.texts import MASKED_TOOL_RESULT
from proxy.core.tokens import TokenCounter, counter_for_encoding, counter_for_model
from proxy.core.view import ItemView
from proxy.replay import _metrics as metrics
from proxy.replay._runner import answers_of, message_tokens, requests_of

MASK_KEEP = 10


def observation_masking(items: list[Any], view: ItemView, keep: int = MASK_KEEP) -> list[Any]:
    """`items` with the output of every tool result but the last `keep` replaced by the placeholder."""
    results = [i for i, item in enumerate(items) if view.role(item) == "tool" and view.tool_text(item) is not None]
    masked = set(results[: max(len(results) - keep, 0)])
    return [view.with_tool_text(item, MASKED_TOOL_RESULT) if i in masked else item for i, item in enumerate(items)]


def task_end(items: list[Any], view: ItemView) -> int:
    """The end of what middle-out always keeps at the start: the system items and the first user item."""
    for i, item in enumerate(items):
        if view.role(item) == "user":
            return i + 1
    return 0


def middle_out(
    items: list[Any], view: ItemView, budget: int, *, counter: TokenCounter, tokens: Callable[[Any], int] | None = None
) -> list[Any]:
    """`items` without whole units from the middle, removed one at a time (the middle one of those
    left) until the tokens (`tokens(item)`, else `counter.message`) are within `budget` or only the
    start and the last unit are left."""
    count = tokens or counter.message
    head = task_end(items, view)
    parts = units(items, view, head, end=len(items), counter=counter)
    bounds = [(first, parts[k + 1][0] if k + 1 < len(parts) else len(items)) for k, (first, _) in enumerate(parts)]
    sizes = [sum(count(items[i]) for i in range(a, b)) for a, b in bounds]
    total = sum(count(item) for item in items[:head]) + sum(sizes)
    removable = list(range(len(bounds) - 1))  # the last unit (the newest turn's input) always stays
    dropped: set[int] = set()
    while total > budget and removable:
        unit = removable.pop(len(removable) // 2)
        dropped.add(unit)
        total -= sizes[unit]
    kept = list(items[:head])
    for k, (a, b) in enumerate(bounds):
        if k not in dropped:
            kept += items[a:b]
    return kept


Strategy = Callable[[list[Any]], list[Any]]


@dataclass
class Figures:
    raw_tokens: int = 0
    forwarded_tokens: int = 0
    prefix_reused: float = 0.0  # Σ tokens of forwarded turn k reused as a prefix by turn k+1
    prefix_total: float = 0.0  # Σ tokens of forwarded turn k (k < last)
    cost: float = 0.0
    raw_cost: float = 0.0
    recall: metrics.Recall | None = None

    def add(self, other: Figures) -> None:
        self.raw_tokens += other.raw_tokens
        self.forwarded_tokens += other.forwarded_tokens
        self.prefix_reused += other.prefix_reused
        self.prefix_total += other.prefix_total
        self.cost += other.cost
        self.raw_cost += other.raw_cost
        if other.recall is not None:
            self.recall = self.recall or metrics.Recall()
            self.recall.add(other.recall)

    def row(self) -> dict[str, Any]:
        recall = self.recall or metrics.Recall()
        return {
            "forwarded_ratio": self.forwarded_tokens / self.raw_tokens if self.raw_tokens else 1.0,
            "prefix_reuse": self.prefix_reused / self.prefix_total if self.prefix_total else 1.0,
            "cache_cost_ratio": self.cost / self.raw_cost if self.raw_cost else 1.0,
            "recall": recall.value,
            "recall_found": recall.found,
            "recall_identifiers": recall.kept,
            "raw_tokens": self.raw_tokens,
            "forwarded_tokens": self.forwarded_tokens,
        }


class Tokens:
    """o200k_base tokens of an item's JSON (as the replay counts them), remembered per history item."""

    def __init__(self, history: list[Any], counts: list[int], counter: TokenCounter) -> None:
        self.known = {id(item): n for item, n in zip(history, counts)}
        self.history, self.counter = history, counter  # the history is kept alive: its ids stay valid

    def __call__(self, item: Any) -> int:
        found = self.known.get(id(item))
        return found if found is not None else message_tokens([item], self.counter)[0]


def measure(
    history: list[Any],
    answers: list[tuple[int, int]],
    requests: list[list[Any]],
    *,
    strategy: Strategy,
    tokens: Tokens,
    is_tool: Callable[[Any], bool],
    pricing: metrics.Pricing = metrics.OPENAI,
) -> Figures:
    """One conversation through `strategy`: its figures, defined as the replay's."""
    forwarded = [strategy(request) for request in requests]
    counts = [[tokens(item) for item in turn] for turn in forwarded]
    raw_counts = [[tokens(item) for item in request] for request in requests]
    figures = Figures(raw_tokens=sum(map(sum, raw_counts)), forwarded_tokens=sum(map(sum, counts)))
    for k in range(len(forwarded) - 1):
        figures.prefix_reused += sum(counts[k][: metrics.common_prefix(forwarded[k], forwarded[k + 1])])
        figures.prefix_total += sum(counts[k])
    figures.cost = metrics.cache_cost(forwarded, counts, pricing=pricing)
    figures.raw_cost = metrics.cache_cost(requests, raw_counts, pricing=pricing)
    figures.recall = metrics.Recall()
    for turn in metrics.recall(history, answers, forwarded, is_tool=is_tool):
        figures.recall.add(turn)
    return figures


def strategies(view: ItemView, *, budget: int, model: str, keep: int = MASK_KEEP) -> dict[str, Strategy]:
    counter = counter_for_model(model)
    return {
        "raw history": lambda items: items,
        f"observation masking (last {keep})": lambda items: observation_masking(items, view, keep),
        f"middle-out ({budget} tokens)": lambda items: middle_out(items, view, budget, counter=counter),
    }


def compare(
    conversations: list[dict[str, Any]],
    *,
    format: str,
    view: ItemView,
    budget: int,
    model: str,
    keep: int = MASK_KEEP,
    pricing: metrics.Pricing = metrics.OPENAI,
) -> dict[str, dict[str, Any]]:
    """Each strategy's figures over all `conversations` (ratios of sums, as the replay's overall),
    the cache cost at `pricing`."""
    json_counter = counter_for_encoding("o200k_base")
    chosen = strategies(view, budget=budget, model=model, keep=keep)
    totals = {name: Figures() for name in chosen}
    for conv in conversations:
        history, answers = answers_of(conv, format)
        requests, _ = requests_of(conv, format)
        tokens = Tokens(history, message_tokens(history, json_counter), json_counter)
        for name, strategy in chosen.items():
            totals[name].add(
                measure(
                    history,
                    answers,
                    requests,
                    strategy=strategy,
                    tokens=tokens,
                    is_tool=lambda item: view.role(item) == "tool",
                    pricing=pricing,
                )
            )
    return {name: figures.row() for name, figures in totals.items()}


def with_proxy(rows: dict[str, dict[str, Any]], overall: dict[str, Any], label: str) -> dict[str, dict[str, Any]]:
    """`rows` with the replay's own figures (`report["overall"]`) as the second row, after the raw history."""
    proxy = {
        name: overall[name]
        for name in (
            "forwarded_ratio",
            "prefix_reuse",
            "cache_cost_ratio",
            "recall",
            "recall_found",
            "recall_identifiers",
            "raw_tokens",
            "forwarded_tokens",
        )
    }
    names = list(rows)
    return {names[0]: rows[names[0]], label: proxy, **{name: rows[name] for name in names[1:]}}


def table(rows: dict[str, dict[str, Any]]) -> str:
    """The strategies side by side: one row each."""
    header = f"{'strategy':36} {'forwarded/raw':>13} {'prefix reuse':>12} {'cache cost':>10} {'recall':>6}  found"
    lines = [header, "-" * len(header)]
    for name, r in rows.items():
        lines.append(
            f"{name:36} {r['forwarded_ratio']:>13.3f} {r['prefix_reuse']:>12.3f} "
            f"{r['cache_cost_ratio']:>10.3f} {r['recall']:>6.3f}  {r['recall_found']} of "
            f"{r['recall_identifiers']}"
        )
    lines.append(
        "cache cost: input cost with cached prefixes at 10 %, over the raw history's (the proxy's "
        "includes its summary calls); recall: identifiers the model took from earlier tool results "
        "that the turn still carries (proxy/replay/_metrics.py)"
    )
    return "\n".join(lines)
