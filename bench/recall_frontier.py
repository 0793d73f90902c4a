"""Recall against forwarded/raw tokens for a few offload settings, on real agent traces.

    .venv/bin/python bench/recall_frontier.py [--traces ../shared/traces/traces.jsonl] [--out bench-out]
                                              [--format chat|responses]

Replays every conversation once per setting exactly as `python -m proxy replay` does (the real
pipeline, a fresh temporary store, the built-in deterministic summariser), prints one row per
setting (forwarded/raw, prefix reuse, cache_cost_ratio, recall, summaries) and writes
DIR/recall_frontier.png (recall against forwarded/raw, one point per setting) and
DIR/recall_frontier.json. The figures are those of replay's report.json (`overall`): see
proxy/replay/metrics.py for their definitions. About 10 s per setting on the 20 shared traces.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path

from common import SHARED

from proxy.core.settings import OffloadSettings
from proxy.replay.report import overall
from proxy.replay.runner import Replayer, load_conversations, upstream_for
from proxy.store.sqlite import SQLiteStore

SETTINGS: list[tuple[str, dict]] = [
    ("auto (default)", {}),
    ("compact only", {"mode": "compact"}),
    ("auto, max_total_tokens 10000", {"max_total_tokens": 10_000}),
    ("auto, max_total_tokens 40000", {"max_total_tokens": 40_000}),
    ("auto, max_tool_message_tokens 500", {"max_tool_message_tokens": 500}),
    ("compact, max_tool_message_tokens 500", {"mode": "compact", "max_tool_message_tokens": 500}),
    ("compact, max_tool_message_tokens 200", {"mode": "compact", "max_tool_message_tokens": 200}),
    ("compact, max_total_tokens 10000", {"mode": "compact", "max_total_tokens": 10_000}),
]


async def replay(conversations: list[dict], settings: OffloadSettings, format: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="recall-frontier-") as data:
        store, upstream = SQLiteStore(Path(data)), upstream_for(None)
        try:
            replayer = Replayer(store, settings, upstream, [], "gpt-4o", format=format)
            return overall([await replayer.conversation(conv, index=i) for i, conv in enumerate(conversations)])
        finally:
            await upstream.aclose()
            await store.close()


def table(rows: list[dict]) -> str:
    header = f"{'setting':40} {'fwd/raw':>7} {'prefix':>6} {'cache':>6} {'recall':>6} {'found/kept':>11} {'sum.':>4}"
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r['setting']:40} {r['forwarded_ratio']:>7.3f} {r['prefix_reuse']:>6.3f} "
                     f"{r['cache_cost_ratio']:>6.3f} {r['recall']:>6.3f} "
                     f"{str(r['recall_found']) + '/' + str(r['recall_identifiers']):>11} {r['summaries']:>4}")
    return "\n".join(lines)


def chart(rows: list[dict], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 6))
    colors = plt.get_cmap("tab10").colors
    for n, r in enumerate(rows, 1):
        compact = r["settings"].get("mode") == "compact"
        ax.scatter(r["forwarded_ratio"], r["recall"], marker="s" if compact else "o", s=70, zorder=3,
                   color=colors[(n - 1) % len(colors)],
                   label=f"{n}. {r['setting']} (cache {r['cache_cost_ratio']:.2f})")
        ax.annotate(str(n), (r["forwarded_ratio"], r["recall"]), textcoords="offset points", xytext=(5, 5),
                    fontsize=8)
    ax.scatter([1.0], [1.0], marker="x", s=70, color="black", zorder=4, label="raw history (cache 1.00)")
    ax.set(xlabel="forwarded / raw tokens (lower is cheaper)",
           ylabel="recall: identifiers taken from tool results still forwarded", title=title)
    ax.set_xlim(0, 1.08)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8, title="● auto   ■ compact only",
              title_fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=Path, default=SHARED / "traces" / "traces.jsonl")
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--format", choices=("chat", "responses"), default="chat")
    args = parser.parse_args()
    conversations = load_conversations(args.traces)
    rows = []
    for name, values in SETTINGS:
        figures = await replay(conversations, OffloadSettings(**values), args.format)
        rows.append({"setting": name, "settings": values, **figures})
        print(f"{name}: forwarded/raw {figures['forwarded_ratio']:.3f}, recall {figures['recall']:.3f}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "recall_frontier.json").write_text(json.dumps(rows, indent=2))
    turns = rows[0]["turns"]
    path = chart(rows, args.out / "recall_frontier.png",
                 f"recall vs forwarded/raw: {len(conversations)} conversations, {turns} turns ({args.format})")
    print()
    print(table(rows))
    print(f"wrote {path}, {args.out / 'recall_frontier.json'}")


if __name__ == "__main__":
    asyncio.run(main())
