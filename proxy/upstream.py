"""The one shared HTTP client to the upstream provider, and how its failures map to errors."""

from __future__ import annotations

from collections.abc import AsyncIterable

import httpx

from proxy.config import ServerSettings
from proxy.errors import ProxyError

Headers = list[tuple[bytes, bytes]]


class Upstream:
    """Pooled keep-alive client; opened and closed by the app lifespan."""

    def __init__(self, settings: ServerSettings, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base = settings.upstream_base
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(
                connect=settings.connect_timeout,
                read=settings.read_timeout,
                write=settings.read_timeout,
                pool=settings.connect_timeout,
            ),
            limits=httpx.Limits(
                max_connections=settings.max_connections,
                max_keepalive_connections=min(settings.max_connections, 200),
                keepalive_expiry=60,
            ),
            follow_redirects=False,
            transport=transport,
        )

    def url(self, path: str, query: bytes = b"") -> str:
        """`path` is relative to the upstream base (i.e. what follows /v1/)."""
        url = f"{self.base}/{path.lstrip('/')}"
        return f"{url}?{query.decode('latin-1')}" if query else url

    async def send(
        self,
        method: str,
        path: str,
        *,
        query: bytes = b"",
        headers: Headers,
        content: bytes | AsyncIterable[bytes] | None = None,
    ) -> httpx.Response:
        """Send and return as soon as the response headers arrive (body not read yet).

        Raises ProxyError 502 when the upstream cannot be reached, 504 when it times out.
        """
        request = self.client.build_request(
            method, self.url(path, query), headers=headers, content=content
        )
        try:
            return await self.client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise ProxyError(
                504,
                f"Upstream timed out ({type(exc).__name__}).",
                type_="server_error",
                code="upstream_timeout",
            ) from exc
        except httpx.TransportError as exc:
            raise ProxyError(
                502,
                f"Upstream unreachable ({type(exc).__name__}).",
                type_="server_error",
                code="upstream_unreachable",
            ) from exc

    async def aclose(self) -> None:
        await self.client.aclose()
