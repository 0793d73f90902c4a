"""Folding never stalls the proxy (issue 38): tool results alike in size and lines, whose diffs
are all too long to fold, cost a bounded plan and leave the event loop free.

The inputs, each with a seed of its own per request (no diff remembered from before):
- issue 38's request: 25 results of 1,950 lines drawn at random from 120 short lines
  (297 KB; about 5,800 tokens each, so each stays a fold base);
- the same lines shuffled: 17 results, each a permutation of the first one's lines;
- 6 results of 95 KB each (1,450 lines drawn from 120 long ones) with the tool-result
  threshold raised so they stay bases.

First the CPU time of planning each one in this process (`plan_compaction`), then, through a
real `serve` on the fake upstream, /healthz while issue 38's request is sent in chat and
Responses, and an ordinary 1.3 MB request of another tenant alone and while three issue-38
requests are planned at once.

    .venv/bin/python bench/fold_stall.py [--rounds 3]

Prints seconds of CPU per plan, answer times, and /healthz p50 / p99 / max in ms (target: p99 <= 100).
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from pathlib import Path

import httpx2
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import healthz_probe, machine, servers  # noqa: E402

from proxy.core.compaction import plan_compaction  # noqa: E402
from proxy.core.settings import OffloadSettings  # noqa: E402
from proxy.core.tokens import counter_for_model  # noqa: E402
from proxy.formats.chat import VIEW  # noqa: E402
from proxy.formats.responses import items_from_chat  # noqa: E402
from tests.harness.history import big_text, drawn_results, tool_history  # noqa: E402

RAISED = {"max_tool_message_tokens": 10_000_000}


def drawn(args: argparse.Namespace, seed: int) -> list[str]:
    return drawn_results(args.results, lines=args.lines, seed=seed)


def shuffled(args: argparse.Namespace, seed: int) -> list[str]:
    first = drawn_results(1, lines=args.lines, seed=seed)[0].split("\n")
    return ["\n".join(random.Random(seed * 100 + k).sample(first, k=len(first))) for k in range(17)]


def large(args: argparse.Namespace, seed: int) -> list[str]:
    pool = [f"{k:03d} a longer line of output, as a build or a test run prints it" for k in range(120)]
    rnd = random.Random(seed)
    return ["\n".join(rnd.choice(pool) for _ in range(args.lines * 3 // 4)) for _ in range(6)]


CASES = {
    "issue 38's request (results of lines drawn from 120)": (drawn, {}),
    "permutations (17 results, the same lines)": (shuffled, {}),
    "95 KB results, threshold raised (6 of 3/4 the lines, longer)": (large, RAISED),
}


def planning(args: argparse.Namespace) -> None:
    counter = counter_for_model("gpt-4o")
    for name, (make, settings) in CASES.items():
        cpu, folded = [], set()
        for seed in range(args.rounds):
            messages = tool_history(make(args, 1_000 + seed))
            for message in messages:
                counter.message(message)
            started = time.process_time()
            plan = plan_compaction(messages, VIEW, OffloadSettings(**settings), counter=counter, namespace="n" * 32)
            cpu.append(time.process_time() - started)
            folded.add(plan.folded)
        print(
            f"  plan of {name}: {min(cpu):.3f} s CPU at best, {max(cpu):.3f} s at worst; folded {sorted(folded)}",
            flush=True,
        )


def body(args: argparse.Namespace, fmt: str, seed: int) -> tuple[str, bytes]:
    messages = tool_history(drawn(args, seed + (500 if fmt == "responses" else 0)))
    if fmt == "responses":
        return "/responses", orjson.dumps({"model": "gpt-4o", "input": items_from_chat(messages)})
    return "/chat/completions", orjson.dumps({"model": "gpt-4o", "messages": messages})


def ordinary(megabytes: float, label: str) -> bytes:
    """Another tenant's request: distinct file views of 150 lines, `megabytes` MB in all."""
    views: list[str] = []
    while len(orjson.dumps(tool_history(views))) < megabytes * 1e6:
        views.append(big_text(f"{label}{len(views)}", 150))
    return orjson.dumps({"model": "gpt-4o", "messages": tool_history(views)})


def send(client: httpx2.Client, url: str, raw: bytes, key: str, fold: str = "on") -> tuple[int, float]:
    started = time.perf_counter()
    r = client.post(
        url,
        content=raw,
        headers={"authorization": f"Bearer {key}", "content-type": "application/json", "x-offload-fold": fold},
    )
    return r.status_code, time.perf_counter() - started


def served(args: argparse.Namespace) -> None:
    rounds = args.rounds
    with servers() as (_, proxy, _process), httpx2.Client(timeout=600) as client:
        base = proxy.removesuffix("/v1")
        for fmt in ("chat", "responses"):
            for fold in ("on", "off"):  # off: what the rest of the request costs
                with healthz_probe(base, f"/healthz during issue 38's request ({fmt}, folding {fold}) x {rounds}"):
                    for seed in range(rounds):
                        path, raw = body(args, fmt, 2_000 + seed + (100 if fold == "off" else 0))
                        code, seconds = send(client, f"{proxy}{path}", raw, "sk-fold-stall", fold)
                        print(
                            f"  {fmt}, folding {fold}: {len(raw) / 1e3:.0f} KB -> {code} in {seconds:.2f} s", flush=True
                        )
        other = ordinary(args.other_mb, "alone")
        code, alone = send(client, f"{proxy}/chat/completions", other, "sk-other-tenant")
        other = ordinary(args.other_mb, "meanwhile")  # as new to the proxy as the first
        print(f"  another tenant's {len(other) / 1e6:.1f} MB request alone: {code} in {alone:.2f} s", flush=True)
        answers: list[tuple[int, float]] = []

        def adversary(seed: int) -> None:
            with httpx2.Client(timeout=600) as own:
                path, raw = body(args, "chat", 3_000 + seed)
                answers.append(send(own, f"{proxy}{path}", raw, f"sk-fold-stall-{seed}"))

        with healthz_probe(base, "/healthz during three issue-38 requests at once and the other tenant's"):
            threads = [threading.Thread(target=adversary, args=(seed,)) for seed in range(3)]
            for thread in threads:
                thread.start()
            time.sleep(0.05)
            code, meanwhile = send(client, f"{proxy}/chat/completions", other, "sk-other-tenant")
            for thread in threads:
                thread.join()
        print(
            f"  three at once: {sorted(c for c, _ in answers)} in {max(s for _, s in answers):.2f} s; the other "
            f"tenant's request meanwhile: {code} in {meanwhile:.2f} s (alone {alone:.2f} s)",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--results", type=int, default=25, help="tool results in issue 38's request")
    parser.add_argument("--lines", type=int, default=1_950, help="lines of each")
    parser.add_argument("--other-mb", type=float, default=1.3, help="the other tenant's request, in MB")
    args = parser.parse_args()
    print(machine())
    print("planning, in this process:")
    planning(args)
    print("through serve:")
    served(args)


if __name__ == "__main__":
    main()
