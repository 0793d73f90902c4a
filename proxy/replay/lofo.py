"""Leave-one-framework-out: figures of settings chosen on the other frameworks' traces.

Settings tuned on the traces they are measured on flatter themselves. Given the replayed
conversations of several settings, each tagged with the agent framework it came from, this
picks a setting on all frameworks but one (`choose`: the knee of the recall/cost frontier, see
there) and reports its figures on the framework left out. Two aggregates say how the choice
generalises: the mean over the frameworks left out, and the pooled figures (every conversation
replayed with the setting chosen without its framework, summed as `overall` sums). The mean
weighs a framework whose traces never reach the trigger (cost 1.0, recall 1.0) as much as one
whose traces are long; the pooled figures weigh each by its tokens.
Pure: it works on `overall`-shaped dicts (see `proxy.replay.report.overall`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

PREFIX_BUDGET = 0.94  # prefix reuse a chosen setting must keep on the frameworks it is chosen on
COST_WEIGHT = 0.5  # the knee: a setting must buy at least this much recall per unit of cache_cost_ratio
FIGURES = ("recall", "cache_cost_ratio", "prefix_reuse", "forwarded_ratio")

Overall = Callable[[list[Any]], dict[str, Any]]


def framework_of(conversation: dict) -> str:
    """The framework a trace names (`framework`, else `meta.framework`), else "unknown"."""
    meta = conversation.get("meta")
    name = conversation.get("framework") or (meta.get("framework") if isinstance(meta, dict) else None)
    return name if isinstance(name, str) and name else "unknown"


def choose(
    rows: Sequence[dict[str, Any]], *, cost_weight: float = COST_WEIGHT, prefix_budget: float = PREFIX_BUDGET
) -> int:
    """The index of the setting to pick from `rows` (figures measured on the training traces):
    the knee of the recall/cost frontier, i.e. the highest recall − cost_weight ×
    cache_cost_ratio (going further right must buy at least `cost_weight` of recall per unit of
    cost), among those keeping prefix reuse ≥ `prefix_budget` (all of them when none does);
    ties to the cheaper, then the earlier. `cost_weight` 0: the highest recall."""
    within = [i for i, r in enumerate(rows) if r["prefix_reuse"] >= prefix_budget] or list(range(len(rows)))
    return min(
        within,
        key=lambda i: (
            -(rows[i]["recall"] - cost_weight * rows[i]["cache_cost_ratio"]),
            rows[i]["cache_cost_ratio"],
            i,
        ),
    )


@dataclass(frozen=True)
class HeldOut:
    framework: str
    chosen: int  # the index of the setting chosen on the other frameworks
    figures: dict[str, Any]  # that setting's figures on this framework
    conversations: tuple[Any, ...] = ()  # this framework's conversations replayed with that setting


def by_framework(results: Sequence[Any], frameworks: Sequence[str], overall: Overall) -> dict[str, dict[str, Any]]:
    """The figures of one setting's replayed conversations, per framework (sorted by name)."""
    return {name: overall([r for r, f in zip(results, frameworks) if f == name]) for name in sorted(set(frameworks))}


def leave_one_out(
    per_setting: Sequence[Sequence[Any]],
    frameworks: Sequence[str],
    overall: Overall,
    *,
    candidates: Sequence[int] | None = None,
    pick: Callable[[Sequence[dict[str, Any]]], int] = choose,
) -> list[HeldOut]:
    """For each framework: the setting `pick` chooses (among `candidates`, all by default) on the
    conversations of the other frameworks, measured on this framework's. `per_setting[s][c]`
    is conversation c replayed with setting s; `frameworks[c]` its framework. Empty with fewer
    than two frameworks (nothing to leave out)."""
    names = sorted(set(frameworks))
    if len(names) < 2:
        return []
    indices = list(range(len(per_setting))) if candidates is None else list(candidates)
    out = []
    for name in names:
        train = [[r for r, f in zip(per_setting[s], frameworks) if f != name] for s in indices]
        chosen = indices[pick([overall(part) for part in train])]
        test = [r for r, f in zip(per_setting[chosen], frameworks) if f == name]
        out.append(HeldOut(name, chosen, overall(test), tuple(test)))
    return out


def pooled(held: Sequence[HeldOut], overall: Overall) -> dict[str, Any]:
    """The figures of every held-out conversation together (each replayed with the setting chosen
    without its framework), summed as `overall` sums."""
    return overall([c for h in held for c in h.conversations]) if held else {}


def mean(figures: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The unweighted mean of each of FIGURES over `figures` (one per framework)."""
    return {k: sum(f[k] for f in figures) / len(figures) for k in FIGURES} if figures else {}
