"""The Responses WebSocket mode: a turn's latency over WebSocket vs the same turn over HTTP, and
the memory 100 open WebSocket sessions hold in the proxy.

    .venv/bin/python bench/websocket.py [--turns 200] [--sessions 100] [--history 20]

The fake upstream and the proxy run as separate processes (uvicorn, uvloop, httptools) on
loopback. Latency: the same small streamed Responses turn, `--turns` times back to back, over
HTTP (httpx2, keep-alive, the whole SSE stream read) and over one WebSocket (`response.create`
until `response.completed`); then a conversation of `--history` turns, HTTP resending the whole
history each turn, the WebSocket sending `previous_response_id` and the new item. Memory: the
proxy's RSS before and after `--sessions` connections, each holding a 2-turn chain.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

import httpx2
from common import machine, servers
from websockets.asyncio.client import connect

AUTH = {"authorization": "Bearer sk-bench"}
TURN = {"model": "gpt-4o", "store": False, "input": "hi"}


async def http_turn(client: httpx2.AsyncClient, base: str, body: dict) -> dict:
    completed = None
    async with client.stream("POST", f"{base}/responses", json={**body, "stream": True}) as r:
        assert r.status_code == 200, r.status_code
        async for line in r.aiter_lines():
            if line.startswith("data:") and '"response.completed"' in line:
                completed = json.loads(line[5:])["response"]
    assert completed is not None
    return completed


async def ws_turn(ws, body: dict) -> dict:
    await ws.send(json.dumps({"type": "response.create", **body}))
    while True:
        event = json.loads(await ws.recv())
        if event["type"] == "response.completed":
            return event["response"]
        assert event["type"] != "error", event


def ws_base(base: str) -> str:
    return base.replace("http://", "ws://", 1) + "/responses"


async def latency(base: str, turns: int) -> tuple[list[float], list[float]]:
    http, ws_times = [], []
    async with httpx2.AsyncClient(timeout=30, headers=AUTH) as client:
        for i in range(turns + 10):  # 10 warm-up turns
            t = time.perf_counter()
            await http_turn(client, base, TURN)
            if i >= 10:
                http.append(time.perf_counter() - t)
    async with connect(ws_base(base), additional_headers=AUTH, max_size=None) as ws:
        for i in range(turns + 10):
            t = time.perf_counter()
            await ws_turn(ws, TURN)
            if i >= 10:
                ws_times.append(time.perf_counter() - t)
    return http, ws_times


def user(text: str) -> dict:
    return {"type": "message", "role": "user", "content": text}


async def conversation(base: str, turns: int) -> tuple[float, float]:
    """Seconds for a `turns`-turn conversation: HTTP with the whole history, WebSocket incremental."""
    filler = "lorem ipsum " * 400  # ~1,200 tokens a turn
    async with httpx2.AsyncClient(timeout=30, headers=AUTH) as client:
        history: list = []
        t = time.perf_counter()
        for i in range(turns):
            history.append(user(f"{i} {filler}"))
            done = await http_turn(client, base, {**TURN, "input": history})
            history.extend(done["output"])
        http = time.perf_counter() - t
    async with connect(ws_base(base), additional_headers=AUTH, max_size=None) as ws:
        previous = None
        t = time.perf_counter()
        for i in range(turns):
            body = {**TURN, "input": [user(f"{i} {filler}")]}
            if previous:
                body["previous_response_id"] = previous
            previous = (await ws_turn(ws, body))["id"]
        ws_seconds = time.perf_counter() - t
    return http, ws_seconds


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def sessions(base: str, pid: int, n: int) -> tuple[int, int]:
    await asyncio.sleep(0.5)
    before = rss_kib(pid)
    sockets = []
    try:
        for _ in range(n):
            ws = await connect(ws_base(base), additional_headers=AUTH, max_size=None)
            sockets.append(ws)
        for ws in sockets:
            first = await ws_turn(ws, TURN)
            await ws_turn(ws, {**TURN, "input": "again", "previous_response_id": first["id"]})
        await asyncio.sleep(0.5)
        after = rss_kib(pid)
    finally:
        await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)
    return before, after


def ms(values: list[float]) -> str:
    cut = sorted(values)
    return (
        f"mean {statistics.mean(values) * 1e3:.2f} ms, p50 {cut[len(cut) // 2] * 1e3:.2f} ms, "
        f"p99 {cut[min(len(cut) - 1, int(len(cut) * 0.99))] * 1e3:.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--history", type=int, default=20)
    args = parser.parse_args()
    print(machine())
    with servers("--ws-connections-per-tenant", str(max(64, args.sessions + 1))) as (_, base, proxy):
        http, ws = asyncio.run(latency(base, args.turns))
        print(f"one streamed turn, {args.turns} back to back  HTTP: {ms(http)}")
        print(f"                                   WebSocket: {ms(ws)}")
        print(f"websocket/http mean ratio: {statistics.mean(ws) / statistics.mean(http):.2f}")
        http_s, ws_s = asyncio.run(conversation(base, args.history))
        print(
            f"a {args.history}-turn conversation  HTTP (whole history each turn): {http_s * 1e3:.0f} ms, "
            f"WebSocket (previous_response_id): {ws_s * 1e3:.0f} ms, ratio {ws_s / http_s:.2f}"
        )
        before, after = asyncio.run(sessions(base, proxy.pid, args.sessions))
        print(
            f"{args.sessions} open WebSocket sessions (2-turn chains): proxy RSS {before / 1024:.1f} -> "
            f"{after / 1024:.1f} MiB, {(after - before) / args.sessions:.1f} KiB per connection"
        )


if __name__ == "__main__":
    main()
