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
    """Owns the request's receive channel: streams the body, then watches for disconnect. Or,
    made with `until` (no HTTP request: a WebSocket's `response.create`), watches an event set
    when the client has gone away."""

    def __init__(self, request: Request | None, *, body_read: bool = False, gone: asyncio.Event | None = None) -> None:
        self._request = request
        self._gone = gone
        self._body_done = asyncio.Event()
        if body_read or request is None:
            self._body_done.set()

    @classmethod
    def until(cls, gone: asyncio.Event) -> ClientWatch:
        """The watch of a client that has no HTTP request: gone once `gone` is set."""
        return cls(None, gone=gone)

    async def body(self) -> AsyncIterator[bytes]:
        try:
            if self._request is not None:
                async for chunk in self._request.stream():
                    if chunk:
                        yield chunk
        finally:
            self._body_done.set()

    async def _disconnected(self) -> None:
        await self._body_done.wait()
        if self._request is None:
            if self._gone is not None:
                await self._gone.wait()
            else:
                await asyncio.Future()  # never gone
            return
        while (await self._request.receive())["type"] != "http.disconnect":
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
