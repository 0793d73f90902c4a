"""One background summary per conversation across a fleet: a lease in the shared store.

One process makes one background summary of a conversation at a time (`SummaryScheduler.busy`).
The lease makes that true for every replica on one store: it is taken where one process
becomes busy (when the job is handed to the scheduler, once the turn that prepared it has been
answered) and any replica's next turn that finds it held starts no summary of its own, as the
process that holds it would not: the summary under way is found once it is stored.

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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from proxy.offload.tenant import key
from proxy.store import Store, StoreUnavailable

log = logging.getLogger("proxy")

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
