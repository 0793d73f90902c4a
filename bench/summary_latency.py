"""What a summariser's latency must cost: the proxy's schedule against the cheapest possible one.

    .venv/bin/python bench/summary_latency.py [--traces ../shared/traces/traces.jsonl] [--longest 3]
                                              [--summary-tokens 2500] [--lags 1,2,3,4,5]

For the `--longest` conversations (by tokens), each turn's history as the pipeline compacts it
(`plan_compaction`, default settings) in the cost model of `proxy.replay._latency_bound`: per
summary latency in turns (1: ready for the next turn, a replay without a summary delay; 4: a
3 s summariser, 1 s turns, started once the turn has answered), the cache cost ratio of
- the proxy's schedule (`current_policy`),
- the cheapest schedule of any kind (`lower_bound`, every turn within the hard limit, as the
  proxy's turns are while a summary is made),
- the cheapest with no more compressions than the proxy's at latency 1 (the same prefix reuse).
The model leaves out what both sides share (tools, kept user messages, the summaries' own size
varying): its figures sit ≈ 0.03 under the replay's, its differences match the replay's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from common import SHARED

from proxy.core import compression
from proxy.core import compression as cp
from proxy.core.compaction import plan_compaction
from proxy.core.settings import OffloadSettings
from proxy.core.tokens import counter_for_encoding, counter_for_model
from proxy.formats import chat
from proxy.replay import _metrics as metrics
from proxy.replay._latency_bound import Turn, current_policy, lower_bound
from proxy.replay._runner import ReplayInputError, load_conversations, message_tokens, requests_of

PENALTIES = tuple([0] + [1_000 * 2**k for k in range(12)])


def turns_of(conv: dict, settings: OffloadSettings, model: str) -> tuple[list[Turn], float]:
    """The conversation's turns as the cost model sees them, and the raw history's cache cost."""
    counter, json_counter = counter_for_model(model), counter_for_encoding("o200k_base")
    requests, _ = requests_of(conv, "chat")
    turns = []
    for request in requests:
        plan = plan_compaction(request, chat.VIEW, settings, counter=counter, namespace="bound")
        items = plan.items
        head, tail = cp.split(items, chat.VIEW, settings.keep_recent_for(cp.COMPRESS_KEEP_RECENT))
        turns.append(
            Turn(
                message_tokens(items, json_counter),
                head,
                tail,
                cp.trigger(items, chat.VIEW, head, settings=settings, counter=counter),
            )
        )
    history = message_tokens(conv["messages"], json_counter)
    raw = metrics.cache_cost(requests, [history[: len(r)] for r in requests])
    return turns, raw


def fewest(turns: list[Turn], *, lag: int, summary_tokens: int, at_most: int, limit: int):
    """The cheapest schedule with at most `at_most` compressions (the lightest penalty that gets there)."""
    for penalty in PENALTIES:
        found = lower_bound(turns, lag=lag, summary_tokens=summary_tokens, per_compression=penalty, limit=limit)
        if found.compressions <= at_most:
            return found
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", default=str(SHARED / "traces" / "traces.jsonl"))
    parser.add_argument("--longest", type=int, default=3)
    parser.add_argument("--summary-tokens", type=int, default=2_500)
    parser.add_argument("--lags", default="1,2,3,4,5")
    parser.add_argument("--model", default="gpt-4o")
    args = parser.parse_args()
    lags = [int(x) for x in args.lags.split(",") if x.strip().isdigit()]
    if args.longest < 1 or not lags or len(lags) != len(args.lags.split(",")):
        parser.error("--longest must be 1 or more and --lags turns of 0 or more, e.g. 1,2,3")
    settings = OffloadSettings()
    counter = counter_for_encoding("o200k_base")
    try:
        conversations = load_conversations(Path(args.traces))
    except ReplayInputError as exc:
        parser.error(str(exc))
    conversations.sort(key=lambda c: -sum(message_tokens(c["messages"], counter)))
    chosen = [turns_of(c, settings, args.model) for c in conversations[: args.longest]]
    raw = sum(r for _, r in chosen)
    if not raw:
        parser.error(f"{args.traces}: no turn to compare (its longest conversations have no assistant turn)")
    s = args.summary_tokens
    limit = compression.hard_limit(settings, args.model)
    instant = [current_policy(t, lag=1, summary_tokens=s).compressions for t, _ in chosen]
    rows = []
    for lag in lags:
        policy = [current_policy(t, lag=lag, summary_tokens=s) for t, _ in chosen]
        free = [lower_bound(t, lag=lag, summary_tokens=s, limit=limit) for t, _ in chosen]
        same = [fewest(t, lag=lag, summary_tokens=s, at_most=n, limit=limit) for (t, _), n in zip(chosen, instant)]
        rows.append(
            {
                "lag": lag,
                **{
                    name: {
                        "cost": round(sum(x.cost for x in xs) / raw, 4),
                        "compressions": sum(x.compressions for x in xs),
                    }
                    for name, xs in (("policy", policy), ("bound", free), ("bound_same_compressions", same))
                },
            }
        )
    print(f"{args.longest} longest conversations, summary {s} tokens; cache cost ratio (compressions)")
    print(f"{'lag':>3}  {'proxy':>15}  {'bound':>15}  {'bound, <= proxy@1':>18}")
    for r in rows:
        cells = [
            f"{r[k]['cost']:.4f} ({r[k]['compressions']:>3})" for k in ("policy", "bound", "bound_same_compressions")
        ]
        print(f"{r['lag']:>3}  {cells[0]:>15}  {cells[1]:>15}  {cells[2]:>18}")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
