"""Presentation of a replay: the printed table and the PNG charts (matplotlib, when installed)."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("proxy.replay")


def table(report: dict[str, Any]) -> str:
    header = (f"{'conversation':36} {'turns':>5} {'raw':>10} {'forwarded':>10} {'ratio':>6} {'prefix':>6} "
              f"{'max turn':>8} {'sum.':>4} {'refs':>5} {'exact':>5} {'ms cold':>7} {'ms st.':>6}")
    rows = [header, "-" * len(header)]

    def row(name: str, r: dict[str, Any]) -> str:
        ratio = r["forwarded_tokens"] / r["raw_tokens"] if r["raw_tokens"] else 1.0
        return (f"{name[:36]:36} {r['turns']:>5} {r['raw_tokens']:>10} {r['forwarded_tokens']:>10} {ratio:>6.3f} "
                f"{r['prefix_reuse']:>6.3f} {r['max_forwarded_turn']:>8} {r['summaries']:>4} {r['refs']:>5} "
                f"{r['reload_exact_fraction']:>5.2f} {r['ms_per_turn_cold']:>7.2f} {r['ms_per_turn_steady']:>6.2f}")

    rows += [row(c["id"], c) for c in report["conversations"]]
    rows += ["-" * len(header), row("OVERALL", report["overall"])]
    o = report["overall"]
    rows.append(f"turns above max_total_tokens + system + tools + summary + tail: {o['turns_over_budget']}")
    counting = report.get("token_counting")
    if counting:
        names = ", ".join(e["encoding"] for e in counting["encodings"])
        rows.append(f"tokens: {names} via tiktoken" if counting["method"] == "tiktoken"
                    else f"tokens: ESTIMATES (about 4 bytes per token; tiktoken could not load {names})")
    return "\n".join(rows)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:80]


def write_charts(report: dict[str, Any], out: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no charts (pip install 'offload-proxy[replay]')")
        return []
    written = []
    for c in report["conversations"]:
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.plot(c["raw_per_turn"], label="raw")
        ax.plot(c["forwarded_per_turn"], label="forwarded")
        ax.set(title=c["id"][:70], xlabel="turn", ylabel="tokens (o200k_base, message JSON)")
        ax.legend()
        path = out / f"{_slug(c['id'])}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=80)
        plt.close(fig)
        written.append(path)
    fig, ax = plt.subplots(figsize=(10, 5))
    names = [c["id"][:18] for c in report["conversations"]]
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], [c["raw_tokens"] for c in report["conversations"]], width=0.4, label="raw")
    ax.bar([x + 0.2 for x in xs], [c["forwarded_tokens"] for c in report["conversations"]], width=0.4,
           label="forwarded")
    ax.set_xticks(list(xs), names, rotation=60, ha="right", fontsize=7)
    o = report["overall"]
    ax.set(title=f"tokens summed over turns: forwarded/raw {o['forwarded_ratio']:.3f}, "
                 f"prefix reuse {o['prefix_reuse']:.3f}", ylabel="tokens")
    ax.legend()
    fig.tight_layout()
    path = out / "overall.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return [*written, path]
