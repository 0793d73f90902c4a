"""Statistics while the store is down: the turns are held (bounded), written once it is back in
the buckets of the minute they were served, nothing written twice; what the bound drops is
counted."""

from __future__ import annotations

import time

import pytest

from proxy.stats._counters import PriceTable, Turn, bucket_key, bucket_start, top_key
from proxy.stats._recorder import Recorder, session_keys, sessions_key
from proxy.store.base import StoreUnavailable
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore

pytestmark = pytest.mark.anyio
A, B = "a" * 32, "b" * 32


def turn(ns: str = A, *, session: str | None = None, t: float | None = None) -> Turn:
    return Turn(
        namespace=ns,
        session=session,
        time=t if t is not None else time.time(),
        route="chat",
        model="gpt-4o",
        status=200,
        stream=False,
        tokens_before=1000,
        tokens_after=400,
        action="compact",
    )


class Outage:
    """A real store behind a switch: while `down`, every call fails as an unreachable store's; with
    `fail_after`, the calls after that many fail (an outage starting mid-flush)."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner, self.down, self.fail_after, self.calls = inner, False, None, 0

    def __getattr__(self, name):
        method = getattr(self.inner, name)

        async def call(*args, **kwargs):
            self.calls += 1
            if self.down or (self.fail_after is not None and self.calls > self.fail_after):
                raise StoreUnavailable("down")
            return await method(*args, **kwargs)

        return call


@pytest.fixture
async def outage(tmp_path):
    store = Outage(SQLiteStore(tmp_path))
    yield store
    await store.inner.close()


async def requests_of(store, ns: str, t: float, grain: str = "m") -> int:
    [bucket] = await store.hashes([bucket_key(ns, grain, bucket_start(t, grain))])
    return bucket.get("requests", 0)


async def test_turns_served_while_the_store_is_down_are_written_when_it_is_back(outage):
    dropped: list[int] = []
    recorder = Recorder(PriceTable(), retention=86400, on_dropped=dropped.append)
    recorder.start(outage, Sealer(None))
    served = time.time() - 180  # three minutes ago: the flush happens later, in another minute
    outage.down = True
    recorder.record(turn(A, session="s", t=served))
    recorder.record(turn(B, t=served))
    assert await recorder.flush() == 0 and await recorder.flush() == 0  # no exception, nothing lost
    state = recorder.snapshot()
    assert state.queued == 2 and state.dropped == 0 and state.recorded == 0 and state.flush_failures == 2
    outage.down = False
    recorder.record(turn(A, session="s"))  # a turn served now, after the recovery
    assert await recorder.flush() == 3
    assert recorder.snapshot().queued == 0 and recorder.snapshot().recorded == 3
    assert await requests_of(outage.inner, A, served) == 1  # the minute it was served, not the flush's
    assert await requests_of(outage.inner, B, served) == 1
    assert await requests_of(outage.inner, A, time.time()) == 1
    turns_key, totals_key = session_keys(A, "s")
    assert len(await outage.inner.items(turns_key)) == 2
    [totals] = await outage.inner.hashes([totals_key])
    assert totals["requests"] == 2
    assert (await outage.inner.ranked(sessions_key(A), 0, 10))[0] == 1
    [top] = await outage.inner.hashes([top_key("h", bucket_start(served, "h"))])  # not a hash: ranked
    assert dropped == []
    await recorder.stop()


async def test_an_outage_mid_flush_writes_the_rest_later_and_nothing_twice(outage):
    recorder = Recorder(PriceTable(), retention=86400)
    recorder.start(outage, Sealer(None))
    now = time.time()
    for i in range(5):
        recorder.record(turn(A, session=f"s{i}", t=now))
    for fail_after in (3, 5, 6):  # down after a few of the 22 writes of each flush: buckets, tops, sessions
        outage.calls, outage.fail_after = 0, fail_after
        assert await recorder.flush() == 0
    outage.fail_after = None
    assert await recorder.flush() == 5
    assert await requests_of(outage.inner, A, now) == 5
    assert await requests_of(outage.inner, A, now, "d") == 5
    for i in range(5):
        turns_key, totals_key = session_keys(A, f"s{i}")
        assert len(await outage.inner.items(turns_key)) == 1
        [totals] = await outage.inner.hashes([totals_key])
        assert totals["requests"] == 1 and totals["tokens_before"] == 1000
    assert (await outage.inner.ranked(top_key("d", bucket_start(now, "d")), 0, 10))[1] == [(A, 5000.0)]
    await recorder.stop()


async def test_the_turns_held_are_bounded_and_those_dropped_counted(outage):
    dropped: list[int] = []
    recorder = Recorder(PriceTable(), retention=86400, max_queue=3, on_dropped=dropped.append)
    recorder.start(outage, Sealer(None))
    outage.down = True
    for _ in range(2):
        recorder.record(turn(A))
    await recorder.flush()  # held, unwritten: they count against the bound like queued ones
    for _ in range(3):
        recorder.record(turn(A))
    state = recorder.snapshot()
    assert state.queued == 3 and state.dropped == 2 and sum(dropped) == 2
    outage.down = False
    assert await recorder.flush() == 3
    assert await requests_of(outage.inner, A, time.time()) == 3
    await recorder.stop()


async def test_what_is_still_held_at_shutdown_is_counted_as_dropped(outage):
    dropped: list[int] = []
    recorder = Recorder(PriceTable(), retention=86400, on_dropped=dropped.append)
    recorder.start(outage, Sealer(None))
    outage.down = True
    recorder.record(turn(A, session="s"))
    recorder.record(turn(A))
    await recorder.stop(timeout=0.5)
    assert recorder.snapshot().dropped == 2 and dropped == [2]


async def test_background_summaries_counted_while_the_store_is_down_are_kept_too(outage):
    recorder = Recorder(PriceTable(), retention=86400)
    recorder.start(outage, Sealer(None))
    outage.down = True
    recorder.count_summary(A, True)
    recorder.count_summary(A, False)
    recorder.record(turn(A))
    assert await recorder.flush() == 0
    assert recorder.snapshot().dropped == 0 and recorder.snapshot().flush_failures == 1
    outage.down = False
    assert await recorder.flush() == 1
    [minute] = await outage.inner.hashes([bucket_key(A, "m", bucket_start(time.time(), "m"))])
    assert minute["summaries_made"] == 1 and minute["summaries_failed"] == 1 and minute["requests"] == 1
    await recorder.stop()
