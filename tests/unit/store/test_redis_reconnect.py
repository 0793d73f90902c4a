"""A Redis that restarts: the client's retry and health-check settings, and no command failing
on the stale pooled connections a restart leaves (standalone and a cluster of our own, restarted
node by node on the same ports)."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid

import pytest
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError, TimeoutError

from proxy.store.base import StoreUnavailable
from proxy.store.guarded import GuardedStore
from proxy.store.redis import ALWAYS, CLUSTER_RETRIES, HEALTH_CHECK_EVERY, RETRIES, RedisStore
from proxy.telemetry import Metrics
from tests.harness.servers import RedisCluster, RedisProcess

pytestmark = pytest.mark.anyio


def key(tag: str) -> str:
    return f"off:{{{tag}}}:{uuid.uuid4().hex}"


def test_standalone_retries_connection_errors_only_and_never_resends_what_counts():
    store = RedisStore("redis://127.0.0.1:1/0", timeout=0.5)
    retrying = store.client.connection_pool.connection_kwargs
    assert retrying["retry"].get_retries() == RETRIES
    assert retrying["retry"]._supported_errors == (ConnectionError,)  # a timeout is never resent
    assert isinstance(retrying["retry"]._backoff, ExponentialBackoff)
    assert [retrying["retry"]._backoff.compute(n) for n in (1, 2, 3, 9)] == [0.02, 0.04, 0.08, 0.1]
    assert retrying["health_check_interval"] == HEALTH_CHECK_EVERY
    once = store._once.connection_pool.connection_kwargs
    assert once["retry"].get_retries() == 0 and once["health_check_interval"] == 0
    for client in (store.client, store._once):  # the pool's check for connections the server closed stays on
        assert not client.connection_pool.maint_notifications_enabled()


def test_cluster_retries_reconnect_but_not_timeouts_and_pings_before_what_counts():
    store = RedisStore("redis+cluster://127.0.0.1:1/0", timeout=0.5)
    for client in (store.client, store._once):
        assert client.retry.get_retries() == CLUSTER_RETRIES
        assert ConnectionError in client.ERRORS_ALLOW_RETRY and TimeoutError not in client.ERRORS_ALLOW_RETRY
        assert client.maint_notifications_config.enabled is False
    assert store.client.connection_kwargs["health_check_interval"] == HEALTH_CHECK_EVERY
    assert store._once.connection_kwargs["health_check_interval"] == ALWAYS  # a PING right before each


async def every_kind_of_command(store: RedisStore, tag: str, n: int) -> list:
    """Idempotent and not: each once, `n` times at once (so that many pooled connections are used)."""

    async def one(i: int):
        k = key(tag)
        await store.put(k, b"v", 60)
        assert await store.get(k, ttl=60) == b"v"
        assert await store.touch([k], 60, slack=10) == [True]
        assert await store.put_if_absent(k + ":lock", b"1", 60) is True
        await store.incr_fields(k + ":h", {"requests": 1}, 60)
        await store.push(k + ":l", b"row", max_len=10, ttl=60)
        await store.rank_add(k + ":z", {"a": 1.0}, 60)
        return await store.incr(k + ":n", 1, 60), await store.items(k + ":l"), await store.hashes([k + ":h"])

    return await asyncio.gather(*(one(i) for i in range(n)))


async def test_a_restart_between_commands_fails_none_and_applies_none_twice():
    server = RedisProcess().start()
    store = RedisStore(server.url, timeout=0.5)
    try:
        await every_kind_of_command(store, "a", 8)  # eight pooled connections on each client
        server.restart()  # same port, empty
        for result in await every_kind_of_command(store, "a", 8):
            assert result == (1, [b"row"], [{"requests": 1}])
    finally:
        await store.close()
        server.stop()


@pytest.fixture
def own_cluster():
    cluster = RedisCluster().start()  # ours: its nodes are restarted
    yield cluster
    for node in cluster.nodes:
        if node.proc and node.proc.poll() is None:
            os.kill(node.proc.pid, signal.SIGCONT)
    cluster.stop()


async def test_a_cluster_restarted_between_commands_fails_none(own_cluster):
    store = RedisStore(own_cluster.url, timeout=0.5)
    try:
        tags = [f"t{i}" for i in range(6)]  # spread over the nodes' slots
        for tag in tags:
            await every_kind_of_command(store, tag, 3)
        own_cluster.restart()
        for tag in tags:
            for result in await every_kind_of_command(store, tag, 3):
                assert result == (1, [b"row"], [{"requests": 1}])
    finally:
        await store.close()


async def test_a_hung_cluster_is_unavailable_not_an_unexpected_error(own_cluster):
    """A cluster pipeline that must read the slot map again (after a failure) and cannot: the
    store is unavailable (it used to raise redis-py's RedisClusterException past the guard)."""
    store = RedisStore(own_cluster.url, timeout=0.3)
    try:
        await store.put(key("x"), b"v", 60)
        for node in own_cluster.nodes:
            os.kill(node.proc.pid, signal.SIGSTOP)
        for call in (
            lambda: store.put(key("x"), b"v", 60),
            lambda: store.touch([key("x")], 60),
            lambda: store.incr(key("x"), 1, 60),
        ):
            with pytest.raises(StoreUnavailable):
                await call()
    finally:
        for node in own_cluster.nodes:
            os.kill(node.proc.pid, signal.SIGCONT)
        await store.close()


class Switch:
    def __init__(self) -> None:
        self.down = False

    async def ping(self) -> bool:
        return not self.down

    async def get(self, key, ttl=None):
        if self.down:
            raise StoreUnavailable("down")
        return None

    async def close(self) -> None:
        pass


def store_up(metrics: Metrics) -> float:
    return metrics.registry.get_sample_value("offload_store_up")


async def test_the_store_up_gauge_follows_the_guards_view():
    metrics, inner = Metrics(), Switch()
    guarded = GuardedStore(inner, ping_timeout=0.2, metrics=metrics)
    assert store_up(metrics) == 1
    inner.down = True
    with pytest.raises(StoreUnavailable):
        await guarded.get("k")
    assert store_up(metrics) == 0 and not guarded.available
    assert await guarded.ping() is False and store_up(metrics) == 0
    inner.down = False
    assert await guarded.ping() is True and store_up(metrics) == 1


async def test_the_first_call_after_the_store_is_back_uses_it_without_waiting_for_the_monitor():
    inner = Switch()
    guarded = GuardedStore(inner, ping_every=3600, ping_timeout=0.2)  # its background ping never comes
    inner.down = True
    with pytest.raises(StoreUnavailable):
        await guarded.get("k")
    with pytest.raises(StoreUnavailable):  # still down: asked again, refused at once
        await guarded.get("k")
    inner.down = False
    await asyncio.sleep(0.3)  # past the recheck interval
    assert await guarded.get("k") is None and guarded.available


async def test_a_store_that_never_answers_its_ping_is_skipped_not_waited_for():
    class Hung(Switch):
        async def ping(self) -> bool:
            await asyncio.Event().wait()  # a hung Redis
            return True

    inner = Hung()
    guarded = GuardedStore(inner, ping_every=3600, ping_timeout=0.2)
    inner.down = True
    with pytest.raises(StoreUnavailable):
        await guarded.get("k")
    for _ in range(3):  # each call waits a fraction of the ping's timeout at most, then goes on without
        with pytest.raises(StoreUnavailable):
            await guarded.get("k")
    await guarded.close()


async def test_pings_at_the_same_time_share_one_probe():
    """A flood of /readyz (each asks `ping`) against a hung store: one probe in flight, whose
    answer every caller gets, not a connection and a timeout each."""

    class Hung(Switch):
        probes = 0

        async def ping(self) -> bool:
            Hung.probes += 1
            await asyncio.Event().wait()  # a hung Redis
            return True

    guarded = GuardedStore(Hung(), ping_every=3600, ping_timeout=0.2)
    answers = await asyncio.gather(*(guarded.ping() for _ in range(64)))
    assert answers == [False] * 64 and not guarded.available
    assert Hung.probes <= 2  # one probe (a second only when the loop ran late meanwhile)
    assert await guarded.ping() is False and Hung.probes <= 4  # the next one is a new ping
    await guarded.close()
