"""Request body limits, enforced before any work is done, in the shape of the API the client
speaks (`proxy.http.family`): a body
larger than `--max-body-bytes` is a 413, a body that stalls for `--body-timeout` is a 408.
"""

from __future__ import annotations

import asyncio

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.errors import Shape
from proxy.http.error_map import error_response
from proxy.http.family import family_of


def _closing(response: Response) -> Response:
    """The rest of a refused body is never read, so the connection cannot carry another request."""
    response.headers["connection"] = "close"
    return response


class BodyRefused(Exception):
    """Raised into the app from `receive`: the body will not be read any further."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status_code)
        self.response = response


class BodyLimit:
    """ASGI middleware: bodies above `max_bytes` are refused with 413, bodies whose next chunk
    takes longer than `idle_timeout` seconds to arrive with 408.

    A declared Content-Length is checked up front; a chunked body is counted as it arrives.
    A refusal is raised into the app from `receive`, so the app stops where it reads: the chat
    route before any work, the relay inside the upstream request, which is abandoned with its
    connection (the upstream never gets a complete request). Whatever the app then tries to
    answer is replaced by the refusal. Only waiting for body chunks is timed: once the body is
    complete, `receive` (which then waits for a disconnect) is passed through untouched.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, idle_timeout: float | None = None) -> None:
        self.app, self.max_bytes, self.idle_timeout = app, max_bytes, idle_timeout

    def _too_large(self, shape: Shape) -> Response:
        message = f"Request body exceeds {self.max_bytes} bytes (the proxy's --max-body-bytes)."
        return _closing(error_response(413, message, code="request_too_large", shape=shape))

    def _too_slow(self, shape: Shape) -> Response:
        message = f"No part of the request body arrived for {self.idle_timeout:g} s."
        return _closing(error_response(408, message, code="request_timeout", shape=shape))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        shape = family_of(scope)
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await self._too_large(shape)(scope, receive, send)
                return
        seen = 0
        body_done = False
        refused: Response | None = None
        started = False

        async def guarded_receive() -> Message:
            nonlocal seen, body_done, refused
            if body_done or self.idle_timeout is None:
                message = await receive()
            else:
                try:
                    message = await asyncio.wait_for(receive(), self.idle_timeout)
                except asyncio.TimeoutError:
                    refused = self._too_slow(shape)
                    raise BodyRefused(refused) from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if seen > self.max_bytes:
                    refused = self._too_large(shape)
                    raise BodyRefused(refused)
            elif message["type"] == "http.disconnect":
                body_done = True
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused is not None and not started:
                return  # the refusal below answers instead
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, guarded_receive, guarded_send)
        except Exception:
            if refused is None:
                raise
        if refused is not None and not started:
            await refused(scope, receive, send)
