"""A store that knows when its backend is down, so requests skip it instead of waiting.

Every failure marks the store unavailable; from then on calls fail at once (offloading is
skipped, requests go through unchanged) until a background ping succeeds again. A backend
that comes back may have lost data: every request asks the store which of its items exist, so
lost content-addressed items are simply stored again by the next request carrying them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Sequence
from typing import TypeVar

from proxy.observe import Metrics
from proxy.store.base import Store, StoreUnavailable

T = TypeVar("T")
log = logging.getLogger("proxy.store")


class GuardedStore:
    def __init__(self, inner: Store, *, ping_every: float = 1.0, ping_timeout: float = 1.0,
                 metrics: Metrics | None = None) -> None:
        self.inner, self.metrics = inner, metrics
        self.available = True
        self.ping_every, self.ping_timeout = ping_every, ping_timeout
        self._monitor: asyncio.Task | None = None

    def _down(self, why: object) -> None:
        if self.available:
            log.warning("store unavailable: %s", why)
        self.available = False

    async def _call(self, awaitable: Awaitable[T]) -> T:
        if not self.available:
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            raise StoreUnavailable("store marked unavailable; waiting for it to answer pings again")
        started = time.perf_counter()
        try:
            return await awaitable
        except StoreUnavailable as exc:
            if self.metrics:
                self.metrics.store_errors.inc()
            self._down(exc)
            raise
        finally:
            if self.metrics:
                op = awaitable.__qualname__.rsplit(".", 1)[-1] if hasattr(awaitable, "__qualname__") else "op"
                self.metrics.store_seconds.labels(op).observe(time.perf_counter() - started)

    async def ping(self) -> bool:
        try:
            ok = await asyncio.wait_for(self.inner.ping(), self.ping_timeout)
        except (asyncio.TimeoutError, StoreUnavailable, OSError):
            ok = False
        if ok and not self.available:
            log.warning("store available again")
        if ok:
            self.available = True
        else:
            self._down("ping failed")
        return ok

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.ping_every)
            await self.ping()

    def start(self) -> None:
        if self._monitor is None:
            self._monitor = asyncio.get_running_loop().create_task(self._watch())

    async def close(self) -> None:
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

    async def exists(self, key: str) -> bool:
        return await self._call(self.inner.exists(key))

    async def touch(self, keys: Sequence[str], ttl: int, *, slack: int = 0) -> list[bool]:
        return await self._call(self.inner.touch(keys, ttl, slack=slack))

    async def delete(self, key: str) -> None:
        await self._call(self.inner.delete(key))

    async def add_members(self, key: str, members: Sequence[str], ttl: int, *, slack: int = 0) -> None:
        await self._call(self.inner.add_members(key, members, ttl, slack=slack))

    async def members(self, key: str) -> set[str]:
        return await self._call(self.inner.members(key))

    async def push(self, key: str, value: bytes, *, max_len: int, ttl: int) -> None:
        await self._call(self.inner.push(key, value, max_len=max_len, ttl=ttl))

    async def items(self, key: str) -> list[bytes]:
        return await self._call(self.inner.items(key))

    async def incr(self, key: str, amount: int, ttl: int) -> int:
        return await self._call(self.inner.incr(key, amount, ttl))
