"""The report of a replay (report.json, the printed table, the charts, leave-one-framework-out) and
`--compare`'s simple strategies beside the proxy.

The report of a replay: report.json's figures (overall and per conversation), the printed
table and the PNG charts (matplotlib, when installed).

Leave-one-framework-out: figures of settings chosen on the other frameworks' traces.

Settings tuned on the traces they are measured on flatter themselves. Given the replayed
conversations of several settings, each tagged with the agent framework it came from, this
picks a setting on all frameworks but one (`choose`: the knee of the recall/cost frontier, see
there) and reports its figures on the framework left out. Two aggregates say how the choice
generalises: the mean over the frameworks left out, and the pooled figures (every conversation
replayed with the setting chosen without its framework, summed as `overall` sums). The mean
weighs a framework whose traces never reach the trigger (cost 1.0, recall 1.0) as much as one
whose traces are long; the pooled figures weigh each by its tokens.
Pure: it works on `overall`-shaped dicts (see `proxy.replay._report.overall`).

`replay --compare`: the replayed conversations also through the simple strategies people use
instead of the proxy (`proxy.replay._report`), measured with the replay's own definitions
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

import json
import logging
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.core.compression import units
from proxy.core.settings import OffloadSettings
from proxy.core.texts import MASKED_TOOL_RESULT
from proxy.core.tokens import TokenCounter, counter_for_encoding, counter_for_model
from proxy.core.view import ItemView
from proxy.replay import _metrics as metrics
from proxy.replay._runner import answers_of, message_tokens, requests_of

log = logging.getLogger("proxy.replay")

NAME_WIDTH = 36  # the table's conversation column
# matplotlib (and tqdm's progress bar) come with the `replay` extra, not with the server
CHARTS_NEED_THE_EXTRA = (
    "matplotlib is not installed: no charts (the replay extra: pip install "
    "'offload-proxy[replay]'; in a clone, .venv/bin/pip install -e '.[replay]')"
)
CHART_NAME_WIDTH = 28  # overall.png's bar labels


def progress_bar(total: int) -> Any:
    """A progress bar of `total` turns on stderr (tqdm, when installed and stderr is a terminal), else None."""
    try:
        from tqdm import tqdm

        return tqdm(total=total, unit="turn", file=sys.stderr, disable=None)
    except ImportError:
        return None


def overall(conversations: list[Any], pricing: str = metrics.DEFAULT_PRICING) -> dict[str, Any]:
    raw = sum(c.raw_tokens for c in conversations)
    fwd = sum(c.forwarded_tokens for c in conversations)
    turns = sum(c.turns for c in conversations)
    refs = sum(c.refs for c in conversations)
    weight = sum(c.raw_tokens for c in conversations) or 1
    kept, found = sum(c.recall_identifiers for c in conversations), sum(c.recall_found for c in conversations)
    cost, raw_cost = sum(c.cache_cost for c in conversations), sum(c.raw_cache_cost for c in conversations)
    timed = [c for c in conversations if c.latency is not None]
    measured = [c for c in conversations if getattr(c, "cost_breakdown", None)]
    breakdown = (
        metrics.summed([c.cost_breakdown for c in measured], [c.forwarded_by_part for c in measured])
        if measured
        else None
    )
    return {
        "conversations": len(conversations),
        "turns": turns,
        "raw_tokens": raw,
        "forwarded_tokens": fwd,
        "forwarded_ratio": fwd / raw if raw else 1.0,
        "prefix_reuse": sum(c.prefix_reuse * c.raw_tokens for c in conversations) / weight,
        "max_forwarded_turn": max((c.max_forwarded_turn for c in conversations), default=0),
        "turns_over_budget": sum(c.turns_over_budget for c in conversations),
        "summaries": sum(c.summaries for c in conversations),
        "refs": refs,
        "reload_exact_fraction": (sum(c.reload_exact_fraction * c.refs for c in conversations) / refs) if refs else 1.0,
        "ms_per_turn_cold": sum(c.ms_per_turn_cold * c.turns for c in conversations) / max(turns, 1),
        "ms_per_turn_steady": sum(c.ms_per_turn_steady * c.turns for c in conversations) / max(turns, 1),
        "recall": found / kept if kept else 1.0,
        "recall_identifiers": kept,
        "recall_found": found,
        "cache_cost_ratio": cost / raw_cost if raw_cost else 1.0,
        "cache_cost": cost,
        "raw_cache_cost": raw_cost,
        "pricing": pricing,
        "floor": breakdown[pricing]["floor"] if breakdown else None,
        "cost_breakdown": breakdown,
        "summary_calls": sum(c.summary_calls for c in conversations),
        "summary_input_tokens": sum(c.summary_input_tokens for c in conversations),
        "latency": metrics.latency(
            [ms for c in timed for ms in c.added_ms_per_turn or []],
            timed[0].latency["summary_delay_ms"],
            timed[0].latency["turn_latency_ms"],
        )
        if timed
        else None,
    }


def report_dict(
    conversations: list[Any],
    settings: OffloadSettings,
    token_counting: dict[str, Any] | None = None,
    *,
    format: str = "chat",
    pricing: str = metrics.DEFAULT_PRICING,
) -> dict[str, Any]:
    per = []
    for c in conversations:
        entry = dict(c.__dict__)
        priced = c.cost_breakdown.get(pricing)
        entry["floor"] = priced["raw_parts"]["new"] / priced["raw_cost"] if priced and priced["raw_cost"] else None
        per.append(entry)
    report = {
        "format": format,
        "pricing": pricing,
        "settings": settings.model_dump(),
        "overall": overall(conversations, pricing),
        "conversations": per,
    }
    if token_counting is not None:
        report["token_counting"] = token_counting
    return report


def estimate_warning(token_counting: dict[str, Any]) -> str | None:
    """The line printed to stderr when the report's tokens are estimates, else None."""
    if token_counting.get("method") != "estimate":
        return None
    failed = [e for e in token_counting["encodings"] if e["method"] == "estimate"]
    names = ", ".join(e["encoding"] for e in failed)
    reason = "; ".join(f"{e['encoding']}: {str(e['error'])[:160]}" for e in failed)
    where = failed[0]["cache_dir"] or "unset"
    return (
        f"offload-proxy replay: WARNING: token counts are ESTIMATES (about 4 bytes per token), not {names} "
        f"tokens: tiktoken could not load the encoding ({reason}). Point TIKTOKEN_CACHE_DIR at a folder "
        f"holding the tiktoken files (TIKTOKEN_CACHE_DIR={where})."
    )


