"""Shared benchmark plumbing: start the fake upstream and the proxy as real processes."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import httpx2

# run as a script: this checkout's packages, not an editable install's of another checkout
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proxy.demo._run import wait_up as demo_wait_up

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
if (SHARED / "tiktoken").is_dir():
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(SHARED / "tiktoken"))


def machine() -> str:
    return (
        f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.system()} {platform.release()}"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(url: str) -> None:
    """Up within a minute: a server started under `nice` on two loaded cores took more than 20 s."""
    if not demo_wait_up(url, timeout=60):
        raise RuntimeError(f"{url} did not come up")


def cpu_seconds(pid: int) -> float:
    """CPU time of all threads of a process, in nanosecond resolution (Linux schedstat)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that ended meanwhile
    return total / 1e9


@contextmanager
def servers(*proxy_args: str, upstream_args: tuple[str, ...] = ()):
    """(direct upstream base, proxy base, proxy process) on loopback; all stopped afterwards.
    `upstream_args`: the fake upstream's options (`--reload-once`)."""
    up_port, proxy_port = free_port(), free_port()
    data = tempfile.mkdtemp(prefix="bench-store-")
    env = {**os.environ, "OFFLOAD_LOG_LEVEL": "warning"}
    upstream = subprocess.Popen(
        [sys.executable, "-m", "proxy.demo.fake_upstream", str(up_port), *upstream_args], cwd=ROOT
    )
    proxy = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "proxy",
            "serve",
            "--port",
            str(proxy_port),
            "--upstream",
            f"http://127.0.0.1:{up_port}/v1",
            "--anthropic-upstream",
            f"http://127.0.0.1:{up_port}",
            "--data-dir",
            data,
            "--log-level",
            "warning",
            *proxy_args,
        ],
        env=env,
        cwd=ROOT,
    )
    try:
        wait_up(f"http://127.0.0.1:{up_port}/")
        wait_up(f"http://127.0.0.1:{proxy_port}/healthz")
        yield f"http://127.0.0.1:{up_port}/v1", f"http://127.0.0.1:{proxy_port}/v1", proxy
    finally:
        for p in (proxy, upstream):
            p.terminate()
            p.wait(timeout=10)


@contextmanager
def healthz_probe(base: str, label: str = "/healthz meanwhile"):
    """Probe `{base}/healthz` every 20 ms from a thread while the block runs; then print how long
    the answers took: p50, p99 and max in ms (the event loop's no-stall target: p99 <= 100 ms)."""
    import statistics
    import threading

    latencies: list[float] = []
    failed: list[str] = []
    done = threading.Event()

    def probe() -> None:
        with httpx2.Client(timeout=30) as c:
            while not done.is_set():
                t = time.perf_counter()
                try:
                    c.get(f"{base}/healthz")
                except httpx2.TransportError as exc:  # counted, and the probing goes on
                    failed.append(type(exc).__name__)
                else:
                    latencies.append(time.perf_counter() - t)
                time.sleep(0.02)

    httpx2.get(f"{base}/healthz", timeout=30)
    prober = threading.Thread(target=probe)
    prober.start()
    try:
        yield latencies
    finally:
        done.set()
        prober.join()
    ms = sorted(x * 1000 for x in latencies) or [0.0]
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    print(
        f"{label}: {len(latencies)} probes, p50 {statistics.median(ms):.1f} ms, p99 {p99:.1f} ms, "
        f"max {ms[-1]:.1f} ms (target p99 <= 100 ms)"
        + (f"; {len(failed)} probes failed ({failed[0]})" if failed else "")
    )
