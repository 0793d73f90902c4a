"""The Responses WebSocket mode against what costs the worker most per byte on the wire: a
permessage-deflate bomb (not negotiated; a compressed frame sent anyway closes the connection),
`generate: false` warm-ups checked as HTTP checks a body (`--max-messages`, field types) and
held by what they cost in memory, the worker's budget for held responses, large text frames
handed over undecoded; and what a refused or accepted upgrade logs."""

from __future__ import annotations

import base64
import json
import logging
import os
import socket
import struct
import threading
import time
import zlib

import httpx2
import pytest
from starlette.routing import WebSocketRoute
from websockets.exceptions import InvalidStatus

from tests.conftest import LIVE_APPS
from tests.harness.servers import held_back
from tests.harness.websocket import Socket, completed, texts


def responses_socket():
    """The WebSocket endpoint of the proxy make_proxy serves last (proxy.http.websocket.connection)."""
    [route] = [r for r in LIVE_APPS[-1].routes if isinstance(r, WebSocketRoute)][:1]
    return route.app


def raw_upgrade(
    url: str, *, extensions: str = "permessage-deflate; client_max_window_bits"
) -> tuple[socket.socket, str]:
    """A WebSocket opened by hand, offering `extensions`, and the head of its 101."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=20)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET /v1/responses HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Extensions: {extensions}"
            "\r\nAuthorization: Bearer sk-made-up\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock, head.decode()


def masked_frame(payload: bytes, *, rsv1: bool) -> bytes:
    """A client's text frame, FIN set, RSV1 (the compressed bit) as asked."""
    mask = os.urandom(4)
    head = bytes([0x80 | (0x40 if rsv1 else 0) | 0x1])
    n = len(payload)
    head += (
        bytes([0x80 | n])
        if n < 126
        else (bytes([0x80 | 126]) + struct.pack("!H", n) if n < 65536 else bytes([0x80 | 127]) + struct.pack("!Q", n))
    )
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def close_code(sock: socket.socket) -> int:
    """The code of the server's close frame (its other frames skipped)."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        assert chunk, "closed without a close frame"
        data += chunk
        while len(data) >= 2:
            n, at = data[1] & 0x7F, 2
            if n == 126:
                n, at = struct.unpack("!H", data[2:4])[0], 4
            elif n == 127:
                n, at = struct.unpack("!Q", data[2:10])[0], 10
            if len(data) < at + n:
                break
            if data[0] & 0x0F == 0x8:
                return struct.unpack("!H", data[at : at + 2])[0]
            data = data[at + n :]


def deflate_bomb(inflated: int) -> bytes:
    enc = zlib.compressobj(wbits=-15)
    return (enc.compress(b" " * inflated) + enc.flush(zlib.Z_SYNC_FLUSH))[:-4]


def test_permessage_deflate_is_not_negotiated_and_a_compressed_frame_closes_the_connection(make_proxy, upstream):
    """uvicorn inflated each frame on the event loop: 15 frames of 62 KB each made 60 MiB of spaces
    and held /healthz for seconds. Declined, a frame sent compressed anyway is a protocol error."""
    with make_proxy() as url:
        with Socket(url) as ws:  # the websockets client offers permessage-deflate, as Codex and the SDK do
            assert ws.ws.protocol.extensions == []
            assert texts(completed(ws.create(input="hi"))) == ["Hello there"]
        bomb = deflate_bomb(60 * 1024 * 1024)
        assert len(bomb) < 100_000
        for _ in range(3):
            sock, head = raw_upgrade(url)
            assert "sec-websocket-extensions" not in head.lower()
            sock.sendall(masked_frame(bomb, rsv1=True))
            assert close_code(sock) == 1002  # protocol error: reserved bit set, nothing inflated
            sock.close()
        assert httpx2.get(f"{url}/healthz", timeout=20).status_code == 200
        assert responses_socket().held.used == 0


def test_a_warm_up_is_checked_as_http_checks_the_body(make_proxy, upstream, client):
    with make_proxy(max_messages=50) as url, Socket(url) as ws:
        items = [{"role": "user", "content": ""}] * 51
        [error] = ws.create(input=items, generate=False, store=False)
        assert (error["status"], error["error"]["code"], error["error"]["param"]) == (400, "too_many_messages", "input")
        bad = [{"role": "user", "content": 7}]
        [error] = ws.create(input=bad, generate=False, store=False)
        over_http = httpx2.post(
            f"{url}/v1/responses",
            json={"model": "gpt-5", "input": bad},
            headers={"Authorization": "Bearer sk-test-key"},
            timeout=20,
        )
        assert (error["status"], error["error"]["param"]) == (over_http.status_code, over_http.json()["error"]["param"])
        assert error["error"]["code"] == over_http.json()["error"]["code"] == "invalid_type"
        assert responses_socket().held.used == 0  # nothing held for them
        # a continuation too: its whole input counted
        one = completed(ws.create(input=[{"role": "user", "content": "a"}] * 30, generate=False, store=False))
        [error] = ws.create(
            input=[{"role": "user", "content": "b"}] * 30, generate=False, store=False, previous_response_id=one["id"]
        )
        assert (error["status"], error["error"]["code"]) == (400, "too_many_messages")
        assert texts(completed(ws.create(input="still here"))) == ["Hello there"]
    assert not [r for r in upstream.responses_requests() if r.json()["input"] != "still here"]


def test_a_create_over_max_messages_is_refused_before_it_waits(make_proxy, upstream):
    """It would otherwise wait its lane's turn holding its whole body, refused only once it ran."""
    release = threading.Event()
    upstream.handler = held_back(release)
    with make_proxy(max_messages=50) as url, Socket(url) as ws:
        ws.send({"type": "response.create", "model": "gpt-5", "input": "first"})
        ws.send({"type": "response.create", "model": "gpt-5", "input": [{"role": "user", "content": ""}] * 51})
        error = ws.recv()  # while the first is still running
        assert (error["type"], error["status"], error["error"]["code"]) == ("error", 400, "too_many_messages")
        release.set()
        assert texts(completed(ws.events())) == ["Hello there"]
    assert [r.json()["input"] for r in upstream.responses_requests()] == ["first"]


