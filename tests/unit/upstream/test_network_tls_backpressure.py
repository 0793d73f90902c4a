"""A fast https upstream whose answer waits unread must resume once it is read (network.py).

Over TLS, `loop.start_tls` does not call the protocol's `connection_made` again, so
`_Connection.transport` stays the raw TCP transport: `data_received` pauses the raw socket, but
`AsyncioStream.read` resumes the TLS app transport (a different object), which never resumes
the raw socket. The connection then stalls until the read timeout: any https answer larger than
READ_HIGH_WATER that arrives faster than it is read (a slow client, a large JSON body).
"""

from __future__ import annotations

import asyncio
import ssl

import pytest
import trustme

from proxy.upstream.network import AsyncioBackend

pytestmark = pytest.mark.anyio

SIZE = 4 * 2**20


async def test_a_paused_tls_connection_resumes_when_read():
    authority = trustme.CA()
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(served)
    trusted = ssl.create_default_context()
    authority.configure_trust(trusted)

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(bytes(range(256)) * (SIZE // 256))
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(flood, "127.0.0.1", 0, ssl=served)
    port = server.sockets[0].getsockname()[1]
    try:
        stream = await AsyncioBackend().connect_tcp("127.0.0.1", port, timeout=5)
        stream = await stream.start_tls(trusted, server_hostname="127.0.0.1", timeout=5)
        await stream.write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        await asyncio.sleep(0.5)  # a slow reader: the buffer passes READ_HIGH_WATER and reading pauses
        data = bytearray()
        while len(data) < SIZE:
            chunk = await stream.read(65536, timeout=3)  # ReadTimeout here: the socket never resumed
            if not chunk:
                break
            data += chunk
        assert data == bytes(range(256)) * (SIZE // 256)
        await stream.aclose()
    finally:
        server.close()
