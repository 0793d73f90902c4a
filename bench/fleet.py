"""A fleet on one Redis: does a conversation spread over 1, 2 or 3 replicas cost what one replica costs?

Replays one long agent conversation (a trace of ../shared/traces, else a synthetic history),
turn k on replica k mod N, `--gap` seconds between turns, through N proxy processes on one
redis-server (`--cluster`: a 3-master Redis Cluster), with the fake upstream holding each summary
call `delay` seconds. Prints, per replica count and delay: the summary calls the upstream got,
the summary tokens billed to clients (X-Offload-Summary-Tokens), the prefix switches (turns whose
forwarded items do not extend the previous turn's: the provider's cached prefix is lost),
forwarded / raw tokens, the cache-weighted cost (`proxy.replay._metrics.cache_cost`: cached
input at 10 %, summary calls included) over the raw turns', and how many forwarded bodies differ
from the first replica count's (refs aside: each run has a namespace of its own). The target:
every column equal across replica counts, for every delay, and no body different.

    .venv/bin/python bench/fleet.py [--turns 66] [--delays 0,1,3] [--replicas 1,2,3] [--cluster]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's packages

import httpx2  # noqa: E402
from common import SHARED, machine  # noqa: E402

from proxy.core.tokens import counter_for_encoding  # noqa: E402
from proxy.demo import fake_upstream  # noqa: E402
from proxy.replay import _metrics as metrics  # noqa: E402
from proxy.replay._runner import (
    message_tokens,  # noqa: E402
    turns_of,  # noqa: E402
)
from proxy.replay._simulation import request_items  # noqa: E402
from tests.harness.fleet import idle, replicas, wait_until  # noqa: E402
from tests.harness.history import agent_history  # noqa: E402
from tests.harness.servers import RedisCluster, RedisProcess, ServerThread  # noqa: E402

TRACES = SHARED / "traces" / "traces.jsonl"
REF = re.compile(r"ref=([A-Za-z0-9_-]{16})\b")
ID16 = re.compile(r"[A-Za-z0-9_-]{16}")


def without_refs(bodies: list[bytes]) -> list[str]:
    """The bodies with each ref (a hash keyed by the run's own namespace) replaced by its rank of
    first appearance: two runs' bodies compare equal when all but their namespaces is."""
    names: dict[str, str] = {}
    out = []
    for body in bodies:
        text = body.decode()
        for ref in REF.findall(text):
            names.setdefault(ref, f"ref{len(names):013d}")
        out.append(ID16.sub(lambda m: names.get(m.group(0), m.group(0)), text))
    return out


class Upstream:
    """The benchmarks' fake upstream (`proxy.demo.fake_upstream`), recording every request, its
    summary calls answered `delay` seconds late."""

    def __init__(self) -> None:
        self.delay = 0.0
        self.turns: list[bytes] = []  # the forwarded turns' bodies
        self.summaries: list[tuple[int, bytes, str]] = []  # (turns forwarded before it, body, path)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await fake_upstream.app(scope, receive, send)
        body = await fake_upstream.read_body(receive)
        if fake_upstream.is_summary_call(body):
            self.summaries.append((len(self.turns), body, scope["path"]))
            await asyncio.sleep(self.delay)
        elif scope["method"] == "POST":
            self.turns.append(body)
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await fake_upstream.app(scope, replay, send)


def conversation(turns: int, trace: str | None, synthetic: bool) -> tuple[str, list[dict], list | None]:
    """(its name, its messages, its tools): the named trace, else the trace with at least `turns`
    turns whose first `turns` are the largest, else a synthetic agent history."""
    if not synthetic and TRACES.exists():
        convs = [json.loads(line) for line in TRACES.read_text().splitlines() if line.strip()]
        if trace:
            convs = [c for c in convs if c["id"] == trace]
        long = [c for c in convs if len(turns_of(c["messages"])) >= turns] or convs
        if long:
            size = {c["id"]: len(json.dumps(turns_of(c["messages"])[:turns][-1])) for c in long}
            best = max(long, key=lambda c: size[c["id"]])
            return best["id"], best["messages"], best.get("tools")
    return "synthetic agent history", agent_history(steps=turns + 1, lines=120), None


def run(
    urls: list[str],
    upstream: Upstream,
    requests: list[list[dict]],
    tools: list | None,
    gap: float,
    headers: dict[str, str],
) -> dict:
    upstream.turns.clear()
    upstream.summaries.clear()
    credential = f"sk-fleet-bench-{uuid.uuid4().hex}"  # a namespace of its own: nothing made before
    billed = 0
    with httpx2.Client(timeout=120, headers={"authorization": f"Bearer {credential}", **headers}) as client:
        for k, messages in enumerate(requests):
            body = {"model": "gpt-4o", "messages": messages, **({"tools": tools} if tools else {})}
            reply = client.post(f"{urls[k % len(urls)]}/v1/chat/completions", json=body)
            reply.raise_for_status()
            billed += int(reply.headers.get("x-offload-summary-tokens") or 0)
            time.sleep(gap)
    wait_until(lambda: idle(urls), timeout=600, what="the last summaries")
    turns = without_refs(upstream.turns)
    summaries = without_refs([body for _, body, _ in upstream.summaries])
    return {
        "billed": billed,
        "bodies": turns,
        "turns": [json.loads(t) for t in turns],
        "summaries": [(turn, json.loads(body), path) for (turn, _, path), body in zip(upstream.summaries, summaries)],
    }


def figures(made: dict, requests: list[list[dict]], counter) -> dict:
    forwarded = [t["messages"] for t in made["turns"]]
    tokens = [message_tokens(items, counter) for items in forwarded]
    raw_tokens = [message_tokens(r, counter) for r in requests]
    calls = []
    for turn, body, path in made["summaries"]:
        items, call_tools = request_items(body, path)
        calls.append(metrics.SummaryCall(turn, items, call_tools, message_tokens(items, counter)))
    tools = [t.get("tools") for t in made["turns"]]
    switches = sum(1 for a, b in zip(forwarded, forwarded[1:]) if metrics.common_prefix(a, b) < len(a))
    raw_cost = metrics.cache_cost(requests, raw_tokens)
    return {
        "summary calls": len(calls),
        "billed": made["billed"],
        "prefix switches": switches,
        "forwarded/raw": sum(map(sum, tokens)) / sum(map(sum, raw_tokens)),
        "cache cost": metrics.cache_cost(forwarded, tokens, tools, summaries=calls) / raw_cost,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=66)
    parser.add_argument("--delays", default="0,1,3", help="summary delays, seconds")
    parser.add_argument("--replicas", default="1,2,3")
    parser.add_argument("--gap", type=float, default=0.3, help="seconds between turns")
    parser.add_argument("--max-total-tokens", type=int, default=20000)
    parser.add_argument("--trace", help="a trace id of ../shared/traces (default: a long one)")
    parser.add_argument("--synthetic", action="store_true", help="a synthetic history even with the traces there")
    parser.add_argument("--cluster", action="store_true", help="a 3-master Redis Cluster instead of one Redis")
    args = parser.parse_args()
    delays = [float(d) for d in args.delays.split(",")]
    counts = [int(n) for n in args.replicas.split(",")]
    name, messages, tools = conversation(args.turns, args.trace, args.synthetic)
    requests = turns_of(messages)[: args.turns]
    headers = {"X-Offload-Max-Total-Tokens": str(args.max_total_tokens)}
    counter = counter_for_encoding("o200k_base")
    print(machine())
    print(
        f"{name}: {len(requests)} turns, {sum(message_tokens(requests[-1], counter))} tokens at the last; "
        f"{args.gap} s between turns, max total {args.max_total_tokens} tokens, "
        f"{'a 3-master Redis Cluster' if args.cluster else 'one Redis'}"
    )
    redis = (RedisCluster() if args.cluster else RedisProcess()).start()
    upstream = Upstream()
    rows = []
    try:
        with (
            ServerThread(upstream) as up,
            replicas(max(counts), "--upstream", f"{up.url}/v1", "--redis-url", redis.url) as fleet,
        ):
            for delay in delays:
                upstream.delay = delay
                for n in counts:
                    made = run([p.url for p in fleet[:n]], upstream, requests, tools, args.gap, headers)
                    if n == counts[0]:
                        first = made
                    differ = sum(a != b for a, b in zip(made["bodies"], first["bodies"]))
                    rows.append((delay, n, {**figures(made, requests, counter), "differ": differ}))
    finally:
        redis.stop()
    print(
        f"{'delay s':>7} {'replicas':>8} {'summary calls':>13} {'billed':>7} {'prefix switches':>15} "
        f"{'forwarded/raw':>13} {'cache cost':>10} {f'bodies != {counts[0]} replica':>18}"
    )
    for delay, n, f in rows:
        print(
            f"{delay:>7g} {n:>8} {f['summary calls']:>13} {f['billed']:>7} {f['prefix switches']:>15} "
            f"{f['forwarded/raw']:>13.3f} {f['cache cost']:>10.3f} {f['differ']:>18}"
        )
    same = all(f == next(g for d, _, g in rows if d == delay) for delay, _, f in rows)
    print("equal across replica counts for every delay" if same else "NOT equal across replica counts")


if __name__ == "__main__":
    main()
