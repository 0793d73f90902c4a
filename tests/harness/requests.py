"""The one way an end-to-end test sends a raw request to the proxy (the SDKs aside).

`post(url, path, body=..., key=...)`: keyword-only past the path, the response returned as httpx2
gives it (read). The credential goes as the endpoint's own clients send it: `x-api-key` (and an
`anthropic-version`) on Anthropic's `/v1/messages…`, a bearer token elsewhere; `headers` are added
last (a test's own credential header wins). `body` is sent as JSON (`json.dumps`), or as it is
when it is bytes (what a test crafted: invalid UTF-8, big numbers, a compressed body); or
`json=` instead: encoded as httpx2's own `json=` encodes it (compact, UTF-8 unescaped), for the
tests whose requests were sent that way. `client`: on that httpx2.Client's connections (kept
alive) instead of a new one per request. `streamed` asks for a
stream and returns it read whole; `request` is the same for any method (a header given as None
is left out: a test sending no content type).

The timeout is a hang guard, never a speed target: far above what any request takes on a
loaded machine.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx2

TIMEOUT = 600.0
UNSET: Any = object()  # `json=` not given
BODILESS = frozenset({"GET", "HEAD", "DELETE", "OPTIONS"})
ANTHROPIC_VERSION = "2023-06-01"


def credential(path: str, key: str | None) -> dict[str, str]:
    """The headers carrying `key` as the clients of `path`'s API send it (none without a key)."""
    if key is None:
        return {}
    if path.lower().startswith("/v1/messages"):  # any spelling the upstream may route there
        return {"x-api-key": key, "anthropic-version": ANTHROPIC_VERSION}
    return {"authorization": f"Bearer {key}"}


def encoded(body: Any, as_json: Any = UNSET) -> bytes:
    """`body` as the request's bytes: as it is when bytes, else `json.dumps`; `as_json` given
    instead: as httpx2's `json=` sends it."""
    if as_json is not UNSET:
        if body is not None:
            raise ValueError("body= or json=, not both")
        return json.dumps(as_json, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    return body if isinstance(body, bytes) else json.dumps(body).encode()


def _request(
    path: str, data: bytes, key: str | None, headers: Mapping[str, str | None] | None
) -> tuple[bytes, dict[str, str]]:
    if not path.startswith("/"):
        raise ValueError(f"a path from the root, /v1/…: {path!r}")
    merged: dict[str, str | None] = {"content-type": "application/json", **credential(path, key)}
    for name, value in (headers or {}).items():  # the test's own headers win, whatever their case
        merged = {k: v for k, v in merged.items() if k.lower() != name.lower()}
        merged[name] = value
    return data, {k: v for k, v in merged.items() if v is not None}


def request(
    url: str,
    path: str,
    *,
    method: str = "POST",
    body: Any = None,
    json: Any = UNSET,
    key: str | None = None,
    headers: Mapping[str, str | None] | None = None,
    client: httpx2.Client | None = None,
    timeout: float = TIMEOUT,
) -> httpx2.Response:
    """`method` `body` (JSON, or bytes as they are; None with a bodiless method: no body) to the
    proxy at `url` + `path`, as the tenant `key`, on `client`'s connections when given."""
    bodiless = body is None and json is UNSET and method in BODILESS
    data, merged = _request(path, b"" if bodiless else encoded(body, json), key, headers)
    if bodiless:
        merged = {k: v for k, v in merged.items() if k.lower() != "content-type"}
    return (client or httpx2).request(
        method, f"{url}{path}", content=None if bodiless else data, headers=merged, timeout=timeout
    )


def post(
    url: str,
    path: str = "/v1/chat/completions",
    *,
    body: Any = None,
    json: Any = UNSET,
    key: str | None = None,
    headers: Mapping[str, str | None] | None = None,
    client: httpx2.Client | None = None,
    timeout: float = TIMEOUT,
) -> httpx2.Response:
    """POST `body` (JSON, or bytes as they are) to the proxy at `url` + `path`, as the tenant `key`."""
    return request(url, path, body=body, json=json, key=key, headers=headers, client=client, timeout=timeout)


def streamed(
    url: str,
    path: str = "/v1/chat/completions",
    *,
    body: dict[str, Any] | None = None,
    json: dict[str, Any] | None = None,
    key: str | None = None,
    headers: Mapping[str, str | None] | None = None,
    client: httpx2.Client | None = None,
    timeout: float = TIMEOUT,
) -> tuple[httpx2.Response, str]:
    """POST `body` (or `json`, encoded as httpx2's) with `"stream": true`; (the response, its
    whole text once the stream ended)."""
    if (body is None) == (json is None):
        raise ValueError("body= or json=")
    sent = {**(json if json is not None else body or {}), "stream": True}
    data, merged = _request(path, encoded(None, sent) if json is not None else encoded(sent), key, headers)
    with (client or httpx2).stream("POST", f"{url}{path}", content=data, headers=merged, timeout=timeout) as r:
        return r, r.read().decode()
