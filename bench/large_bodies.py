"""Large request bodies never stall the event loop: `/healthz` latency while bodies of tens of
MB (millions of small JSON objects, or a few huge strings) are sent back to back in all three
formats, through a real `serve` on the fake upstream. Then, each case with its own probe:

- compressed bodies small on the wire that inflate to more than `--max-body-bytes` (a 413 once
  decoded: br, gzip, zstd), from `--clients` clients at once, on `/v1/offload` and on managed routes;
- an emulated `POST /v1/responses/compact` of a history holding one message of 3, 12, 60 MB;
- `POST /v1/responses/input_tokens` of a small body carrying the token of the largest one
  (what it stands for is expanded before it goes upstream), from `--clients` clients;
- an emulated threshold compaction (`/v1/responses` with `context_management`) of a history
  holding one large message, streamed and not.

    .venv/bin/python bench/large_bodies.py [--rounds 2] [--compact-mb 3,12,60]

Prints the bodies' sizes and answer times, then /healthz p50 / p99 / max in ms (target: p99 <= 100).
"""

from __future__ import annotations

import argparse
import gzip
import sys
import threading
import time
from pathlib import Path

import brotli
import httpx2
import orjson
import zstandard

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
    body = {
        "model": "gpt-4o",
        "max_tokens": 16,
        "messages": [{"role": roles[i % len(roles)], "content": [part] * parts} for i in range(messages)],
    }
    return ("/messages" if fmt == "messages" else "/chat/completions"), orjson.dumps(body)


