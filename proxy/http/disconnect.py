"""Cancel upstream work as soon as the client goes away.

Starlette's StreamingResponse already stops a stream on disconnect; this covers the wait
before the upstream's response headers arrive (a non-streaming completion can take minutes).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from typing import TypeVar

from starlette.requests import Request

T = TypeVar("T")


class ClientDisconnected(Exception):
    pass


class ClientWatch:
    """Owns the request's receive channel: streams the body, then watches for disconnect."""

    def __init__(self, request: Request, *, body_read: bool = False) -> None:
        self._receive = request.receive
        self._request = request
        self._body_done = asyncio.Event()
        if body_read:
            self._body_done.set()

    async def body(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._request.stream():
                if chunk:
                    yield chunk
        finally:
            self._body_done.set()

    async def _disconnected(self) -> None:
        await self._body_done.wait()
        while (await self._receive())["type"] != "http.disconnect":
            pass

    async def run(self, work: Awaitable[T]) -> T:
        """Await `work` in this task; if the client disconnects first, cancel it and raise
        ClientDisconnected. (One watcher task, not a second task for the work: cheaper.)"""
        current = asyncio.current_task()
        gone = False

        async def watch() -> None:
            nonlocal gone
            await self._disconnected()
            gone = True
            if current is not None:
                current.cancel()

        watcher = asyncio.ensure_future(watch())
        try:
            return await work
        except asyncio.CancelledError:
            if gone and current is not None and current.uncancel() == 0:
                raise ClientDisconnected() from None
            raise
        finally:
            watcher.cancel()
