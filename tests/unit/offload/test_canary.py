"""The store's canary: a replica with other secrets than the store's refuses to start; a
rotation passes; an unreachable store does not hold startup up."""

from __future__ import annotations

import os

import pytest

from proxy.config import ServerSettings
from proxy.offload.canary import (
    CANARY_KEY,
    LOST,
    MOVED_ON,
    RESTORED,
    CanaryMismatch,
    Checked,
    _parse,
    check,
    startup_check,
)
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
        s = RedisStore(
            request.getfixturevalue("private_redis_url" if request.param == "redis" else "redis_cluster_url")
        )
        await s.delete(CANARY_KEY)  # the cluster is shared by the session
    yield s
    await s.delete(CANARY_KEY)
    await s.close()


async def test_the_first_replica_writes_it_and_the_same_secrets_pass(store):
    assert (await check(store, Sealer(OLD), OLD)).note is None
    raw = await store.get(CANARY_KEY)
    assert raw is not None and b"names:" not in raw  # sealed: the fingerprint; the lineage in clear
    assert (await check(store, Sealer(OLD), OLD)).note is None


@pytest.mark.parametrize(
    "sealer, names, message",
    [
        (Sealer(NEW), NEW, "--encryption-key does not open the store's canary"),
        (Sealer(None), None, "this one has none"),
        (Sealer(OLD, names="another names key"), "another names key", "--namespace-key"),
    ],
)
async def test_other_secrets_are_refused_with_the_reason(store, sealer, names, message):
    assert (await check(store, Sealer(OLD), OLD)).note is None
    with pytest.raises(CanaryMismatch, match=message):
        await check(store, sealer, names)


async def test_a_rotation_passes_and_then_refuses_the_old_key_alone(store):
    assert (await check(store, Sealer(OLD), OLD)).note is None
    assert (await check(store, Sealer(NEW, previous=OLD, names=OLD), OLD)).note is None  # sealed again with NEW
    assert Sealer(NEW).open(await store.get(CANARY_KEY), CANARY_KEY) is not None
    assert (await check(store, Sealer(NEW, names=OLD), OLD)).note is None  # the previous key dropped
    with pytest.raises(CanaryMismatch, match="does not open"):
        await check(store, Sealer(OLD), OLD)


async def test_switching_encryption_on_is_a_warning_then_keyless_replicas_are_refused(store):
    assert (await check(store, Sealer(None), None)).note is None
    assert (await check(store, Sealer(None), None)).note is None
    assert "used without --encryption-key" in (await check(store, Sealer(OLD), OLD)).note
    with pytest.raises(CanaryMismatch, match="has none"):
        await check(store, Sealer(None), None)


def test_an_unreachable_store_is_not_waited_for(tmp_path, monkeypatch):
    from tests.harness.servers import free_port

    settings = ServerSettings(data_dir=tmp_path, redis_url=f"redis://127.0.0.1:{free_port()}/0", encryption_key=OLD)
    from proxy.offload.canary import LINEAGE_ENV, UNCHECKED_ENV

    monkeypatch.setenv(UNCHECKED_ENV, "0")  # restored after the test: in-process proxies must never keep it
    monkeypatch.setenv(LINEAGE_ENV, "")
    note = startup_check(settings)
    assert note is not None and "not checked" in note and "once the store answers" in note
    assert os.environ[UNCHECKED_ENV] == "1"  # the workers check it


async def test_a_check_made_late_stops_the_server_on_a_mismatch(private_redis_url):
    """The store does not answer (its writes paused: GETEX waits) until the check is under way."""
    import asyncio

    import redis

    from proxy.offload.canary import keep
    from proxy.store.redis import RedisStore

    other = RedisStore(private_redis_url)
    assert (await check(other, Sealer(OLD), OLD)).note is None  # the fleet's canary
    await other.close()
    admin = redis.Redis.from_url(private_redis_url)
    admin.execute_command("CLIENT", "PAUSE", "60000", "WRITE")
    store = RedisStore(private_redis_url, timeout=0.2)
    stopped = asyncio.Event()
    try:
        task = asyncio.get_running_loop().create_task(
            keep(store, Sealer(NEW), NEW, lineage=None, stop=stopped.set, every=0.05)
        )
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

    from proxy.offload.canary import keep
    from proxy.store.redis import RedisStore

    store = RedisStore(private_redis_url)
    stopped = asyncio.Event()
    task = asyncio.get_running_loop().create_task(
        keep(store, Sealer(OLD), OLD, lineage=None, stop=stopped.set, every=0.05)
    )
    try:
        for _ in range(200):
            if await store.get(CANARY_KEY) is not None:
                break
            await asyncio.sleep(0.05)
        assert await store.get(CANARY_KEY) is not None  # written: the first replica
        await asyncio.sleep(0.2)  # checked again meanwhile: fine
        assert not task.done() and not stopped.is_set()
    finally:
        task.cancel()
        await store.close()


# ---- while replicas run: the canary kept there, and who wins when two replicas disagree


