"""Summaries made in the background: a bounded number at once, a bounded queue, one per key.

Bounded three ways against one caller crowding out the others or the memory: jobs per tenant
(`per_tenant`, queued and running), and the weight (tokens of history) all jobs hold together.

A job holds what its summarisation call needs, the caller's credentials included, only while
it waits or runs: a queued job older than `max_age` is dropped unstarted, a finished one is
forgotten at once, and at shutdown the queue is dropped and what runs gets `grace` seconds
before it is cancelled. Jobs run in a context of their own (not the request's that started
them, which has ended by then).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

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
