"""What a client that sets no cache_control is billed through the proxy, on a clock with idle pauses.

    .venv/bin/python bench/cache_control.py [--traces ../shared/traces/traces.jsonl] [--gaps mix:30s,0.1@600s]
                                            [--seed 0] [--pricing anthropic] [--out bench-out] [--first N]

Replays every trace as Anthropic Messages requests exactly as `python -m proxy replay --format
anthropic --turn-gaps …` does (the real pipeline, the built-in summariser, a fresh store), twice:
with the cuts priced at cache prices as the server makes them (`proxy.core.prompt_cache`, the
session's last sent prefix on the replay's clock) and without; and bills each with the
provider-cache model (`proxy.core.prompt_cache`, `proxy.replay._bill`): by default one turn in
ten follows an idle pause of 600 s (longer than the 5-minute TTL), the others 30 s. Printed, per
trace, per framework and overall, as shares of the raw history billed uncached (what a client that
sets no cache_control pays without the proxy):

- raw cached: the raw history with the client's own caching (the caching the proxy would add);
- proxy off: through the proxy with `--cache-control off` (no caching: what such a client paid);
- no cuts: the proxy's cache control, its cuts made without the cache in mind;
- proxy: the server's default (cache control, cuts priced at cache prices);
- keep-alive: that with `--cache-keepalive on` (the default limits: pings priced as reads of the
  prefix plus their output), and `ka/none`, it over "no cuts" (the bill with keep-alive and
  cold-cache cuts over the bill without them);
- floor: every new token paid once at the write price;
- above raw / above cached: the traces billed more through the proxy (the default) than their raw
  history uncached (as this client sends it) / with the client's own caching; `ka above`: the
  same with keep-alive over the raw history with caching.

Then the ways of caching measured to choose the default, the keep-alive's smallest prefix
(`--cache-keepalive-min-tokens`) measured to choose its default, and both left one framework
out: for each framework, the choice that bills the other frameworks' traces least, measured on its
own traces, and all of them pooled. Targets (issue 39): proxy <= 0.12, no trace billed above its
raw history's bill, keep-alive and cold-cache cuts <= 0.90 x the bill without them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

from common import SHARED

from proxy.core.settings import OffloadSettings
from proxy.formats.messages import STRATEGY
from proxy.replay import _bill as bill
from proxy.replay import _report as lofo
from proxy.replay._bill import parse
from proxy.replay._runner import Replayer, default_keepalive, load_conversations, upstream_for
from proxy.store.sqlite import SQLiteStore

MODEL = "claude-sonnet-4-5"
STRATEGIES = tuple(bill.MARKERS)
MIN_TOKENS = tuple(str(m) for m in bill.KEEPALIVE_SWEEP)
DEFAULT_MIN = str(default_keepalive().min_tokens)
TARGET, KEEPALIVE_TARGET = 0.12, 0.90


async def replayed(conversations: list[dict], *, gaps: str, seed: int, pricing: str, cuts: bool) -> list:
    with tempfile.TemporaryDirectory(prefix="cache-control-") as data:
        store, upstream = SQLiteStore(Path(data)), upstream_for(None)
        try:
            replayer = Replayer(
                store,
                OffloadSettings(),
                upstream,
                headers=[],
                model=MODEL,
                format="anthropic",
                pricing=pricing,
                gaps=parse(gaps),
                gap_seed=seed,
                cache_cuts=cuts,
            )
            out = []
            for i, conv in enumerate(conversations):
                out.append(await replayer.conversation(conv, index=i))
                print(
                    f"  {'cuts' if cuts else 'no cuts'} {i + 1}/{len(conversations)} {conv.get('id')}",
                    file=sys.stderr,
                    flush=True,
                )
            return out
        finally:
            await upstream.aclose()
            await store.close()


def figures(pairs: list[tuple[dict, dict]], *, strategy: str = STRATEGY, min_tokens: str = DEFAULT_MIN) -> dict:
    """Shares of the raw history uncached of (without cuts, with cuts) bills; `strategy` the
    proxy's way of caching, `min_tokens` the keep-alive's smallest prefix."""
    uncut, cut = [p[0] for p in pairs], [p[1] for p in pairs]
    base = sum(b["raw_uncached"] for b in cut) or 1.0
    out = {k: sum(b[k] for b in cut) / base for k in ("raw_cached", "proxy_uncached", "floor")}
    out["no_cuts"] = sum(b["proxy_cached"] for b in uncut) / base
    out["proxy"] = sum(b["strategies"][strategy] for b in cut) / base
    out["keepalive"] = sum(b["keepalive_sweep"][min_tokens] for b in cut) / base
    out["ka_vs_none"] = out["keepalive"] / out["no_cuts"] if out["no_cuts"] else 1.0
    out.update({name: sum(b["strategies"][name] for b in cut) / base for name in STRATEGIES})
    out.update({f"ka {m}": sum(b["keepalive_sweep"][m] for b in cut) / base for m in MIN_TOKENS})
    out["above_raw"] = sum(1 for b in cut if b["strategies"][strategy] > b["raw_uncached"] + 1e-9)
    out["above_raw_cached"] = sum(1 for b in cut if b["strategies"][strategy] > b["raw_cached"] + 1e-9)
    out["ka_above"] = sum(1 for b in cut if b["keepalive_sweep"][min_tokens] > b["raw_cached"] + 1e-9)
    out["conversations"] = len(pairs)
    return out


COLUMNS = (
    ("raw cached", "raw_cached"),
    ("proxy off", "proxy_uncached"),
    ("no cuts", "no_cuts"),
    ("proxy", "proxy"),
    ("keep-alive", "keepalive"),
    ("ka/none", "ka_vs_none"),
    ("floor", "floor"),
    ("above raw", "above_raw"),
    ("above cached", "above_raw_cached"),
    ("ka above", "ka_above"),
)


def table(rows: list[tuple[str, dict]], columns=COLUMNS) -> str:
    head = f"{'trace':44} " + " ".join(f"{title:>{max(6, len(title))}}" for title, _ in columns)
    lines = [head, "-" * len(head)]
    for name, f in rows:
        cells = [f"{f[k]:>{max(6, len(title))}{'' if isinstance(f[k], int) else '.3f'}}" for title, k in columns]
        lines.append(f"{name[:44]:44} " + " ".join(cells))
    return "\n".join(lines)


def held_out(pairs, frameworks, *, options, pick_figure, figures_of) -> list[tuple[str, dict]]:
    """Leave one framework out over `options`: the one whose `pick_figure` is least on the other
    frameworks, its `figures_of` on the one left out, and all of them pooled."""
    per_option = [[(option, p) for p in pairs] for option in options]

    def summarised(part: list) -> dict:
        return figures_of(part[0][0], [p for _, p in part]) if part else {pick_figure: 1.0}

    held = lofo.leave_one_out(
        per_option,
        frameworks,
        summarised,
        pick=lambda parts: min(range(len(parts)), key=lambda i: (parts[i][pick_figure], i)),
    )
    rows = [(f"{h.framework} (chosen: {options[h.chosen]})", h.figures) for h in held]
    if held:
        pooled = [c for h in held for c in h.conversations]
        base = sum(p[1]["raw_uncached"] for _, p in pooled) or 1.0
        rows.append(
            (
                "POOLED",
                {
                    **figures([p for _, p in pooled]),
                    pick_figure: sum(figures_of(o, [p])[pick_figure] * p[1]["raw_uncached"] for o, p in pooled) / base,
                },
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=Path, default=SHARED / "traces" / "traces.jsonl")
    parser.add_argument("--gaps", default="mix:30s,0.1@600s")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pricing", choices=("anthropic", "openai"), default="anthropic")
    parser.add_argument("--first", type=int, default=None, help="only the first N traces")
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    args = parser.parse_args()
    conversations = load_conversations(args.traces)[: args.first]
    run = dict(gaps=args.gaps, seed=args.seed, pricing=args.pricing)
    uncut = asyncio.run(replayed(conversations, cuts=False, **run))
    cut = asyncio.run(replayed(conversations, cuts=True, **run))
    pairs = [(a.bill, b.bill) for a, b in zip(uncut, cut)]
    frameworks = [lofo.framework_of(conv) for conv in conversations]
    rows = [(r.id, figures([p])) for r, p in zip(cut, pairs)]
    rows += [
        (f"framework {name}", figures([p for p, f in zip(pairs, frameworks) if f == name]))
        for name in sorted(set(frameworks))
    ]
    overall = figures(pairs)
    rows.append(("OVERALL", overall))
    print(
        f"billed at {args.pricing} prices, turn gaps {args.gaps} (seed {args.seed}), {MODEL}; shares of the raw "
        f"history billed uncached; proxy = {STRATEGY} caching, cuts priced at cache prices (the default); "
        f"keep-alive at --cache-keepalive-min-tokens {DEFAULT_MIN}"
    )
    print(table(rows))
    met = overall["proxy"] <= TARGET and overall["above_raw"] == 0 and overall["ka_vs_none"] <= KEEPALIVE_TARGET
    print(
        f"targets (proxy <= {TARGET}, no trace billed above its raw history's bill, keep-alive and cold-cache cuts "
        f"<= {KEEPALIVE_TARGET} x without them): {'met' if met else 'NOT met'} — proxy {overall['proxy']:.3f}, "
        f"without cache control {overall['proxy_uncached']:.3f}, raw cached {overall['raw_cached']:.3f}, "
        f"keep-alive and cold cuts {overall['ka_vs_none']:.3f} x; {overall['above_raw']} trace(s) above the raw "
        f"history as this client sends it; {overall['above_raw_cached']} above it with the client's own caching "
        f"({overall['ka_above']} with keep-alive)"
    )

    sweep = [(f"way of caching {s}", figures(pairs, strategy=s)) for s in STRATEGIES]
    sweep += [(f"keep-alive min tokens {m}", figures(pairs, min_tokens=m)) for m in MIN_TOKENS]
    print("\nthe choices, on all traces:")
    print(
        table(
            sweep,
            columns=(
                ("proxy", "proxy"),
                ("keep-alive", "keepalive"),
                ("ka/none", "ka_vs_none"),
                ("ka above", "ka_above"),
            ),
        )
    )
    ways = held_out(
        pairs, frameworks, options=STRATEGIES, pick_figure="proxy", figures_of=lambda s, part: figures(part, strategy=s)
    )
    mins = held_out(
        pairs,
        frameworks,
        options=MIN_TOKENS,
        pick_figure="keepalive",
        figures_of=lambda m, part: figures(part, min_tokens=m),
    )
    if ways:
        print("\nleave one framework out: the way of caching that bills the other frameworks least, on this one:")
        print(
            table(
                ways, columns=(("proxy", "proxy"), ("raw cached", "raw_cached"), ("above cached", "above_raw_cached"))
            )
        )
        print("\nleave one framework out: the keep-alive's smallest prefix that bills the other frameworks least:")
        print(table(mins, columns=(("keep-alive", "keepalive"), ("no cuts", "no_cuts"), ("ka/none", "ka_vs_none"))))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "cache_control.json"
    path.write_text(
        json.dumps(
            {
                **run,
                "model": MODEL,
                "strategy": STRATEGY,
                "keepalive_min_tokens": DEFAULT_MIN,
                "rows": dict(rows),
                "choices": dict(sweep),
                "lofo_caching": dict(ways),
                "lofo_keepalive": dict(mins),
                "bills": {r.id: {"uncut": a, "cut": b} for r, (a, b) in zip(cut, pairs)},
            },
            indent=1,
        )
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
