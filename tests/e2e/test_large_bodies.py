"""Bodies over 1 MB are parsed and checked off the event loop (`bench/large_bodies.py` measures
the loop's latency meanwhile): the same answers as inline parsing, in each format, and the same
400s in the format's own shape."""

from __future__ import annotations

import httpx2
import orjson
import pytest

from proxy.formats.json_body import LARGE_BODY

PARTS = 40_000  # ~1.6 MB of small objects, over LARGE_BODY: parsed off the event loop


def body_of(fmt: str, part: dict) -> tuple[str, dict]:
    if fmt == "responses":
        return "/v1/responses", {"model": "gpt-4o", "input": [{"role": "user", "content": [part] * PARTS}]}
    return ("/v1/messages" if fmt == "messages" else "/v1/chat/completions"), {
        "model": "gpt-4o",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": [part] * PARTS}],
    }


@pytest.mark.parametrize("fmt", ["chat", "responses", "messages"])
def test_a_large_body_of_many_objects_is_served(make_proxy, upstream, fmt):
    text = "input_text" if fmt == "responses" else "text"
    path, body = body_of(fmt, {"type": text, "text": "é\u2028 big: 12345678901234567890123"})
    raw = orjson.dumps(body)
    assert len(raw) > LARGE_BODY
    with make_proxy() as url:
        upstream.requests.clear()
        r = httpx2.post(
            url + path,
            content=raw,
            timeout=60,
            headers={
                "authorization": "Bearer sk-large-0001",
                "content-type": "application/json",
                "x-offload-mode": "off",
                "x-offload-cache-control": "off",
                **({"anthropic-version": "2023-06-01"} if fmt == "messages" else {}),
            },
        )
        assert r.status_code == 200, r.text[:300]
        [sent] = [rec for rec in upstream.requests if rec.path.endswith(path.removeprefix("/v1"))]
        assert orjson.loads(sent.body) == body


@pytest.mark.parametrize("fmt", ["chat", "responses", "messages"])
def test_a_large_body_with_a_bad_field_is_a_400_in_its_shape(make_proxy, upstream, fmt):
    path, body = body_of(fmt, {"type": "text", "text": "x"})
    body[("input" if fmt == "responses" else "messages")][0]["content"][PARTS - 1] = {"type": "text", "text": [1]}
    with make_proxy() as url:
        r = httpx2.post(
            url + path,
            content=orjson.dumps(body),
            timeout=60,
            headers={
                "authorization": "Bearer sk-large-0001",
                "content-type": "application/json",
                **({"anthropic-version": "2023-06-01"} if fmt == "messages" else {}),
            },
        )
        assert r.status_code == 400, r.text[:300]
        error = r.json()["error"]
        assert str(PARTS - 1) in error.get("param", error.get("message", "")), error
        if fmt == "messages":
            assert r.json()["type"] == "error" and error["type"] == "invalid_request_error"
        else:
            assert error["code"] == "invalid_type"
