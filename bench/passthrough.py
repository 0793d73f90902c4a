"""Pass-through overhead: small chat requests direct to a fake upstream vs through the proxy.

    .venv/bin/python bench/passthrough.py [--requests 200] [--concurrency 50]

Both servers run as separate processes (uvicorn, uvloop, httptools) on loopback; the client is
httpx2 with keep-alive. Prints mean latency and the proxy/direct ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import httpx2
from common import machine, servers

BODY = b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}'
AUTH = {"authorization": "Bearer sk-bench"}  # the proxy serves no anonymous request by default
STREAM_BODY = b'{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}'


async def sequential(base: str, n: int, body: bytes) -> list[float]:
    times = []
    async with httpx2.AsyncClient(timeout=30, headers=AUTH) as c:
        for _ in range(10):  # warm-up: connections, caches
            await c.post(f"{base}/chat/completions", content=body)
        for _ in range(n):
            t = time.perf_counter()
            r = await c.post(f"{base}/chat/completions", content=body)
            assert r.status_code == 200
            times.append(time.perf_counter() - t)
    return times


async def first_chunk(base: str, n: int) -> list[float]:
    times = []
    async with httpx2.AsyncClient(timeout=30, headers=AUTH) as c:
        for i in range(n + 10):
            t = time.perf_counter()
            async with c.stream("POST", f"{base}/chat/completions", content=STREAM_BODY) as r:
                first = True
                async for _ in r.aiter_raw():
                    if first and i >= 10:
                        times.append(time.perf_counter() - t)
                    first = False
    return times


async def concurrent(base: str, n: int, width: int) -> float:
    async with httpx2.AsyncClient(timeout=60, limits=httpx2.Limits(max_connections=width), headers=AUTH) as c:
        sem = asyncio.Semaphore(width)

        async def one():
            async with sem:
                r = await c.post(f"{base}/chat/completions", content=BODY)
                assert r.status_code == 200

        t = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return time.perf_counter() - t


def ms(values: list[float]) -> str:
    return f"mean {statistics.mean(values) * 1e3:.2f} ms, p50 {statistics.median(values) * 1e3:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=50)
    args = parser.parse_args()
    print(machine())
    with servers() as (direct, proxied, _):
        d = asyncio.run(sequential(direct, args.requests, BODY))
        p = asyncio.run(sequential(proxied, args.requests, BODY))
        print(f"sequential x{args.requests}  direct {ms(d)} | proxy {ms(p)} | total ratio {sum(p) / sum(d):.2f}")
        d_ttfb = asyncio.run(first_chunk(direct, args.requests))
        p_ttfb = asyncio.run(first_chunk(proxied, args.requests))
        print(
            f"stream first chunk  direct {ms(d_ttfb)} | proxy {ms(p_ttfb)} | added "
            f"{(statistics.median(p_ttfb) - statistics.median(d_ttfb)) * 1e3:.2f} ms (p50)"
        )
        n = args.requests * 2
        d_c = asyncio.run(concurrent(direct, n, args.concurrency))
        p_c = asyncio.run(concurrent(proxied, n, args.concurrency))
        print(
            f"{args.concurrency}-way concurrent x{n}  direct {n / d_c:.0f} req/s | proxy {n / p_c:.0f} req/s | "
            f"time ratio {p_c / d_c:.2f}"
        )


if __name__ == "__main__":
    main()
