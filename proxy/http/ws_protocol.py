"""uvicorn's WebSocket protocol (websockets-sansio, what `ws="auto"` picks), with what it lacks
for a server facing clients it does not trust.

- **The pongs owed to a client that does not read.** uvicorn answers every ping at once with
  `transport.write`, past the flow control its `send` respects: a client sending pings and never
  reading what comes back made the server buffer its pongs without end (measured: 200 MB of
  pings, 186 MB of pongs waiting in the server's memory). Once writing is paused (the client is
  not reading: the transport's buffer is past its high-water mark), at most MAX_PINGS_UNREAD more
  pings are answered; the one after drops the connection (1006 to the client; the proxy sees it
  go away as it sees any client leave). A client's keepalive pings never come near it.
- **Large text messages are not decoded on the event loop.** uvicorn decodes every text message
  to a `str` where it reads it (60 MiB: 0.25 s holding the interpreter); one over LARGE_TEXT is
  handed to the app as its UTF-8 bytes (`TEXT_BYTES`), which the proxy parses off the loop as it
  parses a large HTTP body (`proxy.http.websocket.connection`).
- **A refused upgrade is no error.** uvicorn logs "ASGI callable returned without completing
  handshake." at error level after every HTTP answer sent before the accept (the
  `websocket.http.response` extension, how the proxy refuses an upgrade); here such an answer
  completes the handshake.
- **No query string in its log lines, no headers.** uvicorn's `"WebSocket <path>" [accepted]` /
  status lines carry the path with its query string, where a client may have put a key
  (`?api_key=`); they are logged with the path alone, as the proxy's access line logs a request.
  With `--log-level debug`, websockets' protocol logged every upgrade header (`Authorization`
  with the credential) and the start of every frame: its debug lines are off.

permessage-deflate is not negotiated (`proxy.cli.uvicorn_options`, `ws_per_message_deflate`):
uvicorn inflates each compressed frame on the event loop, inside `data_received`, where nothing
can move it off; 62 KB of deflate made 60 MiB of text and held the loop 1 s (docs/websocket.md).
"""

from __future__ import annotations

import logging
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

MAX_PINGS_UNREAD = 1000  # of at most 127 bytes each: ~125 KB of pongs past the high-water mark
LARGE_TEXT = 1024 * 1024  # bytes: a text message above is handed over undecoded (proxy.formats.json_body.LARGE_BODY)
TEXT_BYTES = "offload.text_bytes"  # a websocket.receive's key holding a large text message's UTF-8 bytes


class _PathOnlyLogger(logging.LoggerAdapter[logging.Logger]):
    """uvicorn's logger for one connection: its `"WebSocket %s"` lines without the query string."""

    @property
    def level(self) -> int:  # uvicorn reads it to decide on its trace lines
        return self.logger.level

    def info(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        if isinstance(msg, str) and '"WebSocket %s"' in msg:
            args = tuple(a.partition("?")[0] if isinstance(a, str) else a for a in args)
        self.logger.info(msg, *args, **kwargs)


class Protocol(WebSocketsSansIOProtocol):
    pings_unread = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.logger = _PathOnlyLogger(self.logger, {})  # type: ignore[assignment]
        self.conn.debug = False  # websockets' debug lines: every upgrade header (the credential) and frame

    def handle_ping(self) -> None:
        if not self.writable.is_set():
            self.pings_unread += 1
            if self.pings_unread > MAX_PINGS_UNREAD:
                self.transport.abort()
                return
        super().handle_ping()

    def resume_writing(self) -> None:
        self.pings_unread = 0
        super().resume_writing()

    def send_receive_event_to_app(self) -> None:
        if self.curr_msg_data_type != "text" or sum(map(len, self.frames)) <= LARGE_TEXT:
            super().send_receive_event_to_app()
            return
        # uvicorn's own steps, but the text left as its UTF-8 bytes
        data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
        self.frames = []
        if self.close_sent:
            return
        message: Any = {"type": "websocket.receive", "text": None, "bytes": None, TEXT_BYTES: data}
        self.queue.put_nowait(message)  # an ASGI message with a key of the proxy's own
        if not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()

    async def send(self, message: Any) -> None:
        await super().send(message)
        if message["type"] == "websocket.http.response.body" and not message.get("more_body", False):
            self.handshake_complete = True  # answered: the handshake is over, refused
