"""The Responses WebSocket mode's refusals and limits: the upgrade refused as HTTP refuses the
request (no credential 401, too many connections 429 — per tenant and per worker — a browser's
upgrade, with an Origin, 403), bad frames answered with `error` events
and the connection going on, a create while one is in flight (its lane's turn), lanes side by
side, a frame over --max-body-bytes, the idle timeout, an upstream error, the client hanging up
mid-response (the upstream call cancelled)."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from starlette.responses import JSONResponse
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.harness.responses import answer, message
from tests.harness.servers import default_handler, is_responses_create
from tests.harness.websocket import Socket, completed, texts


def refusal(proxy_url: str, key: str | None, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    with pytest.raises(InvalidStatus) as refused:
        Socket(proxy_url, key, headers=headers)
    response = refused.value.response
    return response.status_code, json.loads(response.body)


def served_again(url: str, key: str) -> None:
    """A connection closed gives its place back: the server sees the close a moment later."""
    deadline = time.monotonic() + 10
    while True:
        try:
            with Socket(url, key) as again:
                assert texts(completed(again.create(input="hi"))) == ["Hello there"]
            return
        except InvalidStatus:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_an_upgrade_without_a_credential_is_refused_as_http_refuses_it(proxy_url, upstream):
    status, body = refusal(proxy_url, None)
    assert status == 401 and body["error"]["code"] == "missing_api_key"


def test_a_tenant_holds_a_limited_number_of_connections(make_proxy, upstream):
    with make_proxy(ws_connections_per_tenant=1) as url:
        first = Socket(url, "sk-limited-one")
        status, body = refusal(url, "sk-limited-one")
        assert status == 429 and body["error"]["code"] == "too_many_connections"
        with Socket(url, "sk-limited-two") as other:  # another credential has its own
            assert texts(completed(other.create(input="hi"))) == ["Hello there"]
        first.ws.close()
        served_again(url, "sk-limited-one")


def test_a_worker_holds_a_limited_number_of_connections_whatever_the_credentials(make_proxy, upstream):
    """Made-up credentials are only checked upstream at a first response.create: the count per
    credential alone would let them hold idle connections without end."""
    with make_proxy(ws_connections=2) as url:
        with Socket(url, "sk-made-up-1"), Socket(url, "sk-made-up-2"):
            status, body = refusal(url, "sk-made-up-3")
            assert status == 429 and body["error"]["code"] == "too_many_connections"
            assert "--ws-connections" in body["error"]["message"]
        served_again(url, "sk-made-up-3")


@pytest.mark.parametrize("origin", ["https://evil.example", "null", "http://127.0.0.1:8080"])
def test_a_browsers_upgrade_is_refused(make_proxy, upstream, origin):
    """A page the user visits could open a WebSocket to the proxy on loopback (browsers check no
    origin for WebSockets) and, with --allow-anonymous, spend the operator's key."""
    with make_proxy(allow_anonymous=True) as url:
        for key in (None, "sk-test-key"):
            status, body = refusal(url, key, headers={"Origin": origin})
            assert (status, body["error"]["code"]) == (403, "origin_not_allowed")
        with Socket(url, None) as ws:  # the same upgrade without Origin: served
            assert texts(completed(ws.create(input="hi"))) == ["Hello there"]
        assert not [r for r in upstream.requests if is_responses_create(r) and r.json().get("input") != "hi"]


@pytest.mark.parametrize(
    "frame, code",
    [
        (b"\x00binary", "unsupported_frame"),
        ("not json", "invalid_json"),
        ("[1, 2]", "invalid_event"),
        ('{"type": "session.update"}', "unknown_event_type"),
        ('{"input": "no type"}', "unknown_event_type"),
        ('{"type": "response.create", "input": "x", "background": true}', "unsupported_parameter"),
        ('{"type": "response.create", "input": "x", "stream_id": 7}', "invalid_value"),
        ('{"type": "response.create", "input": "x", "stream_id": ""}', "invalid_value"),
    ],
)
def test_a_bad_frame_gets_an_error_event_and_the_connection_goes_on(proxy_url, upstream, frame, code):
    with Socket(proxy_url) as ws:
        ws.send(frame)
        error = ws.recv()
        assert (error["type"], error["status"], error["error"]["code"]) == ("error", 400, code)
        assert texts(completed(ws.create(input="still here"))) == ["Hello there"]
    assert [r.json()["input"] for r in upstream.responses_requests()] == ["still here"]


def test_an_acknowledgement_is_taken_silently(proxy_url, upstream):
    with Socket(proxy_url) as ws:
        ws.send({"type": "response.processed", "response_id": "resp_x"})
        assert ws.create(input="next")[0]["type"] == "response.created"