def test_what_is_held_is_counted_in_memory_not_characters(make_proxy, upstream):
    """2,000 small items are 58 KB of JSON and about 600 KB of objects: under a body limit of
    128 KiB they pass as a body, but holding them would hold 5 x the limit."""
    with make_proxy(max_body_bytes=128 * 1024) as url, Socket(url) as ws:
        items = [{"role": "user", "content": ""}] * 2_000
        assert len(json.dumps(items)) < 128 * 1024
        one = completed(ws.create(input=items, generate=False, store=False))
        [error] = ws.create(input="next", store=False, previous_response_id=one["id"])
        assert error["error"]["code"] == "previous_response_not_found"  # answered, not held
        held = responses_socket().held
        assert held.used == 0
        small = completed(ws.create(input=[{"role": "user", "content": "x"}] * 20, generate=False, store=False))
        assert 0 < held.used < 128 * 1024
        assert texts(completed(ws.create(input="go", store=False, previous_response_id=small["id"]))) == ["Hello there"]


def test_a_closed_connection_gives_its_held_bytes_back_and_the_worker_has_a_budget(make_proxy, upstream):
    with make_proxy(ws_held_bytes=20_000) as url:
        held = responses_socket().held
        with Socket(url) as one:
            first = completed(one.create(input=[{"role": "user", "content": "x" * 6000}], generate=False, store=False))
            used = held.used
            assert 6000 < used < 20_000
            with Socket(url) as two:  # does not fit beside the first connection's: not held
                other = completed(
                    two.create(input=[{"role": "user", "content": "y" * 15_000}], generate=False, store=False)
                )
                assert held.used == used
                [error] = two.create(input="next", store=False, previous_response_id=other["id"])
                assert error["error"]["code"] == "previous_response_not_found"
            assert texts(completed(one.create(input="go", store=False, previous_response_id=first["id"]))) == [
                "Hello there"
            ]
        deadline = time.monotonic() + 10
        while held.used and time.monotonic() < deadline:  # the server sees the close a moment later
            time.sleep(0.02)
        assert held.used == 0


def test_a_large_text_frame_reaches_the_proxy_as_its_utf8_bytes(proxy_url, upstream, monkeypatch):
    """uvicorn decoded every text message on the event loop (60 MiB: a quarter of a second)."""
    from proxy.http.websocket import wire as events

    kinds: list[type] = []
    decode = events.decode

    def spy(text):
        kinds.append(type(text))
        return decode(text)

    monkeypatch.setattr(events, "decode", spy)
    with Socket(proxy_url) as ws:
        big = [{"type": "message", "role": "user", "content": "é " + "x" * 100}] * 15_000  # 1.6 MB
        assert texts(completed(ws.create(input=big, store=False))) == ["Hello there"]
        assert texts(completed(ws.create(input="small", store=False))) == ["Hello there"]
        ws.send(b"\xff" * 2_000_000)  # a binary frame that large is still refused as binary
        assert ws.recv()["error"]["code"] == "unsupported_frame"
    assert kinds == [bytes, str]
    assert upstream.responses_requests()[0].json()["input"][0]["content"].startswith("é ")


# ---------------------------------------------------------------- what the upgrades log


@pytest.fixture
def uvicorn_lines(caplog):
    """uvicorn's and the proxy's log records of the test, uvicorn's debug lines included
    (`--log-level debug`)."""
    logger = logging.getLogger("uvicorn.error")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(caplog.handler)
    caplog.set_level(logging.DEBUG)
    try:
        yield caplog
    finally:
        logger.removeHandler(caplog.handler)
        logger.setLevel(level)


def test_a_refused_upgrade_logs_no_error_and_no_line_logs_the_query_string(proxy_url, upstream, uvicorn_lines):
    """Nor the credential: at debug level websockets logged every upgrade header."""
    secret = "sk-secret-in-the-query"
    with Socket(proxy_url, "sk-secret-in-the-header") as ws:
        assert texts(completed(ws.create(input="hi"))) == ["Hello there"]
    served = [r for r in uvicorn_lines.records if not r.name.startswith("websockets")]  # not the test's client
    assert not [r for r in served if "sk-secret-in-the-header" in r.getMessage()]
    for _ in range(5):
        with pytest.raises(InvalidStatus) as refused:
            Socket(proxy_url, None, path=f"/v1/responses?api_key={secret}")
        assert refused.value.response.status_code == 401
    with pytest.raises(InvalidStatus):
        Socket(proxy_url, path=f"/v1/responses?api_key={secret}", headers={"Origin": "https://evil.example"})
    with Socket(proxy_url, path=f"/v1/responses?api_key={secret}") as ws:
        assert texts(completed(ws.create(input="hi"))) == ["Hello there"]
    records = [r for r in uvicorn_lines.records if not r.name.startswith("websockets")]
    assert not [r for r in records if r.levelno >= logging.ERROR], [r.getMessage() for r in records]
    assert [r for r in records if "WebSocket /v1/responses" in r.getMessage()]  # uvicorn's lines, still there
    assert not [r for r in records if secret in r.getMessage()]
    access = [r for r in records if r.name == "proxy.access"]
    assert access and all('"transport":"websocket"' in r.getMessage() for r in access)
