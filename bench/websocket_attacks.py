"""The Responses WebSocket mode under attack: `/healthz` latency and the proxy's memory while
clients send what costs the worker most per byte on the wire.

    .venv/bin/python bench/websocket_attacks.py [--campaigns bomb,warmup,items,held] [--frames 15] [--mb 60]

- bomb: one connection sends `--frames` text frames of `--mb` MiB of spaces each. With
  permessage-deflate negotiated (the client offers it, as Codex and the SDKs do) each is ~60 KB
  on the wire and the server inflates it; declined (the proxy now), the client sends every byte.
- warmup: `--clients` connections each send one `generate: false` create of `--items` small
  input items (446 K: 13 MB of JSON, ~32 KB deflated), then stay open: what the proxy holds.
- items: the same frame with `generate` left out (a create run through the managed route).
- held: the same warm-ups within `--max-messages`: 20,000 items of `--parts` empty parts each.

The proxy runs with `--max-messages 20000` (the default before it was raised to 100,000 for long
sessions), so the figures compare with earlier runs: warmup and items are refused past it.
- http: the bomb's class over HTTP, for comparison: `--frames` bodies of `--mb` MiB of spaces
  POSTed to `/v1/responses` as they are, then as many gzip-compressed (~60 KB each).

Each campaign has its own `/healthz` probe (every 20 ms from a thread: p50 / p99 / max, target
p99 <= 100 ms) and prints the proxy's RSS before, at its peak, while the connections are open
and 2 s after they closed, what each frame was answered with, and the CPU time of the proxy's
event-loop thread (what every other connection waits for) and of all its threads: on a machine
other work is loading, the CPU times compare runs where the latencies cannot.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import sys
import threading
import time
import zlib
from pathlib import Path

import httpx2
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_seconds, healthz_probe, machine, servers

AUTH = {"authorization": "Bearer sk-made-up-bench"}  # a made-up key is enough to upgrade


def loop_cpu_seconds(pid: int) -> float:
    """CPU time of the process's main thread, where uvicorn runs the event loop."""
    return int(Path(f"/proc/{pid}/task/{pid}/schedstat").read_text().split()[0]) / 1e9


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


class Peak:
    """The process's largest RSS while the block runs, sampled every 20 ms."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._done = pid, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._sample)

    def _sample(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, rss_mib(self.pid))
            time.sleep(0.02)

    def __enter__(self) -> "Peak":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


def deflated(payload: bytes) -> int:
    """About what permessage-deflate makes of `payload` on the wire."""
    enc = zlib.compressobj(wbits=-15, memLevel=5)
    return len(enc.compress(payload) + enc.flush(zlib.Z_SYNC_FLUSH)) - 4


async def answer_of(ws) -> str:
    """What the server answered a frame with: an event's type / status / code, or the close."""
    try:
        while True:
            event = json.loads(await asyncio.wait_for(ws.recv(), 120))
            if event["type"] == "error":
                return f"error {event['status']} {event['error']['code']}"
            if event["type"] in ("response.completed", "response.incomplete", "response.failed"):
                return event["type"]
    except ConnectionClosed as exc:
        return f"closed {exc.rcvd.code if exc.rcvd else 1006}"
    except asyncio.TimeoutError:
        return "no answer in 120 s"


def negotiated(ws) -> str:
    names = [type(e).__name__ for e in ws.protocol.extensions]
    return ", ".join(names) or "no extension (uncompressed)"


async def bomb(ws_url: str, frames: int, mb: int) -> list[str]:
    payload = " " * (mb * 1024 * 1024)
    answers = []
    ws = await connect(ws_url, additional_headers=AUTH, max_size=None, compression="deflate")
    print(
        f"  negotiated: {negotiated(ws)}; a frame is {mb} MiB, ~{deflated(payload.encode()) / 1e3:.0f} KB deflated",
        flush=True,
    )
    try:
        for _ in range(frames):
            try:
                await ws.send(payload)
            except ConnectionClosed as exc:
                answers.append(f"closed {exc.rcvd.code if exc.rcvd else 1006}")
                break
            answers.append(await answer_of(ws))
            if answers[-1].startswith("closed"):
                # a client reconnects and goes on, as an attacker would
                await ws.close()
                ws = await connect(ws_url, additional_headers=AUTH, max_size=None, compression="deflate")
    finally:
        await ws.close()
    return answers


def http_bombs(base: str, frames: int, mb: int) -> list[str]:
    payload = b" " * (mb * 1024 * 1024)
    packed = gzip.compress(payload, 6)
    print(f"  a body is {mb} MiB, {len(packed) / 1e3:.0f} KB gzipped", flush=True)
    answers = []
    with httpx2.Client(timeout=120, headers=AUTH) as client:
        for body, coding in [(payload, None)] * frames + [(packed, "gzip")] * frames:
            headers = {"content-type": "application/json", **({"content-encoding": coding} if coding else {})}
            r = client.post(f"{base}/responses", content=body, headers=headers)
            answers.append(f"{coding or 'plain'} {r.status_code} {r.json()['error']['code']}")
    return answers