def test_a_frame_over_the_body_limit(make_proxy, upstream):
    with make_proxy(max_body_bytes=4096) as url:
        with Socket(url) as ws:
            [error] = ws.create(input="x" * 5000)
            assert (error["status"], error["error"]["code"]) == (413, "request_too_large")
            # a continuation whose whole history is over the limit: as HTTP answers that body
            one = completed(ws.create(input="y" * 2000, store=False))
            [error] = ws.create(input="z" * 3000, store=False, previous_response_id=one["id"])
            assert (error["status"], error["error"]["code"]) == (413, "request_too_large")
            assert texts(completed(ws.create(input="small"))) == ["Hello there"]
        with Socket(url) as ws:  # beyond the server's frame limit: closed with 1009
            ws.send({"type": "response.create", "input": "x" * (4096 + 70 * 1024)})
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


def gated_handler(gates: dict[str, asyncio.Event], order: list[str]):
    """Answers a request whose input names a gate only once that gate opens; records arrivals."""

    async def handler(request, rec):
        if not is_responses_create(rec):
            return await default_handler(request, rec)
        text = rec.json()["input"]
        order.append(text)
        if text in gates:
            await asyncio.wait_for(gates[text].wait(), 10)
        for name, gate in gates.items():
            if text == f"open {name}":
                gate.set()
        return answer(rec, message(f"answer to {text}"))

    return handler


def test_a_create_while_one_is_in_flight_waits_its_turn(proxy_url, upstream):
    order: list[str] = []
    upstream.handler = gated_handler({}, order)
    with Socket(proxy_url) as ws:
        ws.send({"type": "response.create", "model": "gpt-5", "input": "first"})
        ws.send({"type": "response.create", "model": "gpt-5", "input": "second"})
        first, second = ws.events(), ws.events()
    assert texts(completed(first)) == ["answer to first"] and texts(completed(second)) == ["answer to second"]
    assert order == ["first", "second"]


def test_lanes_run_side_by_side_and_their_events_name_them(proxy_url, upstream):
    gates: dict[str, asyncio.Event] = {}
    order: list[str] = []
    upstream.handler = gated_handler(gates, order)
    with Socket(proxy_url) as ws:
        gates["blocked"] = asyncio.Event()
        ws.send({"type": "response.create", "model": "gpt-5", "input": "blocked", "stream_id": "a"})
        ws.send({"type": "response.create", "model": "gpt-5", "input": "open blocked", "stream_id": "b"})
        got = [ws.recv() for _ in range(2 * 10)]  # both responses' events, interleaved
    by_lane = {lane: [e for e in got if e.get("stream_id") == lane] for lane in ("a", "b")}
    assert len(by_lane["a"]) + len(by_lane["b"]) == len(got)  # every event names its lane
    assert texts(completed(by_lane["a"])) == ["answer to blocked"]
    assert texts(completed(by_lane["b"])) == ["answer to open blocked"]
    # lane b ran while lane a's response was in flight: a's upstream call answers only once b's has
    # come (the gate; serial lanes would time it out). Which one finishes first is a race: b's
    # answer opens a's gate.
    assert order == ["blocked", "open blocked"]


def test_an_upstream_error_is_an_error_event_with_its_status(proxy_url, upstream):
    async def limited(request, rec):
        return JSONResponse(
            {"error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded", "param": None}},
            status_code=429,
        )

    upstream.handler = limited
    with Socket(proxy_url) as ws:
        [error] = ws.create(input="hi", stream_id="main")
        assert (error["status"], error["error"]["code"], error["error"]["message"]) == (
            429,
            "rate_limit_exceeded",
            "slow down",
        )
        assert error["stream_id"] == "main"


def test_an_idle_connection_is_closed(make_proxy, upstream):
    with make_proxy(ws_idle_timeout=2) as url:  # not before the first request, on a loaded machine too
        with Socket(url) as ws:
            assert texts(completed(ws.create(input="hi"))) == ["Hello there"]
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000


def test_the_client_hanging_up_mid_response_cancels_the_upstream_call(proxy_url, upstream):
    arrived, cancelled = threading.Event(), threading.Event()

    async def hanging(request, rec):
        if not is_responses_create(rec):
            return await default_handler(request, rec)
        arrived.set()
        for _ in range(1000):  # at most 10 s
            if await request.is_disconnected():
                cancelled.set()
                break
            await asyncio.sleep(0.01)
        return answer(rec, message("too late"))

    upstream.handler = hanging
    ws = Socket(proxy_url)
    ws.send({"type": "response.create", "model": "gpt-5", "input": "hang"})
    assert arrived.wait(10)
    ws.ws.close()
    assert cancelled.wait(10)


def test_a_websocket_on_another_path_is_not_accepted(proxy_url, upstream):
    with pytest.raises(InvalidStatus):
        Socket(proxy_url, path="/v1/chat/completions")
