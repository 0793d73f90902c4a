"""Numbers through the proxy: non-finite ones are refused on the way in and never written on
the way out; integers of any size come out exactly as they came in."""

from __future__ import annotations

import json

import pytest
from starlette.responses import Response

from proxy.core import jsonio
from tests.harness.history import agent_history, refs_sent
from tests.harness.requests import post
from tests.harness.servers import completion

BIG = 123456789012345678901234567890  # past 64 bits: orjson would read it as a rounded float
COMPACT = {"authorization": "Bearer sk-numbers", "X-Offload-Max-Total-Tokens": "1000", "X-Offload-Mode": "compact"}


@pytest.mark.parametrize(
    "raw, shown",
    [
        (b'{"temperature": 1e400}', "1e400"),
        (b'{"t": [-1E999]}', "-1E999"),
        (b'{"t": 1e400, "seed": 123456789012345678901234567890}', "1e400"),
        (b'{"t": NaN}', "NaN"),
        (b'{"t": -Infinity}', "-Infinity"),
        (b'{"t": "\\ud83d", "u": 1e400}', "1e400"),  # the stdlib path (a lone surrogate) refuses it too
    ],
)
def test_non_finite_numbers_are_refused(raw, shown):
    with pytest.raises(ValueError, match=shown):
        jsonio.loads(raw)


@pytest.mark.parametrize("value", [BIG, -BIG, 2**64, -(2**63) - 1, 2**64 - 1, -(2**63)])
@pytest.mark.parametrize("text", ["plain", "lone \ud83d"])  # orjson's path, the stdlib's
def test_integers_of_any_size_are_read_and_written_exactly(value, text):
    raw = json.dumps({"seed": value, "t": 0.5, "s": text}).encode()
    parsed = jsonio.loads(raw)
    assert parsed["seed"] == value and type(parsed["seed"]) is int
    assert json.loads(jsonio.dumps(parsed).decode())["seed"] == value
    assert jsonio.loads(f"[{value}]".encode()) == [value]


def test_floats_stay_floats():
    assert jsonio.loads(b'{"a": 1e20, "b": -9.3e18, "c": 0.7}') == {"a": 1e20, "b": -9.3e18, "c": 0.7}


def test_dumps_never_writes_nan_or_infinity():
    for value in (float("inf"), float("-inf"), float("nan")):
        assert jsonio.dumps({"t": value}) == b'{"t":null}'  # orjson
        with pytest.raises(ValueError):
            jsonio.dumps({"t": value, "seed": BIG})  # the stdlib fallback (a big integer) refuses


@pytest.mark.parametrize("path", ["chat/completions", "offload"])
@pytest.mark.parametrize(
    "extra", ['"temperature": 1e400', '"temperature": 1e400, "seed": ' + str(BIG), '"temperature": NaN']
)
def test_a_non_finite_number_in_a_request_is_a_400(proxy_url, upstream, path, extra):
    messages = json.dumps(agent_history(steps=4))  # would be rewritten: compacted
    r = post(
        proxy_url,
        f"/v1/{path}",
        body=f'{{"model": "gpt-4o", "messages": {messages}, {extra}}}'.encode(),
        headers=COMPACT,
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "invalid_json" and error["type"] == "invalid_request_error"
    assert ("1e400" if "1e400" in extra else "NaN") in error["message"]
    assert "Infinity" not in r.text
    assert not upstream.chat_requests()


def test_a_big_integer_survives_a_rewritten_body_exactly(proxy_url, upstream):
    messages = agent_history(steps=4)
    messages[1] = {**messages[1], "x_trace_id": BIG}  # a field the proxy does not read, in a message
    body = json.dumps({"model": "gpt-4o", "messages": messages, "seed": BIG, "temperature": 0.25})
    r = post(proxy_url, "/v1/chat/completions", body=body.encode(), headers=COMPACT)
    assert r.status_code == 200, r.text
    assert r.headers["x-offload-action"] == "compact"
    sent = upstream.chat_requests()[-1]
    assert refs_sent(sent)  # rewritten
    assert f'"seed":{BIG}'.encode() in sent.body and f'"x_trace_id":{BIG}'.encode() in sent.body
    assert json.loads(sent.body)["seed"] == BIG and b"Infinity" not in sent.body and b"e+29" not in sent.body

    direct = post(proxy_url, "/v1/offload", body=body.encode(), headers=COMPACT)
    assert direct.status_code == 200, direct.text
    assert json.loads(direct.content)["messages"][1]["x_trace_id"] == BIG


def test_a_big_integer_in_the_upstreams_answer_reaches_the_client_exactly(proxy_url, upstream):
    async def handler(request, rec):
        answer = completion("done")
        answer["x_big"] = BIG
        return Response(json.dumps(answer), media_type="application/json")

    upstream.handler = handler
    r = post(
        proxy_url,
        "/v1/chat/completions",
        headers=COMPACT,
        body=json.dumps({"model": "gpt-4o", "messages": agent_history(4)}).encode(),
    )
    assert r.status_code == 200, r.text
    assert refs_sent(upstream.chat_requests()[-1])  # reload tools injected: the answer was re-encoded
    assert f'"x_big":{BIG}'.encode() in r.content
