"""The store's canary: a replica with other secrets than the store's refuses to start; a
rotation passes; an unreachable store does not hold startup up."""

from __future__ import annotations

import os

import pytest

from proxy.config import ServerSettings
from proxy.offload.canary import CANARY_KEY, CanaryMismatch, check, startup_check
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore

pytestmark = pytest.mark.anyio
OLD, NEW = "the old encryption key", "the new encryption key"


@pytest.fixture(params=["sqlite", "redis", "cluster"])
async def store(request, tmp_path):
    from proxy.store.redis import RedisStore

    if request.param == "sqlite":
        s = SQLiteStore(tmp_path)
    else:
        s = RedisStore(request.getfixturevalue("private_redis_url" if request.param == "redis" else
                                               "redis_cluster_url"))
        await s.delete(CANARY_KEY)  # the cluster is shared by the session
    yield s
    await s.delete(CANARY_KEY)
    await s.close()


async def test_the_first_replica_writes_it_and_the_same_secrets_pass(store):
    assert await check(store, Sealer(OLD), OLD) is None
    raw = await store.get(CANARY_KEY)
    assert raw is not None and b"canary" not in raw  # sealed
    assert await check(store, Sealer(OLD), OLD) is None


@pytest.mark.parametrize("sealer, names, message", [
    (Sealer(NEW), NEW, "--encryption-key does not open the store's canary"),
    (Sealer(None), None, "this one has none"),
    (Sealer(OLD, names="another names key"), "another names key", "--namespace-key"),
])
async def test_other_secrets_are_refused_with_the_reason(store, sealer, names, message):
    assert await check(store, Sealer(OLD), OLD) is None
    with pytest.raises(CanaryMismatch, match=message):
        await check(store, sealer, names)


async def test_a_rotation_passes_and_then_refuses_the_old_key_alone(store):
    assert await check(store, Sealer(OLD), OLD) is None
    assert await check(store, Sealer(NEW, previous=OLD, names=OLD), OLD) is None  # sealed again with NEW
    assert Sealer(NEW).open(await store.get(CANARY_KEY), CANARY_KEY) is not None
    assert await check(store, Sealer(NEW, names=OLD), OLD) is None  # the previous key dropped
    with pytest.raises(CanaryMismatch, match="does not open"):
        await check(store, Sealer(OLD), OLD)


async def test_switching_encryption_on_is_a_warning_then_keyless_replicas_are_refused(store):
    assert await check(store, Sealer(None), None) is None
    assert await check(store, Sealer(None), None) is None
    assert "used without --encryption-key" in await check(store, Sealer(OLD), OLD)
    with pytest.raises(CanaryMismatch, match="has none"):
        await check(store, Sealer(None), None)


def test_an_unreachable_store_is_not_waited_for(tmp_path, monkeypatch):
    from tests.harness.servers import free_port

    settings = ServerSettings(data_dir=tmp_path, redis_url=f"redis://127.0.0.1:{free_port()}/0", encryption_key=OLD)
    from proxy.offload.canary import UNCHECKED_ENV

    monkeypatch.setenv(UNCHECKED_ENV, "0")  # restored after the test: in-process proxies must never watch
    note = startup_check(settings)
    assert note is not None and "not checked" in note and "once the store answers" in note
    assert os.environ[UNCHECKED_ENV] == "1"  # the workers check it


async def test_a_check_made_late_stops_the_server_on_a_mismatch(private_redis_url):
    """The store does not answer (its writes paused: GETEX waits) until the check is under way."""
    import asyncio

    import redis

    from proxy.offload.canary import watch
    from proxy.store.redis import RedisStore

    other = RedisStore(private_redis_url)
    assert await check(other, Sealer(OLD), OLD) is None  # the fleet's canary
    await other.close()
    admin = redis.Redis.from_url(private_redis_url)
    admin.execute_command("CLIENT", "PAUSE", "60000", "WRITE")
    store = RedisStore(private_redis_url, timeout=0.2)
    stopped = asyncio.Event()
    try:
        task = asyncio.get_running_loop().create_task(watch(store, Sealer(NEW), NEW, stop=stopped.set, every=0.05))
        await asyncio.sleep(0.5)
        assert not task.done() and not stopped.is_set()  # still trying
        admin.execute_command("CLIENT", "UNPAUSE")
        await asyncio.wait_for(task, 30)
        assert stopped.is_set()
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
        admin.close()
        await store.close()


async def test_a_check_made_late_that_passes_does_not_stop(private_redis_url):
    import asyncio

    from proxy.offload.canary import watch
    from proxy.store.redis import RedisStore

    store = RedisStore(private_redis_url)
    stopped = asyncio.Event()
    try:
        await asyncio.wait_for(watch(store, Sealer(OLD), OLD, stop=stopped.set, every=0.05), 30)
        assert not stopped.is_set() and await store.get(CANARY_KEY) is not None  # written: the first replica
    finally:
        await store.close()
