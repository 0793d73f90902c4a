"""A 150K-token conversation built from real traces, sent to the proxy cold and then steady.

    .venv/bin/python bench/big_history.py [--tokens 150000] [--rounds 5] [--repeats 20] [--format all]
                                          [--sweep] [--store sqlite|redis]

Each round starts a fresh proxy (embedded store, default settings) in front of the local fake
upstream, sends the conversation once (cold: nothing cached) and then `repeats` more times
(steady), and reads the proxy process's own CPU time (all threads, Linux schedstat) from
just before each request until shortly after its response, so that background work a request
leaves behind is counted as its own. The machine is shared and noisy: medians over rounds.

`--format all` (the default) sends the same conversation as a chat completion, as a Responses
request and as an Anthropic Messages request (converted as those clients send them), round by
round in alternation, and prints each other format's steady per-turn CPU as a ratio of chat's
(target: within 10 %). `both`: chat and Responses.

`--sweep [SIZES]` measures the sizes of SWEEP (10 K to 2 M tokens), or those given, instead of `--tokens`: per size and
format the cold and steady CPU, the proxy's resident memory after the steady requests, and the
slope (steady CPU added per 100 K tokens from one size to the next: constant when the cost grows
linearly). `--store redis` runs the proxy on a Redis of its own (`redis-server` on PATH)
instead of the embedded store.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import httpx2
from common import SHARED, cpu_seconds, machine, servers

from proxy.core.tokens import counter_for_model
from proxy.formats.messages import body_from_chat
from proxy.formats.responses import items_from_chat, tools_from_chat

ENDPOINTS = {"chat": "chat/completions", "responses": "responses", "messages": "messages"}
FORMATS = ("chat", "responses", "messages")

SETTLE = 0.25
SWEEP = (10_000, 50_000, 150_000, 500_000, 1_000_000, 2_000_000)


def build(tokens: int, traces_file: Path = SHARED / "traces" / "traces.jsonl") -> dict:
    traces = sorted((json.loads(line) for line in traces_file.open()), key=lambda t: -len(json.dumps(t["messages"])))
    counter = counter_for_model("gpt-4o")
    base = traces[0]
    messages, total = [], 0
    for m in base["messages"]:  # the longest trace, or as much of it as the size takes
        if total >= tokens and len(messages) > 2:
            break
        messages.append(m)
        total += counter.message(m)
    donors = iter(traces[1:] * 1000)
    while total < tokens:
        for m in next(donors)["messages"][2:]:
            messages.append(m)
            total += counter.message(m)
            if total >= tokens:
                break
    while messages[-1]["role"] == "assistant":
        messages.pop()
    return {"model": "gpt-4o", "messages": messages, "tools": base.get("tools") or []}


def as_responses(chat: dict) -> dict:
    return {
        "model": chat["model"],
        "input": items_from_chat(chat["messages"]),
        "tools": tools_from_chat(chat["tools"]),
        "store": False,
    }


def as_messages(chat: dict) -> dict:
    return body_from_chat(chat["messages"], model="claude-sonnet-4-5", tools=chat["tools"])


def as_format(chat: dict, name: str) -> dict:
    return chat if name == "chat" else as_responses(chat) if name == "responses" else as_messages(chat)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def one_round(
    body: bytes, repeats: int, endpoint: str, proxy_args: tuple[str, ...] = ()
) -> tuple[float, float, float, httpx2.Response, float]:
    """(cold CPU, second request CPU, back-to-back steady mean CPU in seconds, the last answer,
    the proxy's RSS in MiB after them)."""
    headers = {"authorization": "Bearer sk-bench", "content-type": "application/json"}
    with servers(*proxy_args) as (_, proxied, proc), httpx2.Client(timeout=300) as client:
        client.get(proxied.replace("/v1", "/healthz"))

        def measured(count: int, settle: float) -> float:
            before = cpu_seconds(proc.pid)
            for _ in range(count):
                r = client.post(f"{proxied}/{endpoint}", content=body, headers=headers)
                assert r.status_code == 200, r.text
            time.sleep(settle)  # work a request leaves behind (events, collection) counts as its own
            return (cpu_seconds(proc.pid) - before) / count

        cold = measured(1, SETTLE)
        second = measured(1, SETTLE)
        steady = measured(repeats, SETTLE)
        r = client.post(f"{proxied}/{endpoint}", content=body, headers=headers)
        rss = rss_mib(proc.pid)
    return cold, second, steady, r, rss


def measure(
    chat: dict, formats: list[str], *, rounds: int, repeats: int, proxy_args: tuple[str, ...]
) -> dict[str, tuple[float, float, float, httpx2.Response, float]]:
    """Per format: the median cold, second and steady CPU over `rounds`, the last answer, the
    median RSS. Formats alternate round by round, so that both see the same machine load."""
    bodies = {name: json.dumps(as_format(chat, name)).encode() for name in formats}
    measured: dict[str, list] = {name: [] for name in formats}
    for _ in range(rounds):
        for name in formats:
            measured[name].append(one_round(bodies[name], repeats, ENDPOINTS[name], proxy_args))
    return {
        name: (
            *(statistics.median(r[i] for r in runs) for i in range(3)),
            runs[-1][3],
            statistics.median(r[4] for r in runs),
        )
        for name, runs in measured.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=150_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20, help="steady requests per round")
    parser.add_argument("--traces", type=Path, default=SHARED / "traces" / "traces.jsonl")
    parser.add_argument("--format", choices=(*FORMATS, "both", "all"), default="all")
    parser.add_argument(
        "--sweep",
        nargs="?",
        const=",".join(map(str, SWEEP)),
        default=None,
        metavar="SIZES",
        help="these sizes in tokens (comma-separated; default 10 K to 2 M) instead of --tokens",
    )
    parser.add_argument("--store", choices=("sqlite", "redis"), default="sqlite")
    args = parser.parse_args()
    print(machine())
    formats = (
        list(FORMATS) if args.format == "all" else ["chat", "responses"] if args.format == "both" else [args.format]
    )
    redis = None
    proxy_args: tuple[str, ...] = ()
    if args.store == "redis":
        from tests.harness.servers import RedisProcess

        redis = RedisProcess().start()
        proxy_args = ("--redis-url", redis.url)
        print(f"store: Redis at {redis.url}")
    try:
        if args.sweep:
            sweep(args, formats, proxy_args)
        else:
            single(args, formats, proxy_args)
    finally:
        if redis is not None:
            redis.stop()


def single(args: argparse.Namespace, formats: list[str], proxy_args: tuple[str, ...]) -> None:
    chat = build(args.tokens, args.traces)
    tokens = counter_for_model("gpt-4o").messages(chat["messages"])
    results = measure(chat, formats, rounds=args.rounds, repeats=args.repeats, proxy_args=proxy_args)
    for name, (cold, second, steady, last, rss) in results.items():
        size = len(json.dumps(as_format(chat, name))) / 1e6
        print(
            f"[{name}] conversation: {size:.2f} MB, {tokens} tokens; action "
            f"{last.headers['x-offload-action']}, forwarded {last.headers['x-offload-tokens-after']} tokens"
        )
        print(
            f"[{name}] proxy CPU, median of {args.rounds} rounds: cold {cold * 1e3:.1f} ms | second request "
            f"{second * 1e3:.1f} ms ({second / cold:.3f} of cold) | steady, {args.repeats} back to back: "
            f"{steady * 1e3:.1f} ms each ({steady / cold:.3f} of cold) | RSS {rss:.0f} MiB"
        )
    for name in [n for n in results if n != "chat" and "chat" in results]:
        print(f"{name}/chat steady per-turn CPU: {results[name][2] / results['chat'][2]:.3f} (target <= 1.10)")


def sweep(args: argparse.Namespace, formats: list[str], proxy_args: tuple[str, ...]) -> None:
    counter = counter_for_model("gpt-4o")
    print(
        f"{'format':9} {'tokens':>9} {'messages':>8} {'MB':>6} {'cold ms':>8} {'steady ms':>9} "
        f"{'RSS MiB':>7} {'slope ms/100K':>13}"
    )
    previous: dict[str, tuple[int, float]] = {}
    for size in sorted({int(n) for n in args.sweep.split(",")}):
        chat = build(size, args.traces)
        tokens = counter.messages(chat["messages"])
        results = measure(chat, formats, rounds=args.rounds, repeats=args.repeats, proxy_args=proxy_args)
        for name, (cold, _, steady, _, rss) in results.items():
            mb = len(json.dumps(as_format(chat, name))) / 1e6
            slope = ""
            if name in previous and previous[name][0] < tokens:
                before, spent = previous[name]
                slope = f"{(steady - spent) * 1e3 / ((tokens - before) / 100_000):.2f}"
            previous[name] = (tokens, steady)
            print(
                f"{name:9} {tokens:>9} {len(chat['messages']):>8} {mb:>6.2f} {cold * 1e3:>8.1f} "
                f"{steady * 1e3:>9.1f} {rss:>7.0f} {slope:>13}",
                flush=True,
            )
        for name in [n for n in results if n != "chat" and "chat" in results]:
            print(f"{'':9} {name}/chat steady: {results[name][2] / results['chat'][2]:.3f}")


if __name__ == "__main__":
    main()
