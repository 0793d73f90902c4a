"""Many concurrent streams through one proxy worker: errors, latency percentiles, peak memory.

    .venv/bin/python bench/scale.py [--streams 500] [--chunks 20] [--delay-ms 50]

Every stream is a streaming chat completion whose upstream sends `chunks` content deltas
`delay-ms` apart, so all streams are open at once. Peak RSS is the proxy's VmHWM.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

import httpx2
from common import machine, servers

BODY = b'{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}'


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def run(base: str, streams: int, chunks: int, delay_ms: int) -> tuple[list[float], list[str]]:
    headers = {
        "x-bench-chunks": str(chunks),
        "x-bench-delay-ms": str(delay_ms),
        "content-type": "application/json",
        "authorization": "Bearer sk-bench",
    }
    limits = httpx2.Limits(max_connections=streams + 10, max_keepalive_connections=streams + 10)
    latencies: list[float] = []
    errors: list[str] = []
    async with httpx2.AsyncClient(timeout=120, limits=limits) as client:

        async def one() -> None:
            start = time.perf_counter()
            try:
                async with client.stream("POST", f"{base}/chat/completions", content=BODY, headers=headers) as r:
                    body = b"".join([part async for part in r.aiter_bytes()])
                if r.status_code != 200 or not body.rstrip().endswith(b"data: [DONE]"):
                    errors.append(f"status {r.status_code}")
                    return
            except httpx2.HTTPError as exc:
                errors.append(type(exc).__name__)
                return
            latencies.append(time.perf_counter() - start)

        await asyncio.gather(*(one() for _ in range(streams)))
    return latencies, errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--delay-ms", type=int, default=50)
    args = parser.parse_args()
    print(machine())
    with servers() as (direct, proxied, proc):
        idle = peak_rss_mb(proc.pid)
        d_latencies, d_errors = asyncio.run(run(direct, args.streams, args.chunks, args.delay_ms))
        start = time.perf_counter()
        latencies, errors = asyncio.run(run(proxied, args.streams, args.chunks, args.delay_ms))
        took = time.perf_counter() - start
        peak = peak_rss_mb(proc.pid)
    d_q = statistics.quantiles(d_latencies, n=100)
    ideal = (args.chunks + 3) * args.delay_ms / 1e3
    q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0] * 99
    print(
        f"{args.streams} concurrent streams x {args.chunks} chunks ({args.delay_ms} ms apart, {ideal:.2f} s "
        f"per stream at best): {len(errors)} errors, {took:.2f} s total"
    )
    print(
        f"latency through the proxy p50 {q[49]:.2f} s, p99 {q[98]:.2f} s | direct p50 {d_q[49]:.2f} s, "
        f"p99 {d_q[98]:.2f} s ({len(d_errors)} errors) | proxy peak RSS {peak:.0f} MB (idle {idle:.0f} MB)"
    )
    if errors:
        print("errors:", sorted(set(errors)))


if __name__ == "__main__":
    main()
