"""The Responses WebSocket mode, attacked: event fields of other JSON types, upgrade headers that
must not reach the upstream, refusals at the upgrade as HTTP refuses the request, one
connection's or credential's responses out of another's reach, memory a client could make the
connection hold (waiting creates, held responses), connections dying abnormally."""

from __future__ import annotations

import json

import pytest
from websockets.exceptions import InvalidStatus

from tests.harness.websocket import Socket, completed, texts


@pytest.mark.parametrize("kind", [["response.create"], {"a": 1}, 7, None, True, 1.5])
def test_a_type_of_another_json_type_is_an_error_event(proxy_url, upstream, kind):
    with Socket(proxy_url) as ws:
        ws.send({"type": kind, "input": "x"})
        error = ws.recv()
        assert (error["type"], error["status"], error["error"]["code"]) == ("error", 400, "unknown_event_type")
        assert texts(completed(ws.create(input="still here"))) == ["Hello there"]


@pytest.mark.parametrize("frame", ["null", "7", '"response.create"', "[]", "true", "1e999", '{"type": "response.create"'])
def test_a_frame_of_another_json_type_is_an_error_event(proxy_url, upstream, frame):
    with Socket(proxy_url) as ws:
        ws.send(frame)
        error = ws.recv()
        assert error["type"] == "error" and error["status"] == 400
        assert texts(completed(ws.create(input="still here"))) == ["Hello there"]


@pytest.mark.parametrize("previous, stores", [
    (["resp_x"], (False, True)), ({"id": "resp_x"}, (False, True)), (7, (False, True)), (True, (False, True)),
    ("", (False,)), ("x" * 100_000, (False,)),  # a string with store true goes on as over HTTP
])
def test_a_previous_response_id_of_another_type_is_a_clear_error(proxy_url, upstream, previous, stores):
    with Socket(proxy_url) as ws:
        for store in stores:
            [error] = ws.create(input="x", store=store, previous_response_id=previous)
            assert error["type"] == "error" and error["status"] == 400, error
            assert len(error["error"]["message"]) < 2000
        assert texts(completed(ws.create(input="still here"))) == ["Hello there"]
    assert [r.json()["input"] for r in upstream.responses_requests()] == ["still here"]


def test_the_upgrade_headers_do_not_reach_the_upstream(proxy_url, upstream):
    with Socket(proxy_url, headers={"OpenAI-Beta": "responses_websockets=2026-02-06", "X-Custom": "kept"}) as ws:
        completed(ws.create(input="hi"))
    [sent] = upstream.responses_requests()
    names = {name for name, _ in sent.header_list}
    assert not names & {"upgrade", "sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions",
                        "sec-websocket-protocol"}
    assert sent.headers.get("connection", "").lower() != "upgrade"
    assert sent.headers["x-custom"] == "kept"
    # the beta that names the client's transport to the proxy is not the HTTP request's
    assert "responses_websockets" not in sent.headers.get("openai-beta", "")


def test_a_bad_offload_header_refuses_the_upgrade_as_http_refuses_the_request(proxy_url, upstream, client):
    headers = {"X-Offload-Mode": "no-such-mode"}
    over_http = client.with_options(default_headers=headers).responses.with_raw_response
    with pytest.raises(Exception) as http_refusal:
        over_http.create(model="gpt-5", input="hi")
    status = http_refusal.value.status_code  # type: ignore[attr-defined]
    with pytest.raises(InvalidStatus) as refused:
        Socket(proxy_url, headers=headers)
    assert refused.value.response.status_code == status == 400
    assert json.loads(refused.value.response.body)["error"]["param"]
