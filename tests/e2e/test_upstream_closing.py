"""An upstream that closes a keep-alive connection without saying so (no `Connection: close`)
just after answering, as uvicorn does after an application's exception: a request the proxy sends
on that pooled connection in the meantime goes again on a new one, through the relay and the
managed paths alike, and the client never gets a 502 the upstream did not cause (issue 38). A
server that really fails still gets one 502 per request, not a storm of attempts."""

from __future__ import annotations

import json
import socket
import threading

import httpx2
import pytest
from starlette.requests import Request

from tests.harness.requests import request
from tests.harness.servers import completion, free_port

AUTH = {"Authorization": "Bearer sk-closing"}
CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
REQUESTS = [
    ("GET", "/v1/models", None),
    ("POST", "/v1/chat/completions", CHAT),
    ("POST", "/v1/files", {"purpose": "batch"}),
    ("DELETE", "/v1/files/file-1", None),
]


def read_request(conn: socket.socket, first: bytes = b"") -> bytes | None:
    data = first
    while b"\r\n\r\n" not in data:
        if not (chunk := conn.recv(65536)):
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")), 0
    )
    while len(body) < length:
        if not (chunk := conn.recv(65536)):
            return None
        body += chunk
    return head + b"\r\n\r\n" + body


class ClosesIdleUpstream:
    """A real server on loopback answering the first request of each connection (a chat
    completion, kept alive) and closing the connection, unanswered, as soon as the next request
    on it arrives: the race uvicorn's closing connection makes, lost every time. `answering=False`:
    every request is closed on unanswered, a server that really fails."""

    def __init__(self, *, answering: bool = True) -> None:
        self.answering = answering
        self.port = free_port()
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.connections = 0
        self.answered: list[bytes] = []
        self.unanswered = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            with self.lock:
                self.connections += 1
            try:
                if self.answering:
                    request = read_request(conn)
                    if request is None:
                        return
                    body = json.dumps(completion("Hello")).encode()
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                        % (len(body), body)
                    )
                    with self.lock:
                        self.answered.append(request)
                if conn.recv(1):  # the next request: closed on, unanswered
                    with self.lock:
                        self.unanswered += 1
            except OSError:
                return

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def closing_upstream():
    server = ClosesIdleUpstream()
    yield server
    server.close()


def test_a_request_on_a_connection_the_upstream_is_closing_goes_again(make_proxy, closing_upstream):
    with make_proxy(upstream=closing_upstream.url) as url:
        statuses = [
            request(url, path, method=method, body=body, headers=AUTH).status_code
            for _ in range(3)
            for method, path, body in REQUESTS
        ]
    assert statuses == [200] * 12
    # every other request met a closing pooled connection and went again on a new one
    assert closing_upstream.unanswered >= 5 and len(closing_upstream.answered) == 12
    assert sorted({r.split(b" ", 2)[1] for r in closing_upstream.answered}) == [
        b"/v1/chat/completions",
        b"/v1/files",
        b"/v1/files/file-1",
        b"/v1/models",
    ]


def test_an_upstream_that_really_fails_gets_one_502_per_request(make_proxy):
    server = ClosesIdleUpstream(answering=False)
    try:
        with make_proxy(upstream=server.url) as url:
            for method, path, body in REQUESTS:
                r = request(url, path, method=method, body=body, headers=AUTH)
                assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_unreachable", r.text
        assert (
            server.connections == server.unanswered == len(REQUESTS)
        )  # one attempt each: no new connection was pooled
    finally:
        server.close()


def test_uvicorn_closing_after_an_application_error_never_becomes_a_502(make_proxy, upstream):
    """The real thing: the fake upstream (uvicorn and Starlette) raising in its handler answers
    500 without `Connection: close` and closes the connection right after. Every answer the client
    gets is the upstream's 500, relayed; none is a 502 of the proxy's own."""

    async def raises(request: Request, rec) -> None:
        raise RuntimeError("the application failed")

    upstream.handler = raises
    upstream.lists_models_on_failure = False  # GET /v1/models fails as the rest does
    with make_proxy() as url, httpx2.Client() as client:  # kept alive: the next request follows at once
        statuses = [
            request(url, path, method=method, body=body, headers=AUTH, client=client).status_code
            for _ in range(25)
            for method, path, body in REQUESTS
        ]
    assert statuses.count(502) == 0 and set(statuses) == {500}, statuses  # 15-30 in 100 were 502s before
