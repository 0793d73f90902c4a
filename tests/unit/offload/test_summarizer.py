"""The summariser (`proxy.offload.summarizer`): the background summaries (the scheduler and a
conversation's lease on its background summary), and reading a summary answer in linear time
(each part's own account opens its section)."""

from __future__ import annotations

import asyncio
import re

import httpx2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.formats.chat._request import summary_answer
from proxy.offload import summarizer as lease
from proxy.offload.summarizer import SummaryFailed, SummaryScheduler, snapshot_in, summarize_prefix
from proxy.store import StoreUnavailable
from proxy.store.guarded import GuardedStore
from proxy.store.sqlite import SQLiteStore

# The background summaries: the scheduler (bounded, one job per key, drained or cancelled at
# shutdown) and a conversation's lease on its background summary (owned, renewed, released, never
# another's).

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


KEY = "off:{ns}:lease:conv"


@pytest.fixture
async def store(tmp_path):
    s = SQLiteStore(tmp_path)
    yield s
    await s.close()


def test_the_ttl_follows_the_summary_timeout_within_bounds():
    assert [lease.lease_ttl(t) for t in (0.2, 1, 2.5, 60)] == [1, 1, 3, lease.LEASE_MAX]


async def test_one_owner_at_a_time_and_a_release_frees_it(store):
    first = await lease.Lease.take(store, KEY, 60)
    assert first is not None and await lease.held(store, KEY)
    assert await lease.Lease.take(store, KEY, 60) is None
    await first.release()
    assert not await lease.held(store, KEY)
    second = await lease.Lease.take(store, KEY, 60)
    assert second is not None and second.owner != first.owner
    await first.release()  # once only: the second owner's lease stays
    assert await lease.held(store, KEY)
    await second.release()


async def test_a_lease_is_renewed_past_its_ttl_while_held(store):
    held = await lease.Lease.take(store, KEY, 1)
    await asyncio.sleep(1.6)
    assert await lease.held(store, KEY)
    await held.release()
    assert not await lease.held(store, KEY)


async def test_a_lapsed_lease_taken_by_another_is_not_released_by_the_first(store):
    first = await lease.Lease.take(store, KEY, 1)
    first._keeper.cancel()  # as if its replica stalled: no renewal
    await asyncio.sleep(1.2)
    second = await lease.Lease.take(store, KEY, 60)
    assert second is not None
    await first.release()
    assert await store.get(KEY) == second.owner
    await second.release()


async def test_the_job_releases_its_lease_before_the_scheduler_counts_it_done(store):
    scheduler, gate, seen = SummaryScheduler(), asyncio.Event(), []

    async def run() -> None:
        await gate.wait()

    def submit(job, on_end) -> bool:
        return scheduler.submit("conv", job, on_end=on_end)

    assert await lease.submit_leased(store, KEY, 60, run=run, submit=submit)
    assert scheduler.busy("conv") and await lease.held(store, KEY)
    assert not await lease.submit_leased(store, KEY, 60, run=run, submit=submit)  # held: nothing submitted
    scheduler._on_change = lambda state: seen.append(state.running)
    gate.set()
    await asyncio.wait_for(scheduler.idle(), 5)
    assert not await lease.held(store, KEY) and seen[-1] == 0


async def test_a_refused_or_dropped_job_frees_its_lease(store):
    full = SummaryScheduler(concurrency=1, queue=0)
    gate = asyncio.Event()

    async def run() -> None:
        await gate.wait()

    assert full.submit("other", run)
    assert not await lease.submit_leased(
        store, KEY, 60, run=run, submit=lambda job, on_end: full.submit("conv", job, on_end=on_end)
    )
    assert not await lease.held(store, KEY)  # refused: released at once

    queued = SummaryScheduler(concurrency=1, queue=4, per_tenant=10)
    assert queued.submit("other", run)
    assert await lease.submit_leased(
        store, KEY, 60, run=run, submit=lambda job, on_end: queued.submit("conv", job, on_end=on_end)
    )
    await queued.shutdown(grace=0)  # the queued job is dropped unstarted
    for _ in range(100):
        if not await lease.held(store, KEY):
            break
        await asyncio.sleep(0.01)
    assert not await lease.held(store, KEY)
    gate.set()
    await full.shutdown(grace=1)


async def test_a_store_that_is_down_starts_no_job_and_fails_nothing(store):
    async def no_answer() -> bool:  # a request's ping while the store is down answers nothing
        return False

    store.ping = no_answer
    guarded = GuardedStore(store)
    guarded.available = False
    with pytest.raises(StoreUnavailable):
        await lease.held(guarded, KEY)
    submitted = []
    assert not await lease.submit_leased(
        guarded, KEY, 60, run=asyncio.sleep, submit=lambda job, on_end: submitted.append(job) or True
    )
    assert submitted == []


