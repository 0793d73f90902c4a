"""Several proxy replicas on one store, as a load balancer spreads a conversation over them."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx2

from tests.harness.servers import ProxyProcess


@contextmanager
def replicas(count: int, *args: str, **options) -> Iterator[list[ProxyProcess]]:
    """`count` proxy processes (`python -m proxy serve *args`), started side by side, each with a
    data directory of its own (the store they share is the one `args` name: `--redis-url`)."""
    options.setdefault("ready_within", 90)  # several start side by side: slow on a busy machine
    dirs = [tempfile.mkdtemp(prefix="offload-replica-") for _ in range(count)]
    procs = [ProxyProcess(*args, "--log-level", "warning", data_dir=d, **options) for d in dirs]
    try:
        with ThreadPoolExecutor(count) as pool:
            list(pool.map(ProxyProcess.start, procs))
        yield procs
    finally:
        for proc in procs:
            if proc.proc is not None and proc.proc.poll() is None:
                proc.stop()
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)


def background_jobs(url: str) -> int:
    """Background summaries queued or running in the replica at `url` (its /metrics)."""
    gauges = ("offload_summaries_in_flight", "offload_summaries_queued")
    values = [
        float(line.split()[1])
        for line in httpx2.get(f"{url}/metrics", timeout=10).text.splitlines()
        if line.split(" ")[0] in gauges
    ]
    assert len(values) == len(gauges), f"{gauges} not exposed by {url}"
    return int(sum(values))


def wait_until(condition: Callable[[], bool], timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def idle(urls: Sequence[str]) -> bool:
    return not any(background_jobs(url) for url in urls)
