"""The one shared HTTP client to the upstream provider, and how its failures map to errors."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterable
from typing import Protocol

import httpx2

from proxy.telemetry import UpstreamRecord
from proxy.upstream.network import Attempt, watching
from proxy.upstream.transport import PoolSettings, Replayable, host_of, may_retry, pooled_transport, upstream_error

Headers = list[tuple[bytes, bytes]]
URL_CACHE = 1024
log = logging.getLogger("proxy.upstream")


class UpstreamSettings(PoolSettings, Protocol):
    """What the client reads of the server's settings (`proxy.config.ServerSettings` has it)."""

    @property
    def upstream_base(self) -> str: ...
    @property
    def connect_timeout(self) -> float: ...
    @property
    def read_timeout(self) -> float: ...


class Upstream:
    """Pooled keep-alive connections to the upstream; opened and closed by the app lifespan."""

    def __init__(self, settings: UpstreamSettings, transport: httpx2.AsyncBaseTransport | None = None) -> None:
        self.base = settings.upstream_base
        self.timeout = httpx2.Timeout(
            connect=settings.connect_timeout,
            read=settings.read_timeout,
            write=settings.read_timeout,
            pool=settings.connect_timeout,
        ).as_dict()
        # The transport is used directly, without httpx2.Client: a proxy must not keep cookies
        # between clients, follow redirects or add default headers; it is also cheaper.
        self.transport = transport or pooled_transport(settings)
        # where a request goes again after a pooled connection failed it (`proxy.upstream.transport`): a
        # new connection, never another pooled one the server may be closing too
        self.fresh = transport or pooled_transport(settings, keep_alive=False)
        self._urls: dict[tuple[str, bytes, str | None], httpx2.URL] = {}

    def url(self, path: str, query: bytes = b"", base: str | None = None) -> str:
        """`path` is relative to the upstream base (i.e. what follows /v1/)."""
        url = f"{(base or self.base).rstrip('/')}/{path.lstrip('/')}"
        return f"{url}?{query.decode('latin-1')}" if query else url

    def _parsed_url(self, path: str, query: bytes, base: str | None) -> httpx2.URL:
        """Parsing a URL costs more than the rest of building a request: keep the common ones."""
        cache_key = (path, query, base)
        parsed = self._urls.get(cache_key)
        if parsed is None:
            parsed = httpx2.URL(self.url(path, query, base))
            if len(self._urls) >= URL_CACHE:
                self._urls.clear()
            self._urls[cache_key] = parsed
        return parsed

    async def send(
        self,
        method: str,
        path: str,
        *,
        query: bytes = b"",
        headers: Headers,
        content: bytes | AsyncIterable[bytes] | None = None,
        base: str | None = None,
        record: UpstreamRecord | None = None,
    ) -> httpx2.Response:
        """Send and return as soon as the response headers arrive (body not read yet).

        `base` replaces the configured upstream base URL (a tenant's own, or an allowed one);
        `record`: where the request's timings go (the request's record, passed by the HTTP layer).
        Raises UpstreamError when the upstream cannot be reached or times out. A request the
        server closed its pooled connection on before answering goes again once, on a new
        connection (`proxy.upstream.transport`).
        """
        url = self._parsed_url(path, query, base)
        replay = first = None
        if content is not None and not isinstance(content, bytes):  # streamed: kept while small, to go again
            replay = Replayable(content)
            first = replay.first()
        request = httpx2.Request(
            method, url, headers=headers, content=first or content, extensions={"timeout": self.timeout}
        )
        sent = time.perf_counter()
        if record is not None:
            record.upstream_left(sent)
        attempt = Attempt()
        try:
            with watching(attempt):
                try:
                    response = await self.transport.handle_async_request(request)
                except httpx2.TransportError as exc:
                    if not may_retry(exc, attempt) or (replay is not None and not replay.replayable):
                        raise
                    log.info(
                        "upstream %s closed a pooled connection before answering (%s): sent again on a new one",
                        host_of(url),
                        type(exc).__name__,
                    )
                    if first is not None:
                        await first.aclose()  # where the first attempt left off; the client's body is not closed
                    again = replay.again() if replay is not None else content
                    request = httpx2.Request(
                        method, url, headers=headers, content=again, extensions={"timeout": self.timeout}
                    )
                    response = await self.fresh.handle_async_request(request)
            if replay is not None:
                replay.forget()
            response.request = request  # its host names the upstream in an error reading the body
            if record is not None:
                record.upstream_answered(response.status_code, time.perf_counter() - sent)
            return response
        except httpx2.TransportError as exc:
            raise upstream_error(exc, host_of(request.url)) from exc

    async def aclose(self) -> None:
        await self.transport.aclose()
        if self.fresh is not self.transport:
            await self.fresh.aclose()
