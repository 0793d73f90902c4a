"""Large request bodies never stall the event loop: `/healthz` latency while bodies of tens of
MB (millions of small JSON objects, or a few huge strings) are sent back to back in all three
formats, through a real `serve` on the fake upstream.

    .venv/bin/python bench/large_bodies.py [--rounds 2]

Prints the bodies' sizes and answer times, then /healthz p50 / p99 / max in ms (target: p99 <= 100).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import httpx2
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import healthz_probe, machine, servers  # noqa: E402


def many_objects(fmt: str, messages: int, parts: int) -> tuple[str, bytes]:
    """`messages` messages of `parts` empty text parts each (the attack review's 52 MB body)."""
    if fmt == "responses":
        part = {"type": "input_text", "text": ""}
        body = {"model": "gpt-4o", "input": [{"role": "user", "content": [part] * parts} for _ in range(messages)]}
        return "/responses", orjson.dumps(body)
    roles = ("user", "assistant") if fmt == "messages" else ("user",)
    part = {"type": "text", "text": ""}
    body = {"model": "gpt-4o", "max_tokens": 16,
            "messages": [{"role": roles[i % len(roles)], "content": [part] * parts} for i in range(messages)]}
    return ("/messages" if fmt == "messages" else "/chat/completions"), orjson.dumps(body)


def huge_strings(fmt: str, mb: int) -> tuple[str, bytes]:
    """A few tool results of several MB each: few objects, many bytes."""
    text = ("line of tool output with some words 0123456789\n" * 200_000)[: 5 * 1024 * 1024]
    n = max(1, mb // 5)
    if fmt == "responses":
        items = [{"role": "user", "content": "go"}]
        for i in range(n):
            items += [{"type": "function_call", "call_id": f"c{i}", "name": "sh", "arguments": "{}"},
                      {"type": "function_call_output", "call_id": f"c{i}", "output": text}]
        return "/responses", orjson.dumps({"model": "gpt-4o", "input": items})
    if fmt == "messages":
        msgs = [{"role": "user", "content": "go"}]
        for i in range(n):
            msgs += [{"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "sh", "input": {}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": text}]}]
        return "/messages", orjson.dumps({"model": "gpt-4o", "max_tokens": 16, "messages": msgs})
    msgs = [{"role": "user", "content": "go"}]
    for i in range(n):
        msgs += [{"role": "assistant", "tool_calls": [{"id": f"c{i}", "type": "function",
                                                       "function": {"name": "sh", "arguments": "{}"}}]},
                 {"role": "tool", "tool_call_id": f"c{i}", "content": text}]
    return "/chat/completions", orjson.dumps({"model": "gpt-4o", "messages": msgs})


def plain_values(fmt: str, count: int) -> tuple[str, bytes]:
    """A short history beside a field the proxy does not read holding `count` bare values
    (empty strings and small numbers): no object for a parser to call back on."""
    padding = b"[" + b",".join([b'""', b"7"] * (count // 2)) + b"]"
    if fmt == "responses":
        path, head = "/responses", b'{"model":"gpt-4o","input":"hi","x_padding":'
    elif fmt == "messages":
        path, head = "/messages", b'{"model":"gpt-4o","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"x_padding":'
    else:
        path, head = "/chat/completions", b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"x_padding":'
    return path, head + padding + b"}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--messages", type=int, default=1999)
    parser.add_argument("--parts", type=int, default=1000)
    args = parser.parse_args()
    print(machine())
    bodies = []
    for fmt in ("chat", "responses", "messages"):
        bodies.append((f"{fmt}: {args.messages} messages x {args.parts} parts",
                       *many_objects(fmt, args.messages, args.parts)))
        bodies.append((f"{fmt}: 40 MB in 8 tool results", *huge_strings(fmt, 40)))
        bodies.append((f"{fmt}: 12 M bare values", *plain_values(fmt, 12_000_000)))
    with servers("--max-body-bytes", str(64 * 1024 * 1024)) as (_, proxy, _process):
        headers = {"authorization": "Bearer sk-bench-0000", "anthropic-version": "2023-06-01"}
        with httpx2.Client(timeout=600) as client, healthz_probe(proxy.removesuffix("/v1"), "/healthz while sending"):
            for _ in range(args.rounds):
                for name, path, raw in bodies:
                    t = time.perf_counter()
                    r = client.post(f"{proxy}{path}", content=raw, headers={**headers, "content-type": "application/json"})
                    print(f"  {name}: {len(raw) / 1e6:.1f} MB -> {r.status_code} "
                          f"in {time.perf_counter() - t:.2f} s ({r.headers.get('x-offload-action', '-')})", flush=True)


if __name__ == "__main__":
    main()
