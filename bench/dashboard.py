"""The dashboard with 10,000 sessions: how long the statistics API and the page take.

    .venv/bin/python bench/dashboard.py [--sessions 10000]

One tenant (a proxy key) gets N sessions of one turn each, plus one session of 200 turns, written
as the recorder writes them into the embedded store; then the proxy runs on it and each API call
is timed 40 times (median and p95), and the page is timed in headless Chromium (when one is
installed) from sign-in to drawn, and for one page of the sessions table.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's packages
from bench.common import machine, servers  # noqa: E402
from proxy.offload.tenant import namespace_for  # noqa: E402
from proxy.stats._counters import (
    PriceTable,  # noqa: E402
    Turn,  # noqa: E402
)
from proxy.stats._recorder import Recorder  # noqa: E402
from proxy.store.sealing import Sealer  # noqa: E402
from proxy.store.sqlite import SQLiteStore  # noqa: E402

KEY, ADMIN = "pk-bench-dashboard", "admin-bench-dashboard"


async def seed(data: Path, sessions: int) -> float:
    store = SQLiteStore(data)
    recorder = Recorder(PriceTable(None), 14 * 86400, max_queue=sessions + 1000)
    recorder.start(store, Sealer(None))
    namespace, now = namespace_for("tenant", ["bench"], None), time.time()
    started = time.perf_counter()
    turns = [
        Turn(
            namespace=namespace,
            session=f"s-{i:05d}",
            time=now - 60 + i * 50 / sessions,
            route="chat",
            model="gpt-4o",
            status=200,
            stream=False,
            tokens_before=20_000 + i,
            tokens_after=6_000,
            action="compact",
            refs=2,
        )
        for i in range(sessions)
    ]
    turns += [
        Turn(
            namespace=namespace,
            session="long",
            time=now - 5 + t / 100,
            route="chat",
            model="gpt-4o",
            status=200,
            stream=False,
            tokens_before=1000 * t,
            tokens_after=min(1000 * t, 20_000),
            action="compress" if t > 20 else "none",
        )
        for t in range(200)
    ]
    for turn in turns:
        recorder.record(turn)
    await recorder.stop(timeout=600)
    await store.close()
    assert recorder.snapshot().recorded == len(turns), recorder.snapshot()
    return time.perf_counter() - started


def timed(client: httpx2.Client, path: str, token: str, **params) -> tuple[float, float]:
    samples = []
    for _ in range(40):
        started = time.perf_counter()
        r = client.get(path, params=params, headers={"authorization": f"Bearer {token}"})
        samples.append((time.perf_counter() - started) * 1e3)
        assert r.status_code == 200, r.text
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.95) - 1]


def page_times(root: str) -> list[tuple[str, float]]:
    try:
        from tests.harness.browser import browser, chromium_path, open_page
    except ImportError:
        return []
    if chromium_path() is None:
        print("(no Chromium installed: page times skipped)")
        return []
    out = []
    with browser() as launched:
        page, _ = open_page(launched, f"{root}/dashboard#window=24h")
        started = time.perf_counter()
        page.fill("#token", KEY)
        page.click("#signin button[type=submit]")
        page.wait_for_selector("body[data-loaded]")
        out.append(("sign-in to drawn (stats + 25 sessions)", (time.perf_counter() - started) * 1e3))
        seen = int(page.evaluate("() => Number(document.body.dataset.loaded)"))
        started = time.perf_counter()
        page.click("#next")
        page.wait_for_function(f"() => Number(document.body.dataset.loaded) > {seen}")
        out.append(("next page of sessions, redrawn", (time.perf_counter() - started) * 1e3))
        rows = page.locator("#sessions-table tbody tr").count()
        out.append((f"rows in the DOM (of {page.inner_text('#page')})", rows))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=10_000)
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp(prefix="bench-dashboard-"))
    seconds = asyncio.run(seed(data, args.sessions))
    print(machine())
    print(f"seeded {args.sessions:,} sessions + one of 200 turns in {seconds:.1f} s (embedded SQLite store)")
    tenants = data / "tenants.toml"
    tenants.write_text(f'[tenants.bench]\napi_keys = ["{KEY}"]\n')
    with servers("--data-dir", str(data), "--tenants-file", str(tenants), "--admin-token", ADMIN) as (_, base, _p):
        root = base.removesuffix("/v1")
        with httpx2.Client(base_url=root, timeout=30) as client:
            rows = [
                ("stats 24h (tenant)", timed(client, "/v1/offload/stats", KEY, window="24h")),
                ("stats 30d (tenant)", timed(client, "/v1/offload/stats", KEY, window="30d")),
                ("stats 24h (admin, all tenants)", timed(client, "/v1/offload/stats", ADMIN, window="24h")),
                ("sessions, first page of 25", timed(client, "/v1/offload/sessions", KEY, limit=25)),
                (
                    "sessions, last page of 25",
                    timed(client, "/v1/offload/sessions", KEY, limit=25, offset=args.sessions - 24),
                ),
                ("session of 200 turns", timed(client, "/v1/offload/sessions/long", KEY)),
            ]
        print(f"\n{'API call':40} {'median ms':>10} {'p95 ms':>8}")
        for name, (median, p95) in rows:
            print(f"{name:40} {median:10.2f} {p95:8.2f}")
        for name, value in page_times(root):
            print(f"page: {name:60} {value:8.0f}" + (" ms" if "rows" not in name else ""))


if __name__ == "__main__":
    main()
