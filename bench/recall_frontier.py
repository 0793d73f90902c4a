"""Recall against forwarded/raw tokens for a few offload settings, on real agent traces.

    .venv/bin/python bench/recall_frontier.py [--traces ../shared/traces/traces.jsonl] [--out bench-out]
                                              [--format chat|responses] [--first N]

Replays every conversation once per setting exactly as `python -m proxy replay` does (the real
pipeline, a fresh temporary store, the built-in deterministic summariser), prints one row per
setting (forwarded/raw, prefix reuse, cache_cost_ratio, recall, summaries) and writes
DIR/recall_frontier.png (recall against forwarded/raw, one point per setting, the default
marked) and DIR/recall_frontier.json. The figures are those of replay's report.json
(`overall`): see proxy/replay/_metrics.py for their definitions. About 10 s per setting on the
20 shared traces; `--first N` replays only the first N settings (the first two are the defaults).

Then, when the traces name two frameworks or more (`framework`), the defaults' figures per
framework and the leave-one-framework-out figures (`proxy.replay._report`): for each framework, the
setting chosen on the others' traces (auto: the knee, the highest recall − ½ × cache_cost_ratio
with prefix reuse ≥ 0.94; compaction only: the compact setting of highest recall) measured on
its own, the mean over the frameworks left out and the pooled figures (all conversations, each
with the setting chosen without its framework).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path

from common import SHARED

from proxy.core import summary_index
from proxy.core.settings import OffloadSettings
from proxy.replay import _report as lofo
from proxy.replay._report import overall
from proxy.replay._runner import Replayer, load_conversations, upstream_for
from proxy.store.sqlite import SQLiteStore

# Every row names its trigger (max_total_tokens), its tool-result threshold (max_tool_message_tokens) and its
# index size, so a row means the same whatever the defaults are.
SETTINGS: list[tuple[str, dict]] = [
    (
        "auto (default: max_total_tokens 18000, tool results 6000, index 9000)",
        {"max_total_tokens": 18_000, "max_tool_message_tokens": 6000, "index_chars": 9000},
    ),
    (
        "compact only (default: tool results 6000)",
        {"mode": "compact", "max_total_tokens": 18_000, "max_tool_message_tokens": 6000},
    ),
    (
        "auto, 20000, tool results 2000, index 10000 (the former default)",
        {"max_total_tokens": 20_000, "max_tool_message_tokens": 2000, "index_chars": 10_000},
    ),
    (
        "auto, 20000, tool results 6000, index 10000",
        {"max_total_tokens": 20_000, "max_tool_message_tokens": 6000, "index_chars": 10_000},
    ),
    (
        "auto, 20000, tool results 6000, index 8000",
        {"max_total_tokens": 20_000, "max_tool_message_tokens": 6000, "index_chars": 8000},
    ),
    (
        "auto, 18000, tool results 2000, index 10000",
        {"max_total_tokens": 18_000, "max_tool_message_tokens": 2000, "index_chars": 10_000},
    ),
    (
        "auto, 18000, tool results 4000, index 10000",
        {"max_total_tokens": 18_000, "max_tool_message_tokens": 4000, "index_chars": 10_000},
    ),
    (
        "auto, 18000, tool results 6000, index 8000",
        {"max_total_tokens": 18_000, "max_tool_message_tokens": 6000, "index_chars": 8000},
    ),
    (
        "auto, 18000, tool results 6000, index 10000",
        {"max_total_tokens": 18_000, "max_tool_message_tokens": 6000, "index_chars": 10_000},
    ),
    (
        "auto, 18000, tool results 6000, index 12000",
        {"max_total_tokens": 18_000, "max_tool_message_tokens": 6000, "index_chars": 12_000},
    ),
    (
        "auto, 16000, tool results 6000, index 12000",
        {"max_total_tokens": 16_000, "max_tool_message_tokens": 6000, "index_chars": 12_000},
    ),
    (
        "auto, 14000, tool results 6000, index 10000",
        {"max_total_tokens": 14_000, "max_tool_message_tokens": 6000, "index_chars": 10_000},
    ),
    (
        "auto, 10000, tool results 6000, index 8000",
        {"max_total_tokens": 10_000, "max_tool_message_tokens": 6000, "index_chars": 8000},
    ),
    (
        "auto, 40000, tool results 6000, index 8000",
        {"max_total_tokens": 40_000, "max_tool_message_tokens": 6000, "index_chars": 8000},
    ),
    (
        "compact, tool results 2000 (the former default)",
        {"mode": "compact", "max_total_tokens": 20_000, "max_tool_message_tokens": 2000},
    ),
    ("compact, tool results 3000", {"mode": "compact", "max_total_tokens": 18_000, "max_tool_message_tokens": 3000}),
    ("compact, tool results 500", {"mode": "compact", "max_total_tokens": 18_000, "max_tool_message_tokens": 500}),
]


def offload_settings(values: dict) -> OffloadSettings:
    return OffloadSettings(**{k: v for k, v in values.items() if k != "index_chars"})


async def replay(conversations: list[dict], values: dict, format: str) -> list:
    """The replayed conversations (`proxy.replay._runner.Conversation`), in order. `values`: the
    offload settings, and `index_chars`, the summary index's size (`summary_index.INDEX_CHARS`,
    a constant of the proxy swept here)."""
    default = summary_index.INDEX_CHARS
    summary_index.INDEX_CHARS = values.get("index_chars", default)
    try:
        return await _replay(conversations, offload_settings(values), format)
    finally:
        summary_index.INDEX_CHARS = default


async def _replay(conversations: list[dict], settings: OffloadSettings, format: str) -> list:
    with tempfile.TemporaryDirectory(prefix="recall-frontier-") as data:
        store, upstream = SQLiteStore(Path(data)), upstream_for(None)
        try:
            replayer = Replayer(store, settings, upstream, headers=[], model="gpt-4o", format=format)
            return [await replayer.conversation(conv, index=i) for i, conv in enumerate(conversations)]
        finally:
            await upstream.aclose()
            await store.close()


def table(rows: list[dict]) -> str:
    header = f"{'setting':40} {'fwd/raw':>7} {'prefix':>6} {'cache':>6} {'recall':>6} {'found/kept':>11} {'sum.':>4}"
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r['setting']:40} {r['forwarded_ratio']:>7.3f} {r['prefix_reuse']:>6.3f} "
            f"{r['cache_cost_ratio']:>6.3f} {r['recall']:>6.3f} "
            f"{str(r['recall_found']) + '/' + str(r['recall_identifiers']):>11} {r['summaries']:>4}"
        )
    return "\n".join(lines)


def framework_table(rows: list[dict], names: list[str]) -> str:
    header = f"{'framework':16} " + " ".join(f"{n[:26]:>26}" for n in names)
    lines = [header, f"{'':16} " + " ".join(f"{'recall cache prefix':>26}" for _ in names), "-" * len(header)]
    frameworks = list(rows[0]["by_framework"])
    for fw in frameworks:
        cells = [rows[i]["by_framework"][fw] for i in range(len(names))]
        lines.append(
            f"{fw:16} "
            + " ".join(f"{c['recall']:>12.3f} {c['cache_cost_ratio']:>6.3f} {c['prefix_reuse']:>6.3f}" for c in cells)
        )
    means = [lofo.mean(list(rows[i]["by_framework"].values())) for i in range(len(names))]
    lines.append(
        f"{'mean':16} "
        + " ".join(f"{m['recall']:>12.3f} {m['cache_cost_ratio']:>6.3f} {m['prefix_reuse']:>6.3f}" for m in means)
    )
    return "\n".join(lines)


def lofo_table(title: str, held: list[lofo.HeldOut], rows: list[dict]) -> str:
    lines = [
        title,
        f"{'left out':16} {'chosen on the others':40} {'recall':>6} {'cache':>6} {'prefix':>6} {'fwd/raw':>7}",
    ]
    for h in held:
        f = h.figures
        lines.append(
            f"{h.framework:16} {rows[h.chosen]['setting'][:40]:40} {f['recall']:>6.3f} "
            f"{f['cache_cost_ratio']:>6.3f} {f['prefix_reuse']:>6.3f} {f['forwarded_ratio']:>7.3f}"
        )
    m = lofo.mean([h.figures for h in held])
    lines.append(
        f"{'mean':16} {'':40} {m['recall']:>6.3f} {m['cache_cost_ratio']:>6.3f} {m['prefix_reuse']:>6.3f} "
        f"{m['forwarded_ratio']:>7.3f}"
    )
    p = lofo.pooled(held, overall)
    lines.append(
        f"{'pooled':16} {'(each conversation, its own choice)':40} {p['recall']:>6.3f} "
        f"{p['cache_cost_ratio']:>6.3f} {p['prefix_reuse']:>6.3f} {p['forwarded_ratio']:>7.3f}"
    )
    return "\n".join(lines)


def chart(rows: list[dict], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 6))
    colors = plt.get_cmap("tab10").colors
    for n, r in enumerate(rows, 1):
        compact = r["settings"].get("mode") == "compact"
        ax.scatter(
            r["forwarded_ratio"],
            r["recall"],
            marker="s" if compact else "o",
            s=70,
            zorder=3,
            color=colors[(n - 1) % len(colors)],
            label=f"{n}. {r['setting']} (cache {r['cache_cost_ratio']:.2f})",
        )
        ax.annotate(str(n), (r["forwarded_ratio"], r["recall"]), textcoords="offset points", xytext=(5, 5), fontsize=8)
    if rows:  # the default (the first setting)
        ax.scatter(
            rows[0]["forwarded_ratio"],
            rows[0]["recall"],
            marker="*",
            s=320,
            facecolors="none",
            edgecolors="black",
            linewidths=1.2,
            zorder=5,
            label="chosen default",
        )
    ax.scatter([1.0], [1.0], marker="x", s=70, color="black", zorder=4, label="raw history (cache 1.00)")
    ax.set(
        xlabel="forwarded / raw tokens (lower is cheaper)",
        ylabel="recall: identifiers taken from tool results still forwarded",
        title=title,
    )
    ax.set_xlim(0, 1.08)
    ax.grid(True, alpha=0.3)
    ax.legend(
        loc="upper left",
        bbox_to_anchor=(1.02, 1),
        fontsize=8,
        title="● auto   ■ compact only",
        title_fontsize=8,
        frameon=False,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=Path, default=SHARED / "traces" / "traces.jsonl")
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--format", choices=("chat", "responses"), default="chat")
    parser.add_argument("--first", type=int, default=len(SETTINGS), help="replay only the first N settings")
    args = parser.parse_args()
    conversations = load_conversations(args.traces)
    frameworks = [lofo.framework_of(conv) for conv in conversations]
    rows, results = [], []
    for name, values in SETTINGS[: max(args.first, 1)]:
        replayed = await replay(conversations, values, args.format)
        figures = overall(replayed)
        results.append(replayed)
        rows.append(
            {
                "setting": name,
                "settings": values,
                **figures,
                "by_framework": lofo.by_framework(replayed, frameworks, overall),
            }
        )
        print(f"{name}: forwarded/raw {figures['forwarded_ratio']:.3f}, recall {figures['recall']:.3f}", flush=True)
    compact = [i for i, r in enumerate(rows) if r["settings"].get("mode") == "compact"]
    tracks = [
        ("auto", [i for i in range(len(rows)) if i not in compact], lofo.choose),
        ("compaction only", compact, lambda part: lofo.choose(part, cost_weight=0.0)),
    ]
    held_out = {
        name: lofo.leave_one_out(results, frameworks, overall, candidates=indices, pick=pick)
        for name, indices, pick in tracks
        if indices
    }
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {
        name: {
            "held_out": [{"framework": h.framework, "chosen": rows[h.chosen]["setting"], **h.figures} for h in held],
            "mean": lofo.mean([h.figures for h in held]),
            "pooled": {k: v for k, v in lofo.pooled(held, overall).items() if k != "latency"},
        }
        for name, held in held_out.items()
        if held
    }
    (args.out / "recall_frontier.json").write_text(
        json.dumps({"settings": rows, "leave_one_framework_out": summary}, indent=2, default=str)
    )
    turns = rows[0]["turns"]
    path = chart(
        rows,
        args.out / "recall_frontier.png",
        f"recall vs forwarded/raw: {len(conversations)} conversations, {turns} turns ({args.format})",
    )
    print()
    print(table(rows))
    if any(held_out.values()):
        defaults = [i for i in (0, 1) if i < len(rows)]
        print()
        print("defaults per framework (recall, cache_cost_ratio, prefix reuse):")
        print(framework_table([rows[i] for i in defaults], [rows[i]["setting"] for i in defaults]))
        for name, held in held_out.items():
            if held:
                print()
                print(lofo_table(f"leave one framework out, {name}:", held, rows))
    print(f"wrote {path}, {args.out / 'recall_frontier.json'}")


if __name__ == "__main__":
    asyncio.run(main())