def items_frame(items: int, generate: bool | None, parts: int = 0) -> str:
    content: str | list = [{"type": "input_text", "text": ""}] * parts if parts else ""
    event: dict = {
        "type": "response.create",
        "model": "gpt-4o",
        "store": False,
        "input": [{"role": "user", "content": content}] * items,
    }
    if generate is not None:
        event["generate"] = generate
    return json.dumps(event, separators=(",", ":"))


async def warm_ups(
    ws_url: str, *, clients: int, items: int, generate: bool | None, pid: int, parts: int = 0
) -> tuple[list[str], float]:
    frame = items_frame(items, generate, parts)
    print(
        f"  {clients} connections, a frame of {items} items: {len(frame) / 1e6:.1f} MB, "
        f"~{deflated(frame.encode()) / 1e3:.0f} KB deflated",
        flush=True,
    )
    sockets = [
        await connect(ws_url, additional_headers=AUTH, max_size=None, compression="deflate") for _ in range(clients)
    ]
    try:
        await asyncio.gather(*(ws.send(frame) for ws in sockets))
        answers = list(await asyncio.gather(*(answer_of(ws) for ws in sockets)))
        await asyncio.sleep(1)
        held = rss_mib(pid)
    finally:
        await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)
    return answers, held


def summary(answers: list[str]) -> str:
    counts: dict[str, int] = {}
    for a in answers:
        counts[a] = counts.get(a, 0) + 1
    return ", ".join(f"{n} x {a}" for a, n in counts.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--campaigns", default="bomb,warmup,items,held,http")
    parser.add_argument("--frames", type=int, default=15)
    parser.add_argument("--mb", type=int, default=60)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--items", type=int, default=446_000)
    parser.add_argument("--parts", type=int, default=20)
    args = parser.parse_args()
    print(machine())
    with servers("--max-messages", "20000") as (_, base, proxy):
        ws_url = base.replace("http://", "ws://", 1) + "/responses"
        health = base.removesuffix("/v1")
        time.sleep(2)
        idle = loop_cpu_seconds(proxy.pid)
        with healthz_probe(health, label="  /healthz idle") as probes:
            time.sleep(5)
        per_probe = (loop_cpu_seconds(proxy.pid) - idle) / max(1, len(probes))
        print(f"  the event loop's CPU per /healthz probe, idle: {per_probe * 1e3:.2f} ms", flush=True)
        for campaign in args.campaigns.split(","):
            time.sleep(2)
            before = rss_mib(proxy.pid)
            print(f"{campaign}:", flush=True)
            held = None
            loop_cpu, all_cpu = loop_cpu_seconds(proxy.pid), cpu_seconds(proxy.pid)
            with Peak(proxy.pid) as peak, healthz_probe(health, label=f"  /healthz during {campaign}") as probes:
                t = time.perf_counter()
                if campaign == "bomb":
                    answers = asyncio.run(bomb(ws_url, args.frames, args.mb))
                elif campaign == "http":
                    answers = http_bombs(base, args.frames, args.mb)
                elif campaign == "held":
                    answers, held = asyncio.run(
                        warm_ups(
                            ws_url, clients=args.clients, items=20_000, generate=False, pid=proxy.pid, parts=args.parts
                        )
                    )
                else:
                    answers, held = asyncio.run(
                        warm_ups(
                            ws_url,
                            clients=args.clients,
                            items=args.items,
                            generate=False if campaign == "warmup" else None,
                            pid=proxy.pid,
                        )
                    )
                seconds = time.perf_counter() - t
            time.sleep(2)
            loop_cpu, all_cpu = loop_cpu_seconds(proxy.pid) - loop_cpu, cpu_seconds(proxy.pid) - all_cpu
            attack = max(0.0, loop_cpu - len(probes) * per_probe)  # less what answering the probes took
            print(
                f"  answers: {summary(answers)} in {seconds:.1f} s; proxy CPU: event loop {loop_cpu:.2f} s, "
                f"{attack / len(answers) * 1e3:.0f} ms per frame or body besides the probes; all threads "
                f"{all_cpu:.2f} s"
            )
            print(
                f"  proxy RSS: {before:.0f} MiB before, peak {peak.peak:.0f}"
                + (f", {held:.0f} while open" if held is not None else "")
                + f", {rss_mib(proxy.pid):.0f} 2 s after close",
                flush=True,
            )


if __name__ == "__main__":
    main()