async def test_a_running_replica_writes_the_canary_again_once_the_store_lost_it(store):
    fleet = await check(store, Sealer(OLD), OLD)
    await store.delete(CANARY_KEY)  # a Redis restarted without persistence
    again = await check(store, Sealer(OLD), OLD, lineage=fleet.lineage)
    assert again == Checked(fleet.lineage, LOST)
    with pytest.raises(CanaryMismatch, match="does not open"):  # a replica with another key starting now
        await check(store, Sealer(NEW), NEW)
    assert await check(store, Sealer(OLD), OLD, lineage=fleet.lineage) == Checked(fleet.lineage)  # quiet since


async def test_other_secrets_written_after_a_loss_are_overwritten_and_their_replica_stops(store):
    fleet = await check(store, Sealer(OLD), OLD)
    await store.delete(CANARY_KEY)
    wrong = await check(store, Sealer(NEW), NEW)  # started while the store had lost it: a lineage of its own
    assert wrong.note is None and wrong.lineage != fleet.lineage
    restored = await check(store, Sealer(OLD), OLD, lineage=fleet.lineage)  # the fleet's replica, running
    assert restored.lineage == fleet.lineage and restored.note == RESTORED and restored.alarm
    with pytest.raises(CanaryMismatch, match="does not open"):  # the wrong replica's next check: it stops
        await check(store, Sealer(NEW), NEW, lineage=wrong.lineage)
    assert (await check(store, Sealer(OLD), OLD)).lineage == fleet.lineage  # the fleet's replicas start again
    with pytest.raises(CanaryMismatch):
        await check(store, Sealer(NEW), NEW)


async def test_another_namespace_key_written_after_a_loss_is_overwritten_too(store):
    fleet = await check(store, Sealer(OLD), OLD)
    await store.delete(CANARY_KEY)
    wrong = await check(store, Sealer(OLD, names="another names key"), "another names key")
    assert (await check(store, Sealer(OLD), OLD, lineage=fleet.lineage)).note == RESTORED
    with pytest.raises(CanaryMismatch, match="--namespace-key"):
        await check(store, Sealer(OLD, names="another names key"), "another names key", lineage=wrong.lineage)


async def test_a_rotation_moves_the_fleet_on_without_stopping_the_replicas_not_yet_restarted(store):
    fleet = await check(store, Sealer(OLD), OLD)
    rotating = await check(store, Sealer(NEW, previous=OLD, names=OLD), OLD)
    assert rotating.lineage == fleet.lineage  # sealed again with NEW: the same fleet
    moved = await check(store, Sealer(OLD), OLD, lineage=fleet.lineage)  # a replica still on OLD alone, running
    assert moved.lineage == fleet.lineage and moved.alarm and moved.note.startswith(MOVED_ON)
    assert Sealer(NEW).open(_parse(await store.get(CANARY_KEY))[1], CANARY_KEY) is not None  # left as it is
    with pytest.raises(CanaryMismatch):  # ...and refused once restarted so
        await check(store, Sealer(OLD), OLD)


async def test_replicas_of_one_fleet_that_began_two_lineages_keep_the_older(store):
    first = await check(store, Sealer(OLD), OLD)
    await store.delete(CANARY_KEY)
    second = await check(store, Sealer(OLD), OLD)  # a replica of the fleet started after the loss
    assert second.lineage != first.lineage
    assert await check(store, Sealer(OLD), OLD, lineage=first.lineage) == Checked(first.lineage)
    assert await check(store, Sealer(OLD), OLD, lineage=second.lineage) == Checked(first.lineage)  # joins it


async def test_a_store_with_the_canary_of_the_layout_before_is_checked_by_it(store):
    from proxy.offload.canary import CANARY_V1, HEADER_V1, _fingerprint

    await store.delete(CANARY_V1)
    await store.put(CANARY_V1, Sealer(OLD).seal(HEADER_V1 + _fingerprint(OLD), CANARY_V1), 600)
    try:
        with pytest.raises(CanaryMismatch, match="does not open"):
            await check(store, Sealer(NEW), NEW)
        assert await store.get(CANARY_KEY) is None
        assert (await check(store, Sealer(OLD), OLD)).note is None and await store.get(CANARY_KEY) is not None
        assert await store.get(CANARY_V1) is not None  # left for the replicas of the version before
    finally:
        await store.delete(CANARY_V1)


async def test_the_keeper_writes_it_again_as_soon_as_the_store_answers_again(store):
    import asyncio

    from proxy.offload.canary import keep

    fleet = await check(store, Sealer(OLD), OLD)
    woken, stopped = asyncio.Event(), asyncio.Event()
    task = asyncio.get_running_loop().create_task(
        keep(store, Sealer(OLD), OLD, lineage=fleet.lineage, stop=stopped.set, every=3600, woken=woken)
    )
    try:
        await asyncio.sleep(0.1)
        await store.delete(CANARY_KEY)
        woken.set()  # the guarded store's sign: the store answers again after an outage
        for _ in range(200):
            if await store.get(CANARY_KEY) is not None:
                break
            await asyncio.sleep(0.02)
        assert (await check(store, Sealer(OLD), OLD)).lineage == fleet.lineage and not stopped.is_set()
    finally:
        task.cancel()
