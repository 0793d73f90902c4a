"""The connection pool to the upstream: httpx2's, its connections on asyncio directly."""

from __future__ import annotations

import httpx2

from typing import Protocol

from proxy.upstream.network import AsyncioBackend


class PoolSettings(Protocol):
    """What the pool reads of the server's settings (`proxy.config.ServerSettings` has it)."""

    @property
    def max_connections(self) -> int: ...


def pooled_transport(settings: PoolSettings) -> httpx2.AsyncHTTPTransport:
    transport = httpx2.AsyncHTTPTransport(
        limits=httpx2.Limits(
            max_connections=settings.max_connections,
            max_keepalive_connections=min(settings.max_connections, 200),
            keepalive_expiry=60,
        ),
    )
    # httpx2 takes no network backend argument; its pool reads this one for every new connection.
    transport._pool._network_backend = AsyncioBackend()
    return transport
