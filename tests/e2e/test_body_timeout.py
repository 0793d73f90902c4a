"""A request body that stalls is cut after --body-timeout of silence: 408, the worker freed and,
on the relay path, the upstream request abandoned."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from tests.harness import rawhttp
from tests.harness.servers import free_port

AUTH = {"Authorization": "Bearer sk-timeout", "Content-Type": "application/json"}
BODY_TIMEOUT = 0.5
BODY = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "x" * 3000}]}).encode()


def stalled_request(url: str, path: str) -> tuple[rawhttp.RawResponse, float, bytes]:
    """Send the head and half the body, then nothing: (response, seconds from before the first
    byte was sent until it came, what followed)."""
    with rawhttp.connect(url, timeout=60) as sock:
        head = rawhttp.request_head("POST", path, {**AUTH, "Content-Length": str(len(BODY))})
        start = time.monotonic()
        sock.sendall(head + BODY[: len(BODY) // 2])
        response = rawhttp.read_response(sock)
        elapsed = time.monotonic() - start
        sock.settimeout(5)
        try:
            after = sock.recv(100)  # the server closes: the rest of the body will never be read
        except socket.timeout:
            after = b"(still open)"
    return response, elapsed, after


def assert_request_timeout(response: rawhttp.RawResponse, elapsed: float, after: bytes) -> None:
    assert response.status == 408, (response.status, response.body)
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == "request_timeout" and error["type"] == "invalid_request_error"
    assert elapsed >= BODY_TIMEOUT  # it waited out its silence (however long a loaded machine takes past it)
    assert after == b""


def test_stalled_chat_body_is_408(make_proxy, upstream):
    with make_proxy(body_timeout=BODY_TIMEOUT) as url:
        assert_request_timeout(*stalled_request(url, "/v1/chat/completions"))
        assert_request_timeout(*stalled_request(url, "/v1/offload"))
        ok = rawhttp.send(url, "POST", "/v1/chat/completions", AUTH, BODY)  # the worker is free again
        assert ok.status == 200
    assert [r.path for r in upstream.requests] == ["/v1/chat/completions"]


class RawUpstream:
    """A TCP server that takes one connection and records what arrives until the peer closes it."""

    def __init__(self) -> None:
        self.port = free_port()
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.received = b""
        self.closed_by_peer = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.listener.settimeout(10)
        conn, _ = self.listener.accept()
        conn.settimeout(10)
        with conn:
            while chunk := conn.recv(65536):
                self.received += chunk
            self.closed_by_peer.set()

    def close(self) -> None:
        self.listener.close()


def test_stalled_relay_body_is_408_and_the_upstream_request_is_cancelled(make_proxy):
    raw_upstream = RawUpstream()
    try:
        with make_proxy(body_timeout=BODY_TIMEOUT, upstream=f"http://127.0.0.1:{raw_upstream.port}/v1") as url:
            assert_request_timeout(*stalled_request(url, "/v1/files"))
            assert raw_upstream.closed_by_peer.wait(30), "the upstream connection was left open"
        head, _, body = raw_upstream.received.partition(b"\r\n\r\n")
        assert head.startswith(b"POST /v1/files HTTP/1.1")
        assert BODY.startswith(body) and len(body) < len(BODY)  # it never got a complete request
    finally:
        raw_upstream.close()


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/files"])
def test_slow_but_steady_body_is_not_cut(make_proxy, upstream, path):
    pieces = [BODY[i : i + 400] for i in range(0, len(BODY), 400)]
    # each gap 0.3 s, far below the timeout (a loaded machine delays a send by less than the 1.7 s
    # left); all of them together past it
    with make_proxy(body_timeout=2.0) as url, rawhttp.connect(url) as sock:
        head = rawhttp.request_head("POST", path, {**AUTH, "Content-Length": str(len(BODY)), "Connection": "close"})
        sock.sendall(head)
        start = time.monotonic()
        for piece in pieces:
            time.sleep(0.3)
            sock.sendall(piece)
        response = rawhttp.read_response(sock)
        assert len(pieces) >= 8 and time.monotonic() - start > 2.0
    assert response.status == 200, response.body
    assert upstream.requests[-1].body == BODY
