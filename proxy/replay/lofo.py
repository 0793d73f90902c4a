"""Leave-one-framework-out: figures of settings chosen on the other frameworks' traces.

Settings tuned on the traces they are measured on flatter themselves. Given the replayed
conversations of several settings, each tagged with the agent framework it came from, this
picks a setting on all frameworks but one (`choose`: the highest recall within a cost and
prefix-reuse budget, else the cheapest) and reports its figures on the framework left out; the
mean over the frameworks left out is the figure that says how the choice generalises.
Pure: it works on `overall`-shaped dicts (see `proxy.replay.report.overall`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

COST_BUDGET = 0.48  # cache_cost_ratio a chosen setting may reach on the frameworks it is chosen on
PREFIX_BUDGET = 0.95  # prefix reuse it must keep there
FIGURES = ("recall", "cache_cost_ratio", "prefix_reuse", "forwarded_ratio")

Overall = Callable[[list[Any]], dict[str, Any]]


def framework_of(conversation: dict) -> str:
    """The framework a trace names (`framework`, else `meta.framework`), else "unknown"."""
    meta = conversation.get("meta") if isinstance(conversation.get("meta"), dict) else {}
    name = conversation.get("framework") or meta.get("framework")
    return name if isinstance(name, str) and name else "unknown"


def choose(rows: Sequence[dict[str, Any]], *, cost_budget: float = COST_BUDGET,
           prefix_budget: float = PREFIX_BUDGET) -> int:
    """The index of the setting to pick from `rows` (figures measured on the training traces):
    the highest recall among those within both budgets, ties to the cheaper and then the
    earlier; when none is within them, the cheapest."""
    within = [i for i, r in enumerate(rows)
              if r["cache_cost_ratio"] <= cost_budget and r["prefix_reuse"] >= prefix_budget]
    if within:
        return min(within, key=lambda i: (-rows[i]["recall"], rows[i]["cache_cost_ratio"], i))
    return min(range(len(rows)), key=lambda i: (rows[i]["cache_cost_ratio"], i))


@dataclass(frozen=True)
class HeldOut:
    framework: str
    chosen: int  # the index of the setting chosen on the other frameworks
    figures: dict[str, Any]  # that setting's figures on this framework


def by_framework(results: Sequence[Any], frameworks: Sequence[str], overall: Overall) -> dict[str, dict[str, Any]]:
    """The figures of one setting's replayed conversations, per framework (sorted by name)."""
    return {name: overall([r for r, f in zip(results, frameworks) if f == name]) for name in sorted(set(frameworks))}


def leave_one_out(per_setting: Sequence[Sequence[Any]], frameworks: Sequence[str], overall: Overall, *,
                  candidates: Sequence[int] | None = None,
                  pick: Callable[[Sequence[dict[str, Any]]], int] = choose) -> list[HeldOut]:
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
        out.append(HeldOut(name, chosen, overall(test)))
    return out


def mean(figures: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The unweighted mean of each of FIGURES over `figures` (one per framework)."""
    return {k: sum(f[k] for f in figures) / len(figures) for k in FIGURES} if figures else {}
