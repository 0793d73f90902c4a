"""When a request to the upstream is sent again: once, on a new connection, when the pooled
connection it went on was closed by the server before a byte of answer came back.

A server may close an idle keep-alive connection at any moment, without having said so
(uvicorn closes one about 2 ms after answering for an application that raised, with no
`Connection: close`): a request written into it just then fails with a ReadError, a WriteError or
"Server disconnected without sending a response". That server never read the request (RFC 9112
§9.3.1, an asynchronous close), so it is sent again whatever its method, as browsers and
HTTP clients do in exactly this case. The caveat of HTTP's idempotency rules stands: a server
that read a POST and then died without a byte of answer, on a reused connection, gets it twice.

Never after a byte of answer (the request may have been processed), never after a timeout, never
when a new connection failed (a server that really fails gets one attempt: one 502), never twice.
A streamed body goes again from its start while what the first attempt took of it is at most
REPLAY_LIMIT bytes (kept until then); past that it is not retried.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable

import httpx2

from proxy.upstream.network import Attempt

RETRIED = (httpx2.ReadError, httpx2.WriteError, httpx2.RemoteProtocolError)  # no TimeoutException among them
REPLAY_LIMIT = 1 << 20


def may_retry(exc: Exception, attempt: Attempt) -> bool:
    """Did `exc` end a request written into a reused connection before any answer came back?"""
    return isinstance(exc, RETRIED) and attempt.reused is True and attempt.received == 0


class Replayable:
    """A streamed request body that can be sent again from its start (`again`) after a first
    attempt (`first`) took at most REPLAY_LIMIT bytes of it."""

    def __init__(self, chunks: AsyncIterable[bytes]) -> None:
        self._source = chunks.__aiter__()
        self._taken: list[bytes] | None = []  # None: more than REPLAY_LIMIT was taken
        self._size = 0

    @property
    def replayable(self) -> bool:
        return self._taken is not None

    def forget(self) -> None:
        """The answer came: nothing will go again, and what was kept is let go."""
        self._taken = None

    async def first(self) -> AsyncGenerator[bytes, None]:
        async for chunk in self._source:
            if self._taken is not None:
                self._size += len(chunk)
                if self._size > REPLAY_LIMIT:
                    self._taken = None
                else:
                    self._taken.append(chunk)
            yield chunk

    async def again(self) -> AsyncGenerator[bytes, None]:
        """What the first attempt took, then the rest of the body (the first attempt's iteration
        left off mid-way: the source itself is not closed by it)."""
        if self._taken is None:
            raise RuntimeError("the body is past REPLAY_LIMIT: it cannot be sent again")
        for chunk in self._taken:
            yield chunk
        async for chunk in self._source:
            yield chunk
