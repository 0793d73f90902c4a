"""A 150K-token conversation built from real traces, sent to the proxy cold and then steady.

    .venv/bin/python bench/big_history.py [--tokens 150000] [--rounds 5] [--repeats 20] [--format both]

Each round starts a fresh proxy (embedded store, default settings) in front of the local fake
upstream, sends the conversation once (cold: nothing cached) and then `repeats` more times
(steady), and reads the proxy process's own CPU time (all threads, Linux schedstat) from
just before each request until shortly after its response, so that background work a request
leaves behind is counted as its own. The machine is shared and noisy: medians over rounds.

`--format both` (the default) sends the same conversation as a chat completion and as a
Responses request (its items converted as a Responses client sends them), round by round in
alternation, and prints the Responses path's steady per-turn CPU as a ratio of chat's (target:
within 10 %).
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
from proxy.formats.responses.from_chat import items_from_chat, tools_from_chat

ENDPOINTS = {"chat": "chat/completions", "responses": "responses"}

SETTLE = 0.25


def build(tokens: int, traces_file: Path = SHARED / "traces" / "traces.jsonl") -> dict:
    traces = sorted((json.loads(line) for line in traces_file.open()), key=lambda t: -len(json.dumps(t["messages"])))
    counter = counter_for_model("gpt-4o")
    base = traces[0]
    messages = list(base["messages"])
    total = counter.messages(messages)
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
    return {"model": chat["model"], "input": items_from_chat(chat["messages"]), "tools": tools_from_chat(chat["tools"]),
            "store": False}


def one_round(body: bytes, repeats: int, endpoint: str) -> tuple[float, float, float, httpx2.Response]:
    """(cold CPU, second request CPU, back-to-back steady mean CPU), in seconds."""
    headers = {"authorization": "Bearer sk-bench", "content-type": "application/json"}
    with servers() as (_, proxied, proc), httpx2.Client(timeout=120) as client:
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
    return cold, second, steady, r


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=150_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20, help="steady requests per round")
    parser.add_argument("--traces", type=Path, default=SHARED / "traces" / "traces.jsonl")
    parser.add_argument("--format", choices=("chat", "responses", "both"), default="both")
    args = parser.parse_args()
    print(machine())
    chat = build(args.tokens, args.traces)
    bodies = {"chat": json.dumps(chat).encode(), "responses": json.dumps(as_responses(chat)).encode()}
    formats = ["chat", "responses"] if args.format == "both" else [args.format]
    tokens = counter_for_model("gpt-4o").messages(chat["messages"])
    rounds: dict[str, list] = {name: [] for name in formats}
    for _ in range(args.rounds):  # alternating, so that both formats see the same machine load
        for name in formats:
            rounds[name].append(one_round(bodies[name], args.repeats, ENDPOINTS[name]))
    steadies = {}
    for name in formats:
        cold, second, steady = (statistics.median(r[i] for r in rounds[name]) for i in range(3))
        steadies[name] = steady
        last = rounds[name][-1][3]
        print(f"[{name}] conversation: {len(bodies[name]) / 1e6:.2f} MB, {tokens} tokens; action "
              f"{last.headers['x-offload-action']}, forwarded {last.headers['x-offload-tokens-after']} tokens")
        print(f"[{name}] proxy CPU, median of {args.rounds} rounds: cold {cold * 1e3:.1f} ms | second request "
              f"{second * 1e3:.1f} ms ({second / cold:.3f} of cold) | steady, {args.repeats} back to back: "
              f"{steady * 1e3:.1f} ms each ({steady / cold:.3f} of cold)")
    if len(steadies) == 2:
        print(f"responses/chat steady per-turn CPU: {steadies['responses'] / steadies['chat']:.3f} "
              f"(target <= 1.10)")


if __name__ == "__main__":
    main()
