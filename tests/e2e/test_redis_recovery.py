"""A fleet on one Redis fails like one process: two replicas (proxy processes) serve one
conversation alternately while their Redis restarts or hangs. A restart between turns degrades
no turn; while Redis hangs every turn is answered, both replicas stay ready (degraded), and once
it is back every turn is managed again and the statistics count every turn served."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import httpx2
import pytest

from tests.harness.history import agent_history
from tests.harness.requests import post
from tests.harness.servers import ProxyProcess, RedisCluster, RedisProcess

ADMIN = "admin-recovery"
HEADERS = {"X-Offload-Max-Total-Tokens": "1000", "X-Offload-Mode": "compact", "authorization": "Bearer sk-recovery"}


@pytest.fixture(params=["redis"])
def redis_server(request) -> Iterator[RedisProcess | RedisCluster]:
    """Ours (restarted on its own ports): one Redis, or (`cluster`) a 3-master cluster."""
    server = RedisCluster().start() if request.param == "cluster" else RedisProcess().start()
    yield server
    for node in getattr(server, "nodes", [server]):
        if node.proc and node.proc.poll() is None:
            os.kill(node.proc.pid, signal.SIGCONT)
    server.stop()


@pytest.fixture
def replicas(redis_server, upstream, tmp_path) -> Iterator[list[str]]:
    procs = [
        ProxyProcess(
            "--redis-url",
            redis_server.url,
            "--store-timeout",
            "2",
            "--admin-token",
            ADMIN,
            "--upstream",
            f"{upstream.url}/v1",
            data_dir=tmp_path / f"data{i}",
        )
        for i in range(2)
    ]
    with procs[0], procs[1]:
        yield [p.url for p in procs]


def turn(url: str, n: int) -> httpx2.Response:
    """Turn `n` of the conversation: one more large tool result each time."""
    messages = agent_history(steps=n + 2) + [{"role": "user", "content": f"turn {n}"}]
    r = post(url, json={"model": "gpt-4o", "messages": messages}, headers=HEADERS, timeout=20)
    assert r.status_code == 200, r.text
    return r


def managed(r: httpx2.Response) -> bool:
    return "x-offload-warning" not in r.headers and r.headers.get("x-offload-action") == "compact"


def readiness(url: str) -> dict:
    r = httpx2.get(f"{url}/readyz", timeout=5)
    assert r.status_code == 200, r.text
    return r.json()


def wait_until(check, what: str, within: float = 15) -> None:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < within, what
        time.sleep(0.05)


def totals(url: str) -> dict:
    r = httpx2.get(f"{url}/v1/offload/stats?window=1h", headers={"authorization": f"Bearer {ADMIN}"}, timeout=10)
    return r.json()["totals"] if r.status_code == 200 else {}


@pytest.mark.parametrize("redis_server", ["redis", "cluster"], indirect=True)
def test_a_restart_between_turns_degrades_no_turn(replicas, redis_server, upstream):
    before = [turn(replicas[n % 2], n) for n in range(4)]
    assert all(managed(r) for r in before)
    redis_server.restart()  # no traffic meanwhile; it comes back empty, on the same port(s)
    after = []
    for n in range(4, 10):
        started = time.monotonic()
        after.append(turn(replicas[n % 2], n))
        print(f"turn {n} after the restart: {time.monotonic() - started:.3f} s, managed={managed(after[-1])}")
    assert [managed(r) for r in after] == [True] * len(after), [r.headers.get("x-offload-warning") for r in after]
    forwarded = upstream.chat_requests()[-1].json()["messages"]
    assert "ref=" in str(forwarded[3]["content"])  # the first tool result went out offloaded


def test_a_hung_redis_keeps_the_fleet_ready_and_the_statistics_whole(replicas, redis_server):
    served = [turn(replicas[n % 2], n) for n in range(2)]
    assert all(managed(r) for r in served)
    wait_until(lambda: totals(replicas[0]).get("requests") == 2, "the first turns were never counted")
    os.kill(redis_server.proc.pid, signal.SIGSTOP)
    for n in range(2, 6):
        served.append(turn(replicas[n % 2], n))  # answered, unmanaged
        assert all(readiness(url)["status"] == "ready" for url in replicas)
    assert all(readiness(url) == {"status": "ready", "store": "unavailable", "degraded": True} for url in replicas)
    assert not any(managed(r) for r in served[2:])
    os.kill(redis_server.proc.pid, signal.SIGCONT)
    for n in range(6, 10):  # at once: the first turn once Redis is back is managed, none after flaps
        started = time.monotonic()
        served.append(turn(replicas[n % 2], n))
        print(f"turn {n} after the recovery: {time.monotonic() - started:.3f} s, managed={managed(served[-1])}")
    assert [managed(r) for r in served[6:]] == [True] * 4
    assert all(readiness(url) == {"status": "ready", "store": "ok", "degraded": False} for url in replicas)
    raw = sum(int(r.headers["x-offload-tokens-before"]) for r in served)
    forwarded = sum(int(r.headers["x-offload-tokens-after"]) for r in served)
    wait_until(lambda: totals(replicas[1]).get("requests") == len(served), "turns served while down were lost")
    counted = totals(replicas[1])
    assert (counted["tokens_before"], counted["tokens_after"]) == (raw, forwarded)
    assert counted["store_warnings"] == 4
