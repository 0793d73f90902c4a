"""uvicorn's WebSocket protocol (websockets-sansio, what `ws="auto"` picks), with one bound it
lacks: the pongs owed to a client that does not read.

uvicorn answers every ping at once with `transport.write`, past the flow control its `send`
respects: a client sending pings and never reading what comes back made the server buffer its
pongs without end (measured: 200 MB of pings, 186 MB of pongs waiting in the server's memory).
Once writing is paused (the client is not reading: the transport's buffer is past its high-water
mark), at most MAX_PINGS_UNREAD more pings are answered; the one after drops the connection
(1006 to the client; the proxy sees it go away as it sees any client leave). A client's
keepalive pings (one every few seconds) never come near it.
"""

from __future__ import annotations

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

MAX_PINGS_UNREAD = 1000  # of at most 127 bytes each: ~125 KB of pongs past the high-water mark


class Protocol(WebSocketsSansIOProtocol):
    pings_unread = 0

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
