"""The speed of what the tests check for correctness only (tests assert what happened, never how
fast): worst-case inputs against an ordinary one of the same size, and the event loop while a
runaway search runs in its worker.

- preview: each pathological text of tests/unit/core/test_preview.py against plain lines of the
  same length (a ratio near 1: no quadratic scan);
- ranked pages: a page deep in a ranked set of 10,000 against the first page (SQLite; near 1:
  read by offset, not the whole set);
- search: a catastrophic pattern with a deadline, its time against the deadline (near 1), and
  the event loop's longest wait meanwhile (1 ms ticks) against the deadline (near 0).

    .venv/bin/python bench/worst_cases.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import machine  # noqa: E402
from proxy.core.compaction import Offload  # noqa: E402
from proxy.core.preview import preview  # noqa: E402
from proxy.core.tokens import counter_for_model  # noqa: E402
from proxy.offload.records import RefStore  # noqa: E402
from proxy.reload import search as search_pool
from proxy.reload.search import SearchLimits  # noqa: E402
from proxy.reload.tools import ReloadTools  # noqa: E402
from proxy.store.sqlite import SQLiteStore  # noqa: E402
from tests.unit.core.test_preview import pathological  # noqa: E402


def best(repeats: int, work) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def previews(repeats: int, scale: float) -> None:
    print("preview: pathological / plain lines of the same size")
    for text in pathological():
        text = text[: max(1, int(len(text) * scale))]
        plain = "".join(f"line {i}: ordinary output\n" for i in range(len(text) // 25 + 1))[: len(text)]
        worst, ordinary = best(repeats, lambda: preview(text)), best(repeats, lambda: preview(plain))
        print(f"  {text[:24]!r:30} {len(text):>9} chars  {worst * 1e3:8.1f} ms  ratio {worst / ordinary:6.2f}")


async def ranked_pages(repeats: int, size: int) -> None:
    deep = size - 50
    with tempfile.TemporaryDirectory() as folder:
        store = SQLiteStore(Path(folder))
        for i in range(size):
            await store.rank("ranked", f"session-{i:05}", float(i), ttl=600)
        times = {}
        for offset in (0, deep):
            spent = []
            for _ in range(repeats):
                started = time.perf_counter()
                await store.ranked("ranked", offset, 50)
                spent.append(time.perf_counter() - started)
            times[offset] = min(spent)
        await store.close()
    print(
        f"ranked pages of {size:,}: offset {deep:,} {times[deep] * 1e3:.2f} ms, first page {times[0] * 1e3:.2f} ms, "
        f"ratio {times[deep] / times[0]:.2f}"
    )


async def runaway_search(deadline: float) -> None:
    with tempfile.TemporaryDirectory() as folder:
        store = SQLiteStore(Path(folder))
        refs = RefStore(store, "n" * 32, ttl=60)
        await refs.save([Offload("hard01", "tool_result", "".join("a" * 40 + "!\n" for _ in range(2000)), 9000)], [])
        tools = ReloadTools(
            refs,
            counter_for_model("gpt-4o"),
            max_tokens=500,
            request_refs=["hard01"],
            session=None,
            limits=SearchLimits(timeout=deadline),
        )
        await tools.search("warm")  # a worker started: what is timed is the search
        task = asyncio.ensure_future(tools.search("(a|a)+$"))
        started, worst = time.perf_counter(), 0.0
        while not task.done():
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - before - 0.001)
        took = time.perf_counter() - started
        await search_pool.shutdown()
        await store.close()
    print(
        f"runaway search, deadline {deadline:g} s: took {took:.2f} s (ratio {took / deadline:.2f}); "
        f"longest loop wait {worst * 1e3:.1f} ms (ratio to the deadline {worst / deadline:.3f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--deadline", type=float, default=1.0, help="the runaway search's deadline (seconds)")
    parser.add_argument("--scale", type=float, default=1.0, help="the pathological texts cut to this fraction")
    parser.add_argument("--ranked", type=int, default=10_000, help="members of the ranked set")
    args = parser.parse_args()
    if args.ranked < 100 or not 0 < args.scale <= 1:
        parser.error("--ranked takes at least 100, --scale a fraction in (0, 1]")
    print(machine())
    previews(args.repeats, args.scale)
    asyncio.run(ranked_pages(args.repeats, args.ranked))
    asyncio.run(runaway_search(args.deadline))


if __name__ == "__main__":
    main()
