"""The connection pool to the upstream: httpx2's, its connections on asyncio directly."""

from __future__ import annotations

from typing import Protocol

import httpx2

from proxy.upstream.network import AsyncioBackend


class PoolSettings(Protocol):
    """What the pool reads of the server's settings (`proxy.config.ServerSettings` has it)."""

    @property
    def max_connections(self) -> int: ...


def pooled_transport(settings: PoolSettings, *, keep_alive: bool = True) -> httpx2.AsyncHTTPTransport:
    """Keep-alive connections, reused; `keep_alive=False`: none is kept, every request opens its
    own (what a request retried after a pooled connection failed goes on)."""
    transport = httpx2.AsyncHTTPTransport(
        limits=httpx2.Limits(
            max_connections=settings.max_connections,
            max_keepalive_connections=min(settings.max_connections, 200) if keep_alive else 0,
            keepalive_expiry=60,
        ),
    )
    # httpx2 takes no network backend argument; its pool reads this one for every new connection.
    transport._pool._network_backend = AsyncioBackend()
    return transport
