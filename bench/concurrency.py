"""The proxy under the openai SDK: 50 requests in flight, one at a time, and the first streamed chunk.

    .venv/bin/python bench/concurrency.py [--concurrency 50] [--requests 1000] [--repeats 7] [--sequential 300]

The client is the real openai SDK (AsyncOpenAI, default settings, no retries); the upstream is the
fast local fake (proxy.demo.fake_upstream); the proxy is one uvicorn worker on loopback with the
embedded store and default settings. Direct and through-the-proxy runs alternate, so that the
noise of a shared machine falls on both. Prints, each beside its target:

- concurrent: throughput through the proxy / direct, median over the repetitions and the worst one
  (target >= 0.8, every repetition >= 0.6); also the proxy's CPU per request;
- sequential: median latency through the proxy / direct (target <= 2.0);
- first chunk of a stream, as the SDK yields it: median through the proxy minus direct (target <= 2 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from common import cpu_seconds, machine, servers
from openai import AsyncOpenAI

MESSAGES = [{"role": "user", "content": "hi"}]
TARGET_CONCURRENT, TARGET_WORST, TARGET_SEQUENTIAL, TARGET_FIRST_CHUNK_MS = 0.8, 0.6, 2.0, 2.0


def sdk(base: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=base, api_key="sk-bench", max_retries=0, timeout=60)


async def concurrent(client: AsyncOpenAI, n: int, width: int, errors: list[str] | None = None) -> float:
    """Requests per second with `width` requests in flight until `n` are done; failures go to `errors`."""
    left = n

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            try:
                await client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
            except Exception as exc:
                if errors is None:
                    raise
                errors.append(f"{type(exc).__name__}: {exc}"[:120])

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(width)))
    return n / (time.perf_counter() - start)


async def sequential(client: AsyncOpenAI, n: int) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        await client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
        times.append(time.perf_counter() - start)
    return times


async def first_chunk(client: AsyncOpenAI, n: int) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        stream = await client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
        first = None
        async for _ in stream:
            if first is None:
                first = time.perf_counter() - start
        times.append(first)
    return times


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


async def measure(direct: str, proxied: str, proc, args) -> None:
    clients = {"direct": sdk(direct), "proxy": sdk(proxied)}
    for client in clients.values():  # warm-up: connections, caches, the SDK's lazy imports
        await concurrent(client, 2 * args.concurrency, args.concurrency)
        await sequential(client, 5)
        await first_chunk(client, 5)

    ratios, cpu_ms, errors = [], [], []
    for rep in range(args.repeats):
        rates = {}
        for name in ("direct", "proxy") if rep % 2 == 0 else ("proxy", "direct"):
            before = cpu_seconds(proc.pid)
            rates[name] = await concurrent(clients[name], args.requests, args.concurrency, errors)
            if name == "proxy":
                cpu_ms.append((cpu_seconds(proc.pid) - before) / args.requests * 1e3)
        ratios.append(rates["proxy"] / rates["direct"])
        print(
            f"  repetition {rep + 1}: direct {rates['direct']:.0f} req/s, proxy {rates['proxy']:.0f} req/s, "
            f"ratio {ratios[-1]:.2f}",
            flush=True,
        )
    median, worst = statistics.median(ratios), min(ratios)
    print(
        f"{args.concurrency}-way concurrent x{args.requests}, {args.repeats} repetitions: throughput ratio "
        f"proxy/direct median {median:.2f} (target >= {TARGET_CONCURRENT}: {verdict(median >= TARGET_CONCURRENT)}), "
        f"min {worst:.2f} (target >= {TARGET_WORST}: {verdict(worst >= TARGET_WORST)}); proxy CPU "
        f"{statistics.median(cpu_ms):.2f} ms per request (median); {len(errors)} errors",
        flush=True,
    )
    if errors:
        print("errors:", sorted(set(errors)))

    latency = {name: [] for name in clients}
    for i in range(args.sequential):  # one request each in turn: the machine's drift falls on both alike
        for name in ("direct", "proxy") if i % 2 == 0 else ("proxy", "direct"):
            latency[name] += await sequential(clients[name], 1)
    d, p = statistics.median(latency["direct"]), statistics.median(latency["proxy"])
    print(
        f"sequential x{len(latency['proxy'])}: direct p50 {d * 1e3:.2f} ms, proxy p50 {p * 1e3:.2f} ms, ratio "
        f"{p / d:.2f} (target <= {TARGET_SEQUENTIAL}: {verdict(p / d <= TARGET_SEQUENTIAL)})",
        flush=True,
    )

    chunk = {name: [] for name in clients}
    for i in range(args.sequential):
        for name in ("direct", "proxy") if i % 2 == 0 else ("proxy", "direct"):
            chunk[name] += await first_chunk(clients[name], 1)
    d, p = statistics.median(chunk["direct"]), statistics.median(chunk["proxy"])
    added = (p - d) * 1e3
    paired = statistics.median(b - a for a, b in zip(chunk["direct"], chunk["proxy"])) * 1e3
    print(
        f"stream first chunk x{len(chunk['proxy'])}: direct p50 {d * 1e3:.2f} ms, proxy p50 {p * 1e3:.2f} ms, "
        f"added {added:.2f} ms (median of the paired differences {paired:.2f} ms) "
        f"(target <= {TARGET_FIRST_CHUNK_MS} ms: {verdict(added <= TARGET_FIRST_CHUNK_MS)})"
    )
    for client in clients.values():
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--requests", type=int, default=1000, help="requests per concurrent repetition")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--sequential", type=int, default=300, help="requests for the sequential and stream rows")
    args = parser.parse_args()
    print(machine())
    with servers() as (direct, proxied, proc):
        asyncio.run(measure(direct, proxied, proc, args))


if __name__ == "__main__":
    main()