async def test_a_scheduler_that_raises_frees_the_lease(store):
    def broken(job, on_end) -> bool:
        raise RuntimeError("scheduler bug")

    with pytest.raises(RuntimeError):
        await lease.submit_leased(store, KEY, 60, run=asyncio.sleep, submit=broken)
    assert not await lease.held(store, KEY)


INDEX = "off:{ns}:leases:opening"


def listing(name: str, cut: int = 4) -> lease.Listing:
    return lease.Listing(INDEX, cut, f"{name}:v1:layout")


async def found(store, *prefixes: str) -> bool:
    """Does the index name a lease held on one of these prefixes (this history's)?"""

    async def covered(listed):
        assert listed == sorted(listed)  # by rising cut: the history hashed once
        return [name for _, name in listed if name.partition(":")[0] in prefixes]

    return await lease.under_way(store, INDEX, namespace="ns", suffix=":v1:layout", covered=covered)


async def test_a_lease_is_found_by_the_prefix_it_covers_not_by_the_opening(store):
    from proxy.offload.tenant import key

    a = listing("prefix-of-a")
    taken = await lease.Lease.take(store, key("ns", "lease", a.name), 60, listed=a)
    assert taken is not None
    assert await found(store, "prefix-of-a")  # a later turn of the same conversation
    assert not await found(store, "prefix-of-b")  # another conversation with the same opening
    b = listing("prefix-of-b", cut=6)  # ...takes a lease of its own
    other = await lease.Lease.take(store, key("ns", "lease", b.name), 60, listed=b)
    assert other is not None and await found(store, "prefix-of-b")
    assert await lease.Lease.take(store, key("ns", "lease", a.name), 60, listed=a) is None  # the same prefix: shared
    await taken.release()
    assert not await found(store, "prefix-of-a") and await found(store, "prefix-of-b")
    assert [entry for entry, _ in (await store.ranked(INDEX, 0, 10))[1]] == [b.entry]  # unlisted as released
    await other.release()
    assert not await found(store, "prefix-of-b")


async def test_a_lapsed_lease_is_not_found(store):
    from proxy.offload.tenant import key

    a = listing("prefix-of-a")
    taken = await lease.Lease.take(store, key("ns", "lease", a.name), 1, listed=a)
    taken._keeper.cancel()  # its replica stalled: renewed no more
    await asyncio.sleep(1.3)
    assert not await lease.held(store, key("ns", "lease", a.name)) and not await found(store, "prefix-of-a")


async def test_a_lease_that_cannot_be_listed_is_not_kept(store):
    from proxy.offload.tenant import key

    async def refused(*args, **kwargs) -> None:
        raise StoreUnavailable("down")

    store.rank = refused
    with pytest.raises(StoreUnavailable):
        await lease.Lease.take(store, key("ns", "lease", "prefix:v1:layout"), 60, listed=listing("prefix"))
    assert not await lease.held(store, key("ns", "lease", "prefix:v1:layout"))


# Reading a summary answer: the snapshot block is found in linear time (summarizer.snapshot_in).
#
# A lazy regex (`<state_snapshot>.*?</state_snapshot>`, re.S) is quadratic when the answer opens
# the tag many times and never closes it: 16 s for 256 KB, on the event loop, for an answer the
# model (steerable by the history it summarises) or an upstream the caller names writes. The
# linear search must find exactly what the regex found.

LAZY = re.compile(r"<state_snapshot>.*?</state_snapshot>", re.S)


class Canned:
    def __init__(self, content: str) -> None:
        self.content = content

    async def send(self, method, path, *, headers, content=None, base=None, query=b"", record=None):
        body = {"choices": [{"message": {"role": "assistant", "content": self.content}}], "usage": {}}
        return httpx2.Response(200, json=body)


async def test_an_answer_of_unclosed_snapshot_tags_is_refused():
    with pytest.raises(SummaryFailed):
        await summarize_prefix(
            Canned("<state_snapshot>" * 16_000), [], ("chat/completions", {}), read=summary_answer, timeout=30
        )
    made = await summarize_prefix(
        Canned("x <state_snapshot>a</state_snapshot> y"), [], ("chat/completions", {}), read=summary_answer, timeout=30
    )
    assert made.text == "<state_snapshot>a</state_snapshot>"


pieces = st.sampled_from(["<state_snapshot>", "</state_snapshot>", "<state_", "snapshot>", "a", "\n", "</"])


@given(st.lists(pieces, max_size=12).map("".join))
def test_the_linear_search_finds_what_the_regex_found(text):
    match = LAZY.search(text)
    assert snapshot_in(text) == (match.group(0) if match else None)