def write_outputs(report: dict[str, Any], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2))
    return [out / "report.json", *write_charts(report, out)]


def shorten(name: str, width: int) -> str:
    """`name` in at most `width` characters: a long one keeps its head and its tail, where the ids
    of one run usually differ (…django__django-11099 vs …django__django-12708)."""
    if len(name) <= width:
        return name
    tail = (width - 1) // 2
    return name[: width - 1 - tail] + "…" + name[len(name) - tail :]


def unique_labels(names: list[str], width: int) -> list[str]:
    """One label per name, at most `width` characters, all different: shortened names that still
    collide (or equal names) get their 1-based position appended (`#3`)."""
    labels = [shorten(n, width) for n in names]
    counts = {label: labels.count(label) for label in labels}
    for i, label in enumerate(labels):
        if counts[label] > 1:
            suffix = f" #{i + 1}"
            labels[i] = shorten(names[i], width - len(suffix)) + suffix
    return labels


def table(report: dict[str, Any]) -> str:
    timed = report["overall"].get("latency") is not None
    header = (
        f"{'conversation':{NAME_WIDTH}} {'turns':>5} {'raw':>10} {'forwarded':>10} {'ratio':>6} {'prefix':>6} "
        f"{'cache':>6} {'floor':>6} {'recall':>6} {'max turn':>8} {'sum.':>4} {'refs':>5} {'exact':>5} {'ms cold':>7} "
        f"{'ms st.':>6}" + (f" {'p99 ms':>8} {'stall':>5}" if timed else "")
    )
    rows = [header, "-" * len(header)]

    def row(name: str, r: dict[str, Any]) -> str:
        ratio = r["forwarded_tokens"] / r["raw_tokens"] if r["raw_tokens"] else 1.0
        line = (
            f"{name:{NAME_WIDTH}} {r['turns']:>5} {r['raw_tokens']:>10} {r['forwarded_tokens']:>10} {ratio:>6.3f} "
            f"{r['prefix_reuse']:>6.3f} {r.get('cache_cost_ratio', 1.0):>6.3f} {_figure(r.get('floor'))} "
            f"{r.get('recall', 1.0):>6.3f} "
            f"{r['max_forwarded_turn']:>8} {r['summaries']:>4} {r['refs']:>5} "
            f"{r['reload_exact_fraction']:>5.2f} {r['ms_per_turn_cold']:>7.2f} {r['ms_per_turn_steady']:>6.2f}"
        )
        if timed:
            lat = r.get("latency") or {}
            line += f" {lat.get('added_ms_p99', 0):>8.1f} {lat.get('stalled_turns', 0):>5}"
        return line

    names = unique_labels([c["id"] for c in report["conversations"]], NAME_WIDTH)
    rows += [row(name, c) for name, c in zip(names, report["conversations"])]
    rows += ["-" * len(header), row("OVERALL", report["overall"])]
    o = report["overall"]
    rows.append(f"turns above max_total_tokens + system + tools + summary + tail: {o['turns_over_budget']}")
    if "recall" in o:
        pricing = metrics.PRICINGS[o.get("pricing", metrics.DEFAULT_PRICING)]
        rows.append(
            f"cache = cache_cost_ratio at {pricing.name} pricing (cache reads at {pricing.read:.0%}, other input "
            f"at {pricing.write:g} ×): forwarded turns and {o['summary_calls']} summary calls over the raw "
            f"history; floor = every new token paid once, the rest free; recall = {o['recall_found']} of "
            f"{o['recall_identifiers']} identifiers the model took from earlier tool results still forwarded"
        )
    if o.get("cost_breakdown"):
        rows += ["", breakdown_table(o["cost_breakdown"])]
    if timed:
        lat = o["latency"]
        rows.append(
            f"added latency per turn (prepare's wall time, before the request goes upstream): "
            f"p50 {lat['added_ms_p50']:.1f} ms, p99 {lat['added_ms_p99']:.1f} ms, max {lat['added_ms_max']:.1f} ms; "
            f"stalled turns (added latency > half the summary delay, {lat['stall_threshold_ms']:g} ms): "
            f"{lat['stalled_turns']} of {o['turns']} (summary delay {lat['summary_delay_ms']:g} ms, "
            f"turn latency {lat['turn_latency_ms']:g} ms)"
        )
    if report.get("format") == "responses":
        rows.append("format: responses (each chat trace replayed as Responses API input items)")
    elif report.get("format") == "anthropic":
        rows.append("format: anthropic (each chat trace replayed as an Anthropic Messages request)")
    if report.get("summaries_made") == "inline":
        rows.append("summaries: inline (made by the turn that needs one, none ahead of time)")
    counting = report.get("token_counting")
    if counting:
        encodings = ", ".join(e["encoding"] for e in counting["encodings"])
        rows.append(
            f"tokens: {encodings} via tiktoken"
            if counting["method"] == "tiktoken"
            else f"tokens: ESTIMATES (about 4 bytes per token; tiktoken could not load {encodings})"
        )
    return "\n".join(rows)