def huge_strings(fmt: str, mb: int) -> tuple[str, bytes]:
    """A few tool results of several MB each: few objects, many bytes."""
    text = ("line of tool output with some words 0123456789\n" * 200_000)[: min(5, mb) * 1024 * 1024]
    n = max(1, mb // 5)
    if fmt == "responses":
        items = [{"role": "user", "content": "go"}]
        for i in range(n):
            items += [
                {"type": "function_call", "call_id": f"c{i}", "name": "sh", "arguments": "{}"},
                {"type": "function_call_output", "call_id": f"c{i}", "output": text},
            ]
        return "/responses", orjson.dumps({"model": "gpt-4o", "input": items})
    if fmt == "messages":
        msgs = [{"role": "user", "content": "go"}]
        for i in range(n):
            msgs += [
                {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "sh", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": text}]},
            ]
        return "/messages", orjson.dumps({"model": "gpt-4o", "max_tokens": 16, "messages": msgs})
    msgs = [{"role": "user", "content": "go"}]
    for i in range(n):
        msgs += [
            {
                "role": "assistant",
                "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": "sh", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": f"c{i}", "content": text},
        ]
    return "/chat/completions", orjson.dumps({"model": "gpt-4o", "messages": msgs})


def plain_values(fmt: str, count: int) -> tuple[str, bytes]:
    """A short history beside a field the proxy does not read holding `count` bare values
    (empty strings and small numbers): no object for a parser to call back on."""
    padding = b"[" + b",".join([b'""', b"7"] * (count // 2)) + b"]"
    if fmt == "responses":
        path, head = "/responses", b'{"model":"gpt-4o","input":"hi","x_padding":'
    elif fmt == "messages":
        path, head = (
            "/messages",
            b'{"model":"gpt-4o","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"x_padding":',
        )
    else:
        path, head = "/chat/completions", b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"x_padding":'
    return path, head + padding + b"}"


COMPRESS = {
    "br": lambda raw: brotli.compress(raw, quality=11),
    "gzip": lambda raw: gzip.compress(raw, 9),
    "zstd": lambda raw: zstandard.ZstdCompressor(level=19).compress(raw),
}


def inflating(path: str, inflated: int, coding: str) -> bytes:
    """A body of `inflated` bytes once decoded (mostly one string of spaces), compressed by
    `coding`: a few hundred bytes (br), a few KB (zstd), tens of KB (gzip)."""
    head = b'{"model":"gpt-4o","max_tokens":16,' if path == "/messages" else b'{"model":"gpt-4o",'
    field = (
        b'"input":[{"role":"user","content":"' if path == "/responses" else b'"messages":[{"role":"user","content":"'
    )
    return COMPRESS[coding](head + field + b" " * inflated + b'"}]}')


def one_large_message(mb: float, *, turns: int = 1) -> list[dict]:
    """A Responses history whose task is one user message of `mb` MB (a pasted log), then
    `turns` short exchanges. Every compaction keeps the task: its record holds the message."""
    line = "a line of pasted log output with words, numbers 0123456789 and symbols {}[]()\n"
    text = (line * (int(mb * 1024 * 1024) // len(line) + 1))[: int(mb * 1024 * 1024)]
    items: list[dict] = [{"role": "user", "content": f"Task: read this log and fix what it reports.\n{text}"}]
    for i in range(turns):
        items += [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": f"Step {i} done."}]},
            {"role": "user", "content": f"Go on with step {i + 1}."},
        ]
    return items


def show(name: str, raw_size: int, r: httpx2.Response, seconds: float) -> None:
    print(
        f"  {name}: {raw_size / 1e6:.3g} MB sent -> {r.status_code} in {seconds:.2f} s "
        f"({r.headers.get('x-offload-action', '-')})",
        flush=True,
    )


def post(client: httpx2.Client, url: str, name: str, raw: bytes, headers: dict) -> httpx2.Response:
    t = time.perf_counter()
    r = client.post(url, content=raw, headers={**headers, "content-type": "application/json"})
    show(name, len(raw), r, time.perf_counter() - t)
    return r


def from_clients(clients: int, send) -> list[httpx2.Response]:
    """`send(client)` from `clients` threads at once, each with its own connection."""
    answers: list[httpx2.Response] = []

    def one() -> None:
        with httpx2.Client(timeout=600) as client:
            answers.append(send(client))

    threads = [threading.Thread(target=one) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def compressed_cases(proxy: str, headers: dict, args: argparse.Namespace) -> None:
    inflated = args.inflate_mb * 1024 * 1024
    for path in ("/offload", "/chat/completions", "/responses", "/messages"):
        for coding in COMPRESS:
            raw = inflating(path, inflated, coding)
            with healthz_probe(
                proxy.removesuffix("/v1"),
                f"/healthz during {path} {coding} ({len(raw)} B -> {args.inflate_mb} MB) x {args.clients} clients",
            ):
                t = time.perf_counter()
                answers = from_clients(
                    args.clients,
                    lambda client: client.post(
                        f"{proxy}{path}",
                        content=raw,
                        headers={**headers, "content-type": "application/json", "content-encoding": coding},
                    ),
                )
                codes = sorted({r.status_code for r in answers})
                print(
                    f"  {path} {coding}: {len(answers)} bodies of {len(raw)} B -> {codes} "
                    f"in {time.perf_counter() - t:.2f} s",
                    flush=True,
                )


def compact_cases(proxy: str, headers: dict, args: argparse.Namespace) -> None:
    base = proxy.removesuffix("/v1")
    mid = args.compact_mb[min(1, len(args.compact_mb) - 1)]  # input_tokens and the threshold compaction's size
    tokens: dict[float, str] = {}
    with httpx2.Client(timeout=600) as client:
        for mb in args.compact_mb:
            raw = orjson.dumps({"model": "gpt-4o", "input": one_large_message(mb)})
            with healthz_probe(base, f"/healthz during an emulated compact of a {mb} MB message"):
                r = post(client, f"{proxy}/responses/compact", f"compact of a {mb} MB message", raw, headers)
            if r.status_code == 200:
                tokens[mb] = r.json()["output"][-1]["encrypted_content"]
        if mid in tokens:
            body = orjson.dumps(
                {
                    "model": "gpt-4o",
                    "input": [
                        {"type": "compaction", "encrypted_content": tokens[mid]},
                        {"role": "user", "content": "next"},
                    ],
                }
            )
            with healthz_probe(
                base,
                f"/healthz during input_tokens carrying the {mid} MB record's token "
                f"({len(body)} B) x {args.clients} clients",
            ):
                t = time.perf_counter()
                answers = from_clients(
                    args.clients,
                    lambda c: c.post(
                        f"{proxy}/responses/input_tokens",
                        content=body,
                        headers={**headers, "content-type": "application/json"},
                    ),
                )
                print(
                    f"  input_tokens: {len(answers)} x {len(body)} B -> {sorted({r.status_code for r in answers})} "
                    f"in {time.perf_counter() - t:.2f} s",
                    flush=True,
                )
        for stream in (False, True):
            raw = orjson.dumps(
                {
                    "model": "gpt-4o",
                    "stream": stream,
                    "input": one_large_message(mid, turns=12),
                    "context_management": [{"type": "compaction", "compact_threshold": 1000}],
                }
            )
            with healthz_probe(
                base, f"/healthz during a threshold compaction of a {mid} MB message{' (streamed)' if stream else ''}"
            ):
                post(client, f"{proxy}/responses", f"threshold compaction, {mid} MB, stream={stream}", raw, headers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--messages", type=int, default=1999)
    parser.add_argument("--parts", type=int, default=1000)
    parser.add_argument("--huge-mb", type=int, default=40, help="the tool results' total size")
    parser.add_argument("--values", type=int, default=12_000_000, help="the bare values' count")
    parser.add_argument("--clients", type=int, default=8, help="clients sending at once (compressed, input_tokens)")
    parser.add_argument("--inflate-mb", type=int, default=80, help="what a compressed body inflates to")
    parser.add_argument("--max-body-mb", type=int, default=64, help="the proxy's --max-body-bytes, in MB")
    parser.add_argument(
        "--compact-mb",
        type=lambda v: [float(x) for x in v.split(",")],
        default=[3, 12, 60],
        help="the large message's sizes, comma-separated",
    )
    parser.add_argument("--only", choices=("sending", "compressed", "compact"), help="one group of cases")
    args = parser.parse_args()
    print(machine())
    bodies = []
    for fmt in ("chat", "responses", "messages"):
        bodies.append(
            (f"{fmt}: {args.messages} messages x {args.parts} parts", *many_objects(fmt, args.messages, args.parts))
        )
        bodies.append(
            (f"{fmt}: {args.huge_mb} MB in {max(1, args.huge_mb // 5)} tool results", *huge_strings(fmt, args.huge_mb))
        )
        bodies.append((f"{fmt}: {args.values:,} bare values", *plain_values(fmt, args.values)))
    with servers("--max-body-bytes", str(args.max_body_mb * 1024 * 1024)) as (_, proxy, _process):
        headers = {"authorization": "Bearer sk-bench-0000", "anthropic-version": "2023-06-01"}
        if args.only in (None, "sending"):
            with (
                httpx2.Client(timeout=600) as client,
                healthz_probe(proxy.removesuffix("/v1"), "/healthz while sending"),
            ):
                for _ in range(args.rounds):
                    for name, path, raw in bodies:
                        post(client, f"{proxy}{path}", name, raw, headers)
        if args.only in (None, "compressed"):
            compressed_cases(proxy, headers, args)
        if args.only in (None, "compact"):
            compact_cases(proxy, headers, args)


if __name__ == "__main__":
    main()
