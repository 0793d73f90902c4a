"""Request size limits, enforced before any work is done: a 413 in OpenAI's error shape."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.errors import error_response


class BodyTooLarge(Exception):
    pass


class BodyLimit:
    """ASGI middleware: bodies above `max_bytes` are refused with 413.

    A declared Content-Length is checked up front; a chunked body is counted as it arrives,
    and whatever the app then tries to answer is replaced by the 413.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    def _too_large(self) -> object:
        return error_response(
            413, f"Request body exceeds {self.max_bytes} bytes.", code="request_too_large"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await self._too_large()(scope, receive, send)  # type: ignore[operator]
                return
        seen = 0
        exceeded = False
        started = False

        async def counting_receive() -> Message:
            nonlocal seen, exceeded
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    exceeded = True
                    raise BodyTooLarge()
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if exceeded and not started:
                return  # the 413 below answers instead
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except Exception:
            if not exceeded:
                raise
        if exceeded and not started:
            await self._too_large()(scope, receive, send)  # type: ignore[operator]
