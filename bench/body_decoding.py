"""Compressed request bodies: how fast each coding is decoded (proxy.http.body), and
how long the event loop waits meanwhile (the largest gap between 1 ms ticks).

    .venv/bin/python bench/body_decoding.py [--megabytes 48]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import os
import random
import time
import zlib

import brotli
import zstandard

from proxy.http.body import decoded


def body(size: int) -> bytes:
    """JSON-ish text, about as compressible as a chat history."""
    rng = random.Random(1)
    words = [os.urandom(4).hex() for _ in range(5000)]
    text = " ".join(rng.choice(words) for _ in range(size // 8 + 1)).encode()
    return b'{"messages": [{"role": "user", "content": "' + text[:size] + b'"}]}'


async def measure(sent: bytes, coding: str, limit: int) -> tuple[float, float]:
    gaps: list[float] = []
    done = False

    async def tick() -> None:
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = asyncio.ensure_future(tick())
    await asyncio.sleep(0.01)
    start = time.perf_counter()
    await decoded(sent, [coding], limit=limit)
    took = time.perf_counter() - start
    done = True
    await ticker
    return took, max(gaps)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=int, default=48)
    args = parser.parse_args()
    plain = body(args.megabytes << 20)
    encode = {
        "gzip": gzip.compress,
        "deflate": zlib.compress,
        "br": lambda b: brotli.compress(b, quality=5),
        "zstd": zstandard.ZstdCompressor().compress,
    }
    mb = len(plain) / 2**20
    for coding, fn in [*encode.items(), *encode.items()]:  # twice: the first includes warming up
        sent = fn(plain)
        took, gap = await measure(sent, coding, limit=len(plain) + 1)
        print(
            f"{coding:8} {len(sent) / 2**20:6.1f} MB -> {mb:.1f} MB in {took * 1000:6.0f} ms "
            f"({mb / took:5.0f} MB/s); longest event-loop gap {gap * 1000:.1f} ms"
        )


if __name__ == "__main__":
    asyncio.run(main())