def _figure(value: float | None) -> str:
    return f"{value:>6.3f}" if value is not None else f"{'-':>6}"


COST_LABELS = {
    "new": "new content (paid once)",
    **{f"read_{p}": f"cache reads: {p}" for p in metrics.PARTS},
    "resend": "re-sends after a compression",
    "summary_calls": "summary calls",
}


def breakdown_table(breakdown: dict[str, Any]) -> str:
    """Where the cost goes, as shares of the raw history's cost, at each pricing; the floor; the
    forwarded tokens by part."""
    names = list(metrics.PRICINGS)
    title = "cost breakdown (share of the raw cost)"
    width = max(len(title), *(len(label) + 2 for label in COST_LABELS.values()))
    rows = [f"{title:{width}}" + "".join(f" {n:>10}" for n in names)]
    for part, label in COST_LABELS.items():
        rows.append(f"  {label:{width - 2}}" + "".join(f" {breakdown[n]['ratios'][part]:>10.3f}" for n in names))
    rows.append(
        f"  {'total (cache)':{width - 2}}" + "".join(f" {breakdown[n]['cache_cost_ratio']:>10.3f}" for n in names)
    )
    rows.append(f"  {'floor':{width - 2}}" + "".join(f" {breakdown[n]['floor']:>10.3f}" for n in names))
    shares = breakdown["forwarded_shares"]
    rows.append("forwarded tokens by part: " + ", ".join(f"{p} {shares[p]:.1%}" for p in metrics.PARTS))
    return "\n".join(rows)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:80]


