"""One background summary per conversation across a fleet: a lease in the shared store.

One process makes one background summary of a conversation at a time (`SummaryScheduler.busy`).
The lease makes that true for every replica on one store: it is taken where one process
becomes busy (when the job is handed to the scheduler, once the turn that prepared it has been
answered) and any replica's next turn that finds it held starts no summary of its own, as the
process that holds it would not: the summary under way is found once it is stored.

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
from collections.abc import Awaitable, Callable

from proxy.store import Store, StoreUnavailable

log = logging.getLogger("proxy")

LEASE_MAX = 10  # seconds a dead replica's lease can block its conversation's summaries, at most


def lease_ttl(summary_timeout: float) -> int:
    """The lease's expiry: the summary timeout, within 1 and LEASE_MAX seconds."""
    return max(1, min(LEASE_MAX, math.ceil(summary_timeout)))


class Lease:
    def __init__(self, store: Store, key: str, owner: bytes, *, ttl: int) -> None:
        self.store, self.key, self.owner, self.ttl = store, key, owner, ttl
        self._released = False
        self._keeper = asyncio.get_running_loop().create_task(self._keep(), context=contextvars.Context())

    @classmethod
    async def take(cls, store: Store, key: str, ttl: int) -> Lease | None:
        """The lease, renewed from now on; None while another owner holds it."""
        owner = secrets.token_hex(16).encode()
        return cls(store, key, owner, ttl=ttl) if await store.put_if_absent(key, owner, ttl) else None

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            try:
                if not await self.store.extend_if(self.key, self.owner, self.ttl):
                    log.warning("a background summary's lease lapsed before it ended (%s)", self.key)
                    return
            except StoreUnavailable:
                continue  # the store may answer again before the lease lapses

    async def release(self) -> None:
        """Stop renewing and free the lease if it is still this owner's (once)."""
        if self._released:
            return
        self._released = True
        self._keeper.cancel()
        try:
            await self.store.delete_if(self.key, self.owner)
        except StoreUnavailable:
            pass  # it lapses by itself

    def release_soon(self) -> None:
        """`release` from synchronous code (a job dropped unstarted)."""
        if self._released:
            return
        task = asyncio.get_running_loop().create_task(self.release(), context=contextvars.Context())
        _releasing.add(task)
        task.add_done_callback(_releasing.discard)


_releasing: set[asyncio.Task] = set()  # releases under way: kept referenced until they end


async def held(store: Store, key: str) -> bool:
    """Is the lease held (by any replica, this one included)?"""
    return await store.get(key) is not None


Submit = Callable[[Callable[[], Awaitable[None]], Callable[[], None]], bool]


async def submit_leased(store: Store, key: str, ttl: int, *, run: Callable[[], Awaitable[None]],
                        submit: Submit) -> bool:
    """Take the lease, then hand `run` to `submit(job, on_end)` (the scheduler): the job
    releases the lease as it ends (before the scheduler counts it done), `on_end` if it was
    dropped unstarted or cancelled before it began. False (nothing started) when the lease is
    held elsewhere, the store is down or the scheduler refuses."""
    try:
        lease = await Lease.take(store, key, ttl)
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
