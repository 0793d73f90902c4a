"""The background summaries' scheduler: bounded, one job per key, drained or cancelled at shutdown."""

from __future__ import annotations

import asyncio

import pytest

from proxy.offload.background import SummaryScheduler

pytestmark = pytest.mark.anyio


def blocked(log: list[str], name: str, gate: asyncio.Event):
    async def job() -> None:
        log.append(f"start {name}")
        await gate.wait()
        log.append(f"end {name}")

    return job


async def test_at_most_concurrency_run_the_rest_wait_in_order_and_a_key_runs_once():
    gate, log, states = asyncio.Event(), [], []
    scheduler = SummaryScheduler(concurrency=2, queue=2, per_tenant=100, on_change=states.append)
    assert scheduler.submit("a", blocked(log, "a", gate)) and scheduler.submit("b", blocked(log, "b", gate))
    assert not scheduler.submit("a", blocked(log, "a2", gate))  # the same key: already here
    assert scheduler.submit("c", blocked(log, "c", gate)) and scheduler.submit("d", blocked(log, "d", gate))
    assert not scheduler.submit("e", blocked(log, "e", gate))  # 2 running, 2 queued: full
    await asyncio.sleep(0)
    state = scheduler.state()
    assert (state.running, state.queued, state.dropped) == (2, 2, 1) and scheduler.busy("c")
    assert log == ["start a", "start b"]
    gate.set()
    await asyncio.wait_for(scheduler.idle(), 5)
    assert log[:2] == ["start a", "start b"] and sorted(log) == sorted(
        f"{w} {n}" for n in "abcd" for w in ("start", "end")
    )
    assert not scheduler.busy("a") and scheduler.submit("a", blocked(log, "a3", gate))  # free again
    await asyncio.wait_for(scheduler.idle(), 5)
    assert states[-1].running == 0 and states[-1].oldest_seconds == 0


async def test_a_queued_job_older_than_max_age_is_dropped_unstarted():
    gate, log = asyncio.Event(), []
    scheduler = SummaryScheduler(concurrency=1, queue=5, max_age=0.05, per_tenant=100)
    scheduler.submit("a", blocked(log, "a", gate))
    scheduler.submit("b", blocked(log, "b", gate))
    await asyncio.sleep(0.1)
    assert scheduler.state().oldest_seconds >= 0.1
    gate.set()
    await asyncio.wait_for(scheduler.idle(), 5)
    assert log == ["start a", "end a"] and scheduler.state().dropped == 1 and not scheduler.busy("b")


async def test_a_failing_job_frees_its_slot():
    async def boom() -> None:
        raise RuntimeError("bug")

    scheduler = SummaryScheduler(concurrency=1, queue=1, per_tenant=100)
    done = []

    async def after() -> None:
        done.append(True)

    scheduler.submit("x", boom)
    scheduler.submit("y", after)
    await asyncio.wait_for(scheduler.idle(), 5)
    assert done == [True] and scheduler.state().running == 0


async def test_shutdown_drops_the_queue_waits_the_grace_then_cancels():
    log, cancelled = [], []
    quick, never = asyncio.Event(), asyncio.Event()

    async def stubborn() -> None:
        try:
            await never.wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    scheduler = SummaryScheduler(concurrency=2, queue=5, per_tenant=100)
    scheduler.submit("quick", blocked(log, "quick", quick))
    scheduler.submit("stuck", stubborn)
    scheduler.submit("queued", blocked(log, "queued", quick))
    await asyncio.sleep(0)
    asyncio.get_running_loop().call_later(0.05, quick.set)
    await asyncio.wait_for(scheduler.shutdown(grace=0.3), 5)
    assert log == ["start quick", "end quick"]  # finished within the grace; the queued one never started
    assert cancelled == [True] and scheduler.state().running == 0 and scheduler.state().dropped == 1
    assert not scheduler.submit("late", blocked(log, "late", quick))  # closed


async def test_one_tenant_cannot_take_every_slot_nor_the_memory():
    gate, log = asyncio.Event(), []
    scheduler = SummaryScheduler(concurrency=2, queue=10, per_tenant=2, max_weight=1000)
    assert scheduler.submit("t1:a", blocked(log, "a", gate), tenant="t1", weight=100)
    assert scheduler.submit("t1:b", blocked(log, "b", gate), tenant="t1", weight=100)
    assert not scheduler.submit("t1:c", blocked(log, "c", gate), tenant="t1", weight=100)  # its share is used
    assert scheduler.submit("t2:a", blocked(log, "t2a", gate), tenant="t2", weight=700)  # another tenant: queued
    assert not scheduler.submit("t3:a", blocked(log, "t3a", gate), tenant="t3", weight=200)  # 900 + 200 > 1000
    assert scheduler.state().dropped == 2
    gate.set()
    await asyncio.wait_for(scheduler.idle(), 5)
    # all released: a job heavier than the limit still runs when it is alone
    assert scheduler.submit("t3:a", blocked(log, "t3a", gate), tenant="t3", weight=5000)
    await asyncio.wait_for(scheduler.idle(), 5)
    assert "end t3a" in log and scheduler._weight == 0 and scheduler._tenants == {}