def chart_names(ids: list[str]) -> list[str]:
    """One PNG file name per conversation, all different (and never overall.png nor cost.png)."""
    taken, names = {"overall", "cost"}, []
    for i, conversation_id in enumerate(ids):
        slug = _slug(conversation_id) or "conversation"
        if slug in taken:
            slug = f"{slug[:74]}-{i + 1}"
        taken.add(slug)
        names.append(f"{slug}.png")
    return names


def _thousands(value: float, _position: int) -> str:
    if abs(value) >= 1e6:
        return f"{value / 1e6:g}M"
    return f"{value / 1e3:g}k" if value else "0"


def counted_as(report: dict[str, Any]) -> str:
    """What the report's tokens are, for a chart's axis: the encoding, or that they are estimates."""
    counting = report.get("token_counting") or {}
    if counting.get("method") == "estimate":
        return "estimated, ~4 bytes each"
    return ", ".join(e["encoding"] for e in counting.get("encodings", [])[:1]) or "o200k_base"


def conversation_chart(
    plt: Any,
    c: dict[str, Any],
    max_total_tokens: int | None,
    *,
    path: Path,
    unit: str = "message",
    counted: str = "o200k_base",
) -> Path:
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    fig, ax = plt.subplots(figsize=(8, 4))
    turns = range(1, len(c["raw_per_turn"]) + 1)
    ax.plot(turns, c["forwarded_per_turn"], label="forwarded", color="tab:orange", linewidth=2.2, zorder=2)
    # raw dashed on top: still visible where nothing is offloaded (forwarded == raw)
    ax.plot(turns, c["raw_per_turn"], label="raw", color="tab:blue", linestyle="--", linewidth=1.4, zorder=3)
    if max_total_tokens:
        ax.axhline(
            max_total_tokens,
            color="grey",
            linestyle=":",
            linewidth=1.2,
            zorder=1,
            label=f"max_total_tokens ({max_total_tokens:,})",
        )
    ratio = c["forwarded_tokens"] / c["raw_tokens"] if c["raw_tokens"] else 1.0
    ax.set(
        title=f"{shorten(c['id'], 70)}\nforwarded/raw {ratio:.3f}, {c['summaries']} summaries, {c['refs']} refs",
        xlabel="turn",
        ylabel=f"tokens ({counted}, {unit} JSON)",
    )
    ax.title.set_fontsize(10)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_formatter(FuncFormatter(_thousands))
    top = max([*c["raw_per_turn"], *c["forwarded_per_turn"], max_total_tokens or 0, 1])
    ax.set_ylim(0, top * 1.12)  # headroom: the legend never sits on the max_total_tokens line
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def write_charts(report: dict[str, Any], out: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        log.warning(CHARTS_NEED_THE_EXTRA)
        return []
    conversations = report["conversations"]
    max_total_tokens = report.get("settings", {}).get("max_total_tokens")
    unit = "item" if report.get("format") in ("responses", "anthropic") else "message"
    counted = counted_as(report)
    written = [
        conversation_chart(plt, c, max_total_tokens, path=out / name, unit=unit, counted=counted)
        for c, name in zip(conversations, chart_names([c["id"] for c in conversations]))
    ]
    fig, ax = plt.subplots(figsize=(10, 5))
    names = unique_labels([c["id"] for c in conversations], CHART_NAME_WIDTH)
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], [c["raw_tokens"] for c in conversations], width=0.4, label="raw")
    ax.bar([x + 0.2 for x in xs], [c["forwarded_tokens"] for c in conversations], width=0.4, label="forwarded")
    ax.set_xticks(list(xs), names, rotation=50, ha="right", rotation_mode="anchor", fontsize=8)
    ax.yaxis.set_major_formatter(FuncFormatter(_thousands))
    o = report["overall"]
    ax.set(
        title=f"tokens summed over turns: forwarded/raw {o['forwarded_ratio']:.3f}, "
        f"prefix reuse {o['prefix_reuse']:.3f}",
        ylabel=f"tokens ({counted})",
    )
    ax.legend()
    fig.tight_layout()
    path = out / "overall.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    breakdown = o.get("cost_breakdown")
    return [*written, path, *([cost_chart(plt, breakdown, out / "cost.png")] if breakdown else [])]


