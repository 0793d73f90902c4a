"""Request bodies that are not valid UTF-8 (a surrogate encoded as bytes, `\\xed\\xa0\\xbd`; a
UTF-16 body) are a 400 `invalid_json` in the endpoint's own shape on every managed endpoint,
never forwarded: the upstream always receives valid UTF-8. A lone surrogate written as a JSON
escape (`\\ud83d`) is valid JSON text and still goes through (tests/e2e/test_surrogates.py)."""

from __future__ import annotations

import json

import httpx2
import pytest

from tests.harness.requests import post

ENDPOINTS = {  # path: a small body of its format, the text {TEXT} put in its one user message
    "/v1/chat/completions": {"model": "gpt-4o", "messages": [{"role": "user", "content": "TEXT"}]},
    "/v1/responses": {"model": "gpt-5", "input": [{"role": "user", "content": "TEXT"}]},
    "/v1/messages": {"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "TEXT"}]},
    "/v1/messages/count_tokens": {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "TEXT"}]},
}


def body_with(path: str, text: bytes) -> bytes:
    return json.dumps(ENDPOINTS[path]).encode().replace(b"TEXT", text)


def key_for(path: str) -> str:
    return "sk-ant-utf8-test" if path.startswith("/v1/messages") else "sk-utf8-test"


def assert_invalid_json(r: httpx2.Response, path: str) -> str:
    assert r.status_code == 400, (r.status_code, r.text[:300])
    body = r.json()
    if path.startswith("/v1/messages"):
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
        return body["error"]["message"]
    assert body["error"]["code"] == "invalid_json", body
    return body["error"]["message"]


@pytest.mark.parametrize("path", list(ENDPOINTS))
@pytest.mark.parametrize(
    "text",
    [b"hi \xed\xa0\xbd", b"hi \xed\xa0\xbd\xed\xb8\x80", b"cut \xf0\x9f\x98", b"\xff latin"],
    ids=["lone-surrogate-bytes", "surrogate-pair-bytes", "truncated-sequence", "invalid-byte"],
)
def test_invalid_utf8_is_refused_not_forwarded(proxy_url, upstream, path, text):
    r = post(proxy_url, path, body=body_with(path, text), key=key_for(path))
    message = assert_invalid_json(r, path)
    assert "UTF-8" in message, message
    assert upstream.requests == []


@pytest.mark.parametrize("path", list(ENDPOINTS))
def test_utf16_body_is_refused(proxy_url, upstream, path):
    r = post(proxy_url, path, body=json.dumps(ENDPOINTS[path]).encode("utf-16"), key=key_for(path))
    assert_invalid_json(r, path)
    assert upstream.requests == []


@pytest.mark.parametrize("path", list(ENDPOINTS))
def test_escaped_lone_surrogate_and_utf8_bom_still_go_through(proxy_url, upstream, path):
    """The fallback parser still reads what orjson refuses but is valid: an escaped lone
    surrogate, a UTF-8 byte order mark; the body goes up as it came (valid UTF-8)."""
    for content in (body_with(path, b"hi \\ud83d"), b"\xef\xbb\xbf" + body_with(path, "caf\u00e9".encode())):
        upstream.requests.clear()
        r = post(proxy_url, path, body=content, key=key_for(path), headers={"x-offload-cache-control": "off"})
        assert r.status_code == 200, (r.status_code, r.text[:300])
        (sent,) = upstream.requests
        assert sent.body == content
        sent.body.decode("utf-8")  # strict


@pytest.mark.parametrize("path", ENDPOINTS)
@pytest.mark.parametrize("charset", ["utf-7", "UTF-16", "utf-32le", "x-no-such-charset"])
def test_a_declared_charset_the_body_is_not_read_as_is_refused(make_proxy, upstream, path, charset):
    """The proxy reads a body as UTF-8; an upstream honouring `charset=utf-7` would read `+ACI-`
    as a quote, and so fields the proxy never saw (a `previous_response_id` on the shared key, a
    compaction token): a 415 in the endpoint's shape, nothing sent upstream. As the relayed paths
    the proxy reads (tests/e2e/test_relay_token_spellings.py)."""
    with make_proxy() as url:
        r = post(
            url,
            path,
            body=body_with(path, b"hello+ACI-"),
            key=key_for(path),
            headers={"content-type": f"application/json; charset={charset}"},
        )
    assert r.status_code == 415, (r.status_code, r.text[:300])
    body = r.json()
    message = body["error"]["message"]
    assert "charset" in message and "UTF-8" in message, message
    if path.startswith("/v1/messages"):
        assert body["type"] == "error", body
    else:
        assert body["error"]["code"] == "unsupported_charset", body
    assert upstream.requests == []


@pytest.mark.parametrize("charset", ["utf-8", "UTF8", '"utf-8"', "us-ascii", "iso-8859-1"])
def test_a_charset_that_reads_the_body_as_the_proxy_does_is_served(make_proxy, upstream, charset):
    with make_proxy() as url:
        r = post(
            url,
            "/v1/chat/completions",
            body=body_with("/v1/chat/completions", b"hello"),
            key="sk-utf8-test",
            headers={"content-type": f"application/json; charset={charset}"},
        )
    assert r.status_code == 200, r.text[:300]
    assert len(upstream.requests) == 1
