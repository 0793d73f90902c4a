"""A store that knows when its backend is down, so requests skip it instead of waiting.

Every failure marks the store unavailable; from then on calls fail at once (offloading is
skipped, requests go through unchanged) until a ping succeeds again: a background one every
second, or one a request starts (at most every `RECHECK_EVERY` s, waited for briefly), so that
the first request once the store is back uses it. A backend
that comes back may have lost data: every request asks the store which of its items exist, so
lost content-addressed items are simply stored again by the next request carrying them.

Timeouts are measured on the event loop, so a loop that is late (a long CPU-bound callback)
makes them fire although the store answered in time. The store's health is never inferred
from that: a ping's timeout counts only the time the loop was running on time (it is watched
in steps, and a step the loop ran late does not count), a failed ping during which the loop
was late is repeated, and if the loop stays late it decides nothing. A store call that fails
only after longer than any store timeout allows (the loop, not the store, held it up) is
not taken as an outage either: a ping decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, TypeVar

from proxy.store.base import Store, StoreUnavailable
from proxy.telemetry import Metrics

T = TypeVar("T")
log = logging.getLogger("proxy.store")

RECHECK_EVERY = 0.25  # while down, a request asks the store again at most this often (seconds)
RECHECK_WAIT = 0.05  # and waits this long at most for the answer (capped at a quarter of the ping timeout)
PING_STEPS = 4  # a ping's timeout is watched in this many steps
LATE_PINGS_GIVE_UP = 10  # a ping stops after this many timeouts' worth of wall time with the loop late


class GuardedStore:
    def __init__(
        self, inner: Store, *, ping_every: float = 1.0, ping_timeout: float = 1.0, metrics: Metrics | None = None
    ) -> None:
        self.inner, self.metrics = inner, metrics
        self.available = True
        self._show(True)
        self.ping_every, self.ping_timeout = ping_every, ping_timeout
        # a call failing later than this was held up by the loop: the store's own timeouts
        # (one to connect, one to answer: `--store-timeout` each) end it sooner
        self.slow_failure = 2 * ping_timeout + 0.25
        self._monitor: asyncio.Task[None] | None = None
        self._confirming: asyncio.Task[bool] | None = None
        self._recheck: asyncio.Future[bool] | None = None
        self._recheck_at = 0.0
        self._pinging: asyncio.Future[bool] | None = None  # the ping in flight, shared (`ping`)
        self.answering_again = asyncio.Event()  # set when the store answers after it was marked down

    def _show(self, available: bool) -> None:
        """`offload_store_up`: what this process currently makes of the store."""
        if self.metrics:
            self.metrics.store_up.set(1 if available else 0)

    def _down(self, why: object) -> None:
        if self.available:
            log.warning("store unavailable: %s", why)
        self.available = False
        self._show(False)

    def _confirm(self, why: object) -> None:
        """A call failed, but too late to blame the store for sure: let a ping decide."""
        log.info("store call failed after the event loop was late (%s); pinging to decide", why)
        if self._confirming is None or self._confirming.done():
            self._confirming = asyncio.get_running_loop().create_task(self.ping())

    async def _recovered(self) -> bool:
        """Marked down: is the store back since the last ping? The first request to come after
        it is should be served offloaded, not the ones after the next background ping. A ping
        starts at most every `RECHECK_EVERY` s; the requests meanwhile share it, waiting
        `RECHECK_WAIT` s at most (a hung store costs them that, once per recheck), else they
        go on without the store at once."""
        now = time.monotonic()
        if self._recheck is None or (self._recheck.done() and now - self._recheck_at >= RECHECK_EVERY):
            self._recheck_at = now
            self._recheck = asyncio.ensure_future(self.ping())
            self._recheck.add_done_callback(_retrieve)
        if not self._recheck.done():
            await asyncio.wait({self._recheck}, timeout=min(RECHECK_WAIT, self.ping_timeout / 4))
        return self.available

    async def _call(self, awaitable: Awaitable[T]) -> T:
        if not self.available and not await self._recovered():
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            raise StoreUnavailable("store marked unavailable; waiting for it to answer pings again")
        started = time.perf_counter()
        try:
            return await awaitable
        except StoreUnavailable as exc:
            if self.metrics:
                self.metrics.store_errors.inc()
            if time.perf_counter() - started > self.slow_failure:
                self._confirm(exc)
            else:
                self._down(exc)
            raise
        finally:
            if self.metrics:
                op = awaitable.__qualname__.rsplit(".", 1)[-1] if hasattr(awaitable, "__qualname__") else "op"
                self.metrics.store_seconds.labels(op).observe(time.perf_counter() - started)

    async def ping(self) -> bool:
        """Ask the backend; True when the store is (now) considered available. Callers at the
        same time share one ping: a flood of `/readyz` (no credential needed) against a hung
        store is one probe in flight, not a connection and a timeout each (64 at once held
        /healthz up to 1.1 s)."""
        if self._pinging is not None and not self._pinging.done():
            return await asyncio.shield(self._pinging)
        shared = self._pinging = asyncio.get_running_loop().create_future()
        answer = self.available  # what the others are told if this ping is cancelled
        try:  # run by its first caller, at once (not a task started later)
            answer = await self._ping()
            return answer
        finally:
            if not shared.done():  # (close() may have cancelled it)
                shared.set_result(answer)

    async def _ping(self) -> bool:
        ok, late = await self._probe()
        if not ok and late:  # the loop, not the store, may be why: ask again
            ok, late = await self._probe()
        if ok:
            if not self.available:
                log.warning("store available again")
                self.answering_again.set()
            self.available = True
            self._show(True)
        elif late:
            log.info("store ping inconclusive: the event loop was late; availability unchanged")
        else:
            self._down("ping failed")
        return self.available if late and not ok else ok

    async def _probe(self) -> tuple[bool, bool]:
        """(answered, loop_late): did the backend answer within `ping_timeout` seconds of time
        the loop ran on time, and was the loop late meanwhile (then a failure proves nothing)."""
        step = self.ping_timeout / PING_STEPS
        task = asyncio.ensure_future(self.inner.ping())
        started = time.monotonic()
        on_time = 0  # steps waited with the loop on time
        late = False
        try:
            while True:
                begun = time.monotonic()
                done, _ = await asyncio.wait({task}, timeout=step)
                now = time.monotonic()
                if now - begun > 2 * step:  # this step ran late: the loop was held up
                    late = True
                elif not done:
                    on_time += 1
                if done:
                    try:
                        return bool(task.result()), late
                    except (StoreUnavailable, OSError):
                        return False, late
                if on_time >= PING_STEPS or now - started > LATE_PINGS_GIVE_UP * self.ping_timeout:
                    return False, late
        finally:
            if not task.done():
                task.cancel()
                task.add_done_callback(_retrieve)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.ping_every)
            await self.ping()

    def start(self) -> None:
        if self._monitor is None:
            self._monitor = asyncio.get_running_loop().create_task(self._watch())

    async def close(self) -> None:
        for task in (self._confirming, self._recheck, self._pinging):
            if task is not None:
                task.cancel()
        if self._monitor is not None:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
        await self.inner.close()

    async def put(self, key: str, value: bytes, ttl: int) -> None:
        await self._call(self.inner.put(key, value, ttl))

    async def put_if_absent(self, key: str, value: bytes, ttl: int) -> bool:
        return await self._call(self.inner.put_if_absent(key, value, ttl))

    async def get(self, key: str, ttl: int | None = None) -> bytes | None:
        return await self._call(self.inner.get(key, ttl))

    async def touch(self, keys: Sequence[str], ttl: int, *, slack: int = 0) -> list[bool]:
        return await self._call(self.inner.touch(keys, ttl, slack=slack))

    async def delete(self, key: str) -> None:
        await self._call(self.inner.delete(key))

    async def delete_if(self, key: str, value: bytes) -> bool:
        return await self._call(self.inner.delete_if(key, value))

    async def extend_if(self, key: str, value: bytes, ttl: int) -> bool:
        return await self._call(self.inner.extend_if(key, value, ttl))

    async def replace_if(self, key: str, expected: bytes, value: bytes) -> bool:
        return await self._call(self.inner.replace_if(key, expected, value))

    async def add_members(self, key: str, members: Sequence[str], ttl: int, *, slack: int = 0) -> None:
        await self._call(self.inner.add_members(key, members, ttl, slack=slack))

    async def members(self, key: str) -> set[str]:
        return await self._call(self.inner.members(key))

    async def push(self, key: str, value: bytes, *, max_len: int, ttl: int) -> None:
        await self._call(self.inner.push(key, value, max_len=max_len, ttl=ttl))

    async def items(self, key: str) -> list[bytes]:
        return await self._call(self.inner.items(key))

    async def replace_items(self, key: str, replacements: Mapping[bytes, bytes]) -> int:
        return await self._call(self.inner.replace_items(key, replacements))

    async def incr(self, key: str, amount: int, ttl: int) -> int:
        return await self._call(self.inner.incr(key, amount, ttl))

    async def incr_fields(self, key: str, amounts: Mapping[str, int | float], ttl: int) -> None:
        await self._call(self.inner.incr_fields(key, amounts, ttl))

    async def set_fields(
        self, key: str, values: Mapping[str, int | float], ttl: int, *, only_new: bool = False
    ) -> None:
        await self._call(self.inner.set_fields(key, values, ttl, only_new=only_new))

    async def hashes(self, keys: Sequence[str]) -> list[dict[str, int | float]]:
        return await self._call(self.inner.hashes(keys))

    async def rank(self, key: str, member: str, score: float, *, ttl: int, drop_below: float | None = None) -> None:
        await self._call(self.inner.rank(key, member, score, ttl=ttl, drop_below=drop_below))

    async def rank_add(self, key: str, amounts: Mapping[str, float], ttl: int) -> None:
        await self._call(self.inner.rank_add(key, amounts, ttl))

    async def ranked(self, key: str, offset: int, limit: int) -> tuple[int, list[tuple[str, float]]]:
        return await self._call(self.inner.ranked(key, offset, limit))


def _retrieve(task: asyncio.Future[Any]) -> None:
    """A ping abandoned at its timeout: its outcome is not needed (and never logged as lost)."""
    if not task.cancelled():
        task.exception()