def cost_chart(plt: Any, breakdown: dict[str, Any], path: Path) -> Path:
    """cost.png: per pricing, the raw history's cost (new, reads) and the proxy's by part,
    stacked, as shares of the raw cost, with the floor."""
    fig, ax = plt.subplots(figsize=(9, 5))
    names = list(metrics.PRICINGS)
    colors = plt.get_cmap("tab10").colors
    for i, name in enumerate(names):
        b = breakdown[name]
        raw = b["raw_parts"]
        bottom = 0.0
        for j, (part, value) in enumerate((("new", raw["new"]), ("read", raw["read"]))):
            share = value / b["raw_cost"] if b["raw_cost"] else 0.0
            ax.bar(
                2 * i,
                share,
                bottom=bottom,
                width=0.8,
                color=colors[j],
                alpha=0.45,
                label=f"raw: {'new content' if part == 'new' else 'cache reads'}" if i == 0 else None,
            )
            bottom += share
        bottom = 0.0
        for j, part in enumerate(metrics.COST_PARTS):
            share = b["ratios"][part]
            ax.bar(
                2 * i + 0.9,
                share,
                bottom=bottom,
                width=0.8,
                color=colors[j % len(colors)],
                label=COST_LABELS[part] if i == 0 else None,
            )
            bottom += share
        ax.hlines(
            b["floor"],
            2 * i - 0.45,
            2 * i + 1.35,
            colors="black",
            linestyles="--",
            label="floor: new tokens once, the rest free" if i == 0 else None,
        )
        ax.text(2 * i + 0.9, bottom + 0.01, f"{b['cache_cost_ratio']:.3f}", ha="center", fontsize=8)
    ax.set_xticks(
        [x for i in range(len(names)) for x in (2 * i, 2 * i + 0.9)],
        [f"{label}\n{n}" for n in names for label in ("raw", "proxy")],
        fontsize=8,
    )
    ax.set(title="cache-weighted input cost, share of the raw history's", ylabel="share of the raw cost", ylim=(0, 1.1))
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


PREFIX_BUDGET = 0.94  # prefix reuse a chosen setting must keep on the frameworks it is chosen on
COST_WEIGHT = 0.5  # the knee: a setting must buy at least this much recall per unit of cache_cost_ratio
FIGURES = ("recall", "cache_cost_ratio", "prefix_reuse", "forwarded_ratio")

Overall = Callable[[list[Any]], dict[str, Any]]


def framework_of(conversation: dict[str, Any]) -> str:
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


def compare_table(rows: dict[str, dict[str, Any]]) -> str:
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
