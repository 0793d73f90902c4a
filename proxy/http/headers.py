"""Which headers cross the proxy, in each direction."""

from __future__ import annotations

from collections.abc import Iterable

from proxy.core.settings import HEADER_PREFIX

# RFC 9110 §7.6.1 connection-specific headers, plus the ones httpx2/uvicorn recompute themselves.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
# every X-Offload-* header is the proxy's (`proxy.core.settings` reads the settings among them)
OFFLOAD_PREFIX = HEADER_PREFIX.encode()


def request_headers_for_upstream(
    raw: Iterable[tuple[bytes, bytes]], *, body_replaced: bool = False
) -> list[tuple[bytes, bytes]]:
    """Client headers minus hop-by-hop, Host and every X-Offload-* header (spelt with underscores
    too: a gateway mapping them to dashes would read ours), each value without
    the whitespace around it (RFC 9110 §5.5: no part of the value; uvicorn's parser may keep a
    trailing one, which the upstream client refuses to send).

    `body_replaced`: the proxy rewrote the body, so its length (and encoding) are recomputed.
    """
    drop = HOP_BY_HOP | {b"host"}
    if body_replaced:
        drop = drop | {b"content-length", b"content-encoding"}
    return [
        (k, v.strip(b" \t"))
        for k, v in raw
        if (lk := k.lower()) not in drop and not lk.replace(b"_", b"-").startswith(OFFLOAD_PREFIX)
    ]


def response_headers_for_client(
    raw: Iterable[tuple[bytes, bytes]], *, decoded: bool = False
) -> list[tuple[bytes, bytes]]:
    """Upstream response headers minus hop-by-hop ones.

    `decoded`: the proxy re-encodes the body itself, so length and content-encoding are dropped.
    """
    drop = HOP_BY_HOP
    if decoded:
        drop = drop | {b"content-length", b"content-encoding"}
    return [(k, v) for k, v in raw if k.lower() not in drop]
