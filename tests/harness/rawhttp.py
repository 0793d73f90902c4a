"""HTTP/1.1 over a bare socket, for what an HTTP client would normalise or refuse to send:
dot-segments in paths, bodies that stall half-way."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict:
        return json.loads(self.body)


def connect(url: str, timeout: float = 10) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
    return sock


def request_head(method: str, target: str, headers: dict[str, str] | None = None) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Host: proxy.test", *(f"{k}: {v}" for k, v in (headers or {}).items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def read_response(sock: socket.socket) -> RawResponse:
    """One response; the body by Content-Length (the proxy's own errors always carry one)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"connection closed before a full response head: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in header_lines)}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return RawResponse(int(status_line.split()[1]), headers, body[:length])


def send(url: str, method: str, target: str, headers: dict[str, str] | None = None, body: bytes = b"") -> RawResponse:
    """Send one request exactly as given (the target is not normalised or re-encoded)."""
    all_headers = {"Connection": "close", **(headers or {})}
    if body or method in ("POST", "PUT", "PATCH"):
        all_headers["Content-Length"] = str(len(body))
    with connect(url) as sock:
        sock.sendall(request_head(method, target, all_headers) + body)
        return read_response(sock)
