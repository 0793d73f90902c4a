"""1000 streams aborted by their clients: no upstream connection left open, no memory growth."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import httpx2
import pytest
from starlette.responses import StreamingResponse

from tests.harness.servers import ProxyProcess, stream_chunks

BODY = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@pytest.fixture
def proxy_process(upstream, tmp_path):
    with ProxyProcess("--upstream", f"{upstream.url}/v1", "--log-level", "warning", data_dir=tmp_path) as proxy:
        yield proxy.url, proxy.proc


async def abort_streams(url: str, count: int, width: int = 50) -> int:
    got_first = 0
    limits = httpx2.Limits(max_connections=width)
    async with httpx2.AsyncClient(timeout=10, limits=limits) as client:
        gate = asyncio.Semaphore(width)

        async def one() -> None:
            nonlocal got_first
            async with gate:
                async with client.stream("POST", f"{url}/v1/chat/completions", json=BODY) as r:
                    async for _ in r.aiter_raw():
                        got_first += 1
                        break  # hang up after the first bytes

        await asyncio.gather(*(one() for _ in range(count)))
    return got_first


def test_aborted_streams_release_upstream_and_memory(upstream, proxy_process):
    url, proc = proxy_process
    active = {"now": 0, "max": 0}
    chunks = stream_chunks("a slow answer " * 20)

    async def body():
        active["now"] += 1
        active["max"] = max(active["max"], active["now"])
        try:
            for chunk in chunks:
                yield chunk
                await asyncio.sleep(0.05)
        finally:
            active["now"] -= 1

    async def handler(request, rec):
        return StreamingResponse(body(), media_type="text/event-stream")

    upstream.handler = handler
    assert asyncio.run(abort_streams(url, 200)) == 200  # warm-up: pools, caches, allocator
    upstream.requests.clear()
    before = rss_mb(proc.pid)
    assert asyncio.run(abort_streams(url, 1000)) == 1000
    deadline = time.monotonic() + 10
    while active["now"]:
        assert time.monotonic() < deadline, f"{active['now']} upstream streams still open"
        time.sleep(0.1)
    assert active["max"] <= 60  # streams were closed as their clients left, not left to run out
    grown = rss_mb(proc.pid) - before
    print(f"\nRSS before {before:.1f} MB, growth {grown:.1f} MB, max concurrent upstream streams {active['max']}")
    assert grown < 25, f"proxy RSS grew by {grown:.1f} MB over 1000 aborted streams"
    sockets = sum(
        1 for fd in os.listdir(f"/proc/{proc.pid}/fd") if os.readlink(f"/proc/{proc.pid}/fd/{fd}").startswith("socket:")
    )
    print(f"sockets open in the proxy afterwards: {sockets}")
    assert sockets < 30, f"{sockets} sockets still open in the proxy"
