"""Summaries made in the background: a bounded number at once in a process (`SummaryScheduler`),
and one per conversation across a fleet (`Lease`, in the shared store).

The scheduler: a bounded number at once, a bounded queue, one per key; bounded three ways against
one caller crowding out the others or the memory: jobs per tenant (`per_tenant`, queued and
running), and the weight (tokens of history) all jobs hold together. A job holds what its
summarisation call needs, the caller's credentials included, only while it waits or runs: a
queued job older than `max_age` is dropped unstarted, a finished one is forgotten at once, and at
shutdown the queue is dropped and what runs gets `grace` seconds before it is cancelled. Jobs run
in a context of their own (not the request's that started them, which has ended by then).

The lease makes `SummaryScheduler.busy` true for every replica on one store: it is taken where
one process becomes busy (when the job is handed to the scheduler, once the turn that prepared it
has been answered) and any replica's next turn that finds it held starts no summary of its own:
the summary under way is found once it is stored.

- what: the exact prefix the summary is made of (its hash, the summary prompt's version), so two
  replicas summarising the very same prefix share one call, and two conversations that only
  share their opening (a deterministic agent's parallel attempts) never hold each other's.
  While held, a lease is listed in its conversation opening's index (`Listing`, a ranked set
  scored by expiry): a later turn of the same conversation, whose cut has moved on, finds the
  summary under way there, by the prefix it covers (`under_way`);
- owner: a random token per lease; renewal and release compare it (compare-and-extend,
  compare-and-delete), so a replica whose lease lapsed never renews or frees the next owner's;
- expiry: `lease_ttl` (the summary timeout, at most LEASE_MAX seconds), renewed every third of it
  while the job is queued or runs, released when it ends or is dropped unstarted;
- a replica that dies (kill -9) renews no more: its lease lapses within the TTL and the next
  turn, on any replica, starts the summary;
- a store that is down: no lease is taken, so no background summary starts (as none could be
  stored); the turn itself goes on as it would have.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from proxy.offload.tenant import key
from proxy.store import Store, StoreUnavailable

log = logging.getLogger("proxy")
CANCEL_WAIT = 5.0  # at shutdown, how long (s) the jobs cancelled past their grace get to end


@dataclass
class _Job:
    key: str
    run: Callable[[], Awaitable[None]]
    queued: float
    tenant: str
    weight: int
    on_end: Callable[[], None] | None = None  # called once it has ended or was dropped


@dataclass(frozen=True)
class SchedulerState:
    queued: int
    running: int
    oldest_seconds: float  # age of the oldest job queued or running (0 when none)
    dropped: int  # jobs never started: queue full, too old, or shut down


class SummaryScheduler:
    def __init__(
        self,
        *,
        concurrency: int = 4,
        queue: int = 64,
        max_age: float = 120.0,
        per_tenant: int | None = None,
        max_weight: int = 32_000_000,
        on_change: Callable[[SchedulerState], None] | None = None,
    ) -> None:
        self.concurrency, self.queue_size, self.max_age = concurrency, queue, max_age
        self.per_tenant = per_tenant or concurrency
        self.max_weight = max_weight
        self._queue: deque[_Job] = deque()
        self._running: dict[str, tuple[asyncio.Task[None], float]] = {}
        self._jobs: dict[str, _Job] = {}  # queued or running, by key
        self._tenants: dict[str, int] = {}
        self._weight = 0
        self._closed = False
        self._dropped = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._on_change = on_change

    def busy(self, key: str) -> bool:
        """Is a job with this key queued or running here?"""
        return key in self._jobs

    def submit(
        self,
        key: str,
        run: Callable[[], Awaitable[None]],
        *,
        tenant: str = "",
        weight: int = 0,
        on_end: Callable[[], None] | None = None,
    ) -> bool:
        """Start `run` now or when a slot frees; False (nothing started) when the same key is
        already here, the queue, the tenant's share or the weight is full, or it is closed.
        `weight`: what the job holds in memory (tokens of history), released when it ends.
        `on_end`: called when the job has ended, or was dropped without ever running."""
        if self._closed or key in self._jobs:
            return False
        if (
            (len(self._running) >= self.concurrency and len(self._queue) >= self.queue_size)
            or self._tenants.get(tenant, 0) >= self.per_tenant
            or (self._jobs and self._weight + weight > self.max_weight)
        ):
            self._dropped += 1
            self._changed()
            return False
        job = _Job(key, run, time.monotonic(), tenant, weight, on_end)
        self._jobs[key] = job
        self._tenants[tenant] = self._tenants.get(tenant, 0) + 1
        self._weight += weight
        self._idle.clear()
        if len(self._running) < self.concurrency:
            self._start(job)
        else:
            self._queue.append(job)
        self._changed()
        return True

    def _start(self, job: _Job) -> None:
        task = asyncio.get_running_loop().create_task(self._guarded(job), context=contextvars.Context())
        self._running[job.key] = (task, job.queued)
        key = job.key
        task.add_done_callback(lambda _task: self._finished(key))

    async def _guarded(self, job: _Job) -> None:
        try:
            await job.run()
        except asyncio.CancelledError:
            raise
        except Exception:  # a job reports its own failures; this is a bug, not a failed summary
            log.exception("background summary crashed")

    def _forget(self, key: str) -> None:
        job = self._jobs.pop(key, None)
        if job is not None:
            self._weight -= job.weight
            left = self._tenants.get(job.tenant, 1) - 1
            if left > 0:
                self._tenants[job.tenant] = left
            else:
                self._tenants.pop(job.tenant, None)
            if job.on_end is not None:
                try:
                    job.on_end()
                except Exception:  # the scheduler's own bookkeeping must go on
                    log.exception("a background summary's end callback failed")

    def _finished(self, key: str) -> None:
        self._running.pop(key, None)
        self._forget(key)
        now = time.monotonic()
        while self._queue and len(self._running) < self.concurrency and not self._closed:
            job = self._queue.popleft()
            if now - job.queued > self.max_age:  # its turn is long gone: do not start it late
                self._forget(job.key)
                self._dropped += 1
                continue
            self._start(job)
        if not self._running and not self._queue:
            self._idle.set()
        self._changed()

    def state(self) -> SchedulerState:
        now = time.monotonic()
        started = [queued for _, queued in self._running.values()] + [job.queued for job in self._queue]
        return SchedulerState(
            len(self._queue), len(self._running), now - min(started) if started else 0.0, self._dropped
        )

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self.state())

    async def idle(self) -> None:
        """Until nothing is queued or running (tests, benchmarks)."""
        await self._idle.wait()

    async def shutdown(self, grace: float) -> None:
        """Drop the queue; give running jobs `grace` seconds, then cancel them."""
        self._closed = True
        for job in self._queue:
            self._forget(job.key)
        self._dropped += len(self._queue)
        self._queue.clear()
        tasks = [task for task, _ in self._running.values()]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=grace)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=CANCEL_WAIT)
        self._changed()


LEASE_MAX = 10  # seconds a dead replica's lease can block its conversation's summaries, at most
LISTED_MAX = 64  # leases read from an opening's index (the conversations sharing it, summarising now)


@dataclass(frozen=True)
class Listing:
    """Where a lease is listed while held: its conversation opening's index, as `cut:name`
    (the summarised prefix's length, and the lease's name: its key's last part)."""

    index: str
    cut: int
    name: str

    @property
    def entry(self) -> str:
        return f"{self.cut}:{self.name}"

    async def show(self, store: Store, ttl: int) -> None:
        """Listed until `ttl` seconds from now (its score: its expiry); the expired ones dropped."""
        now = time.time()
        await store.rank(self.index, self.entry, now + ttl, ttl=ttl, drop_below=now)

    async def hide(self, store: Store, ttl: int) -> None:
        await store.rank(self.index, self.entry, 0.0, ttl=ttl, drop_below=time.time())


async def under_way(
    store: Store,
    index: str,
    *,
    namespace: str,
    suffix: str,
    covered: Callable[[list[tuple[int, str]]], Awaitable[list[str]]],
) -> bool:
    """Is a summary of a prefix of this history being made, here or on another replica? Of the
    leases an opening's `index` lists as held on names ending in `suffix` (the summary prompt's
    version), as (cut, name) by rising cut, those whose prefix `covered` finds in this history,
    is one still held?"""
    _, listed = await store.ranked(index, 0, LISTED_MAX)
    now = time.time()
    entries = sorted(
        (int(cut), name)
        for entry, expires in listed
        if expires >= now
        for cut, _, name in [entry.partition(":")]
        if cut.isdigit() and name.endswith(suffix)
    )
    for name in await covered(entries) if entries else []:
        if await held(store, key(namespace, "lease", name)):
            return True
    return False


def lease_ttl(summary_timeout: float) -> int:
    """The lease's expiry: the summary timeout, within 1 and LEASE_MAX seconds."""
    return max(1, min(LEASE_MAX, math.ceil(summary_timeout)))


class Lease:
    def __init__(self, store: Store, key: str, owner: bytes, *, ttl: int, listed: Listing | None = None) -> None:
        self.store, self.key, self.owner, self.ttl, self.listed = store, key, owner, ttl, listed
        self._released = False
        self._keeper = asyncio.get_running_loop().create_task(self._keep(), context=contextvars.Context())

    @classmethod
    async def take(cls, store: Store, key: str, ttl: int, *, listed: Listing | None = None) -> Lease | None:
        """The lease, renewed (and listed in `listed`'s index) from now on; None while another
        owner holds it. Raises StoreUnavailable (a lease it could not list is not kept)."""
        owner = secrets.token_hex(16).encode()
        if not await store.put_if_absent(key, owner, ttl):
            return None
        taken = cls(store, key, owner, ttl=ttl, listed=listed)
        if listed is not None:
            try:
                await listed.show(store, ttl)
            except StoreUnavailable:
                await taken.release()  # unlisted, a later turn of its conversation would not see it
                raise
        return taken

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            try:
                if not await self.store.extend_if(self.key, self.owner, self.ttl):
                    log.warning("a background summary's lease lapsed before it ended (%s)", self.key)
                    return
                if self.listed is not None:
                    await self.listed.show(self.store, self.ttl)
            except StoreUnavailable:
                continue  # the store may answer again before the lease lapses

    async def release(self) -> None:
        """Stop renewing and free the lease if it is still this owner's (once)."""
        if self._released:
            return
        self._released = True
        self._keeper.cancel()
        try:
            if await self.store.delete_if(self.key, self.owner) and self.listed is not None:
                await self.listed.hide(self.store, self.ttl)
        except StoreUnavailable:
            pass  # it lapses by itself, and so does its listing

    def release_soon(self) -> None:
        """`release` from synchronous code (a job dropped unstarted)."""
        if self._released:
            return
        task = asyncio.get_running_loop().create_task(self.release(), context=contextvars.Context())
        _releasing.add(task)
        task.add_done_callback(_releasing.discard)


_releasing: set[asyncio.Task[None]] = set()  # releases under way: kept referenced until they end


async def held(store: Store, key: str) -> bool:
    """Is the lease held (by any replica, this one included)?"""
    return await store.get(key) is not None


Submit = Callable[[Callable[[], Awaitable[None]], Callable[[], None]], bool]


async def submit_leased(
    store: Store,
    key: str,
    ttl: int,
    *,
    run: Callable[[], Awaitable[None]],
    submit: Submit,
    listed: Listing | None = None,
) -> bool:
    """Take the lease (listed in `listed`'s index), then hand `run` to `submit(job, on_end)` (the
    scheduler): the job releases the lease as it ends (before the scheduler counts it done),
    `on_end` if it was dropped unstarted or cancelled before it began. False (nothing started)
    when the lease is held elsewhere, the store is down or the scheduler refuses."""
    try:
        lease = await Lease.take(store, key, ttl, listed=listed)
    except StoreUnavailable:
        return False
    if lease is None:
        return False

    async def job() -> None:
        try:
            await run()
        finally:
            await lease.release()

    try:
        submitted = submit(job, lease.release_soon)
    except BaseException:
        await lease.release()  # never a lease renewed for a job nobody runs
        raise
    if not submitted:
        await lease.release()
        return False
    return True
