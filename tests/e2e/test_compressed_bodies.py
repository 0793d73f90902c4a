"""Compressed request bodies (`Content-Encoding: gzip | deflate | br | zstd`, as the Codex CLI
and HTTP clients send them) through the real server: the managed endpoints decode them and
send the upstream plain JSON without the header; a bomb is a 413, a corrupt stream a 400, an
unknown coding a 415, each in the endpoint's shape; relayed endpoints pass the body untouched."""

from __future__ import annotations

import gzip
import json
import zlib

import brotli
import httpx2
import pytest
import zstandard

from tests.harness.history import agent_history, refs_sent
from tests.harness.requests import post

ENCODE = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,
    "br": brotli.compress,
    "zstd": zstandard.ZstdCompressor().compress,
}

BODIES = {  # path: a small body of its format
    "/v1/chat/completions": {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello, compressed"}]},
    "/v1/responses": {"model": "gpt-5", "input": [{"role": "user", "content": "hello, compressed"}]},
    "/v1/messages": {
        "model": "claude-sonnet-4-5",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "hello, compressed"}],
    },
    "/v1/messages/count_tokens": {
        "model": "claude-sonnet-4-5",
        "messages": [{"role": "user", "content": "hello, compressed"}],
    },
}


def headers_for(path: str, coding: str | None) -> dict[str, str]:
    if path.startswith("/v1/messages"):
        # the body is compared byte for byte upstream: without the caching the proxy adds to Messages
        headers = {
            "x-api-key": "sk-ant-compressed",
            "anthropic-version": "2023-06-01",
            "x-offload-cache-control": "off",
        }
    else:
        headers = {"authorization": "Bearer sk-compressed"}
    headers["content-type"] = "application/json"
    if coding:
        headers["content-encoding"] = coding
    return headers


def the_request(upstream, path: str):
    (sent,) = [r for r in upstream.requests if r.path.endswith(path.removeprefix("/v1"))]
    return sent


def assert_plain(sent, expected: bytes) -> None:
    """The upstream got `expected`, uncompressed, with no Content-Encoding and its own length."""
    assert sent.body == expected
    assert "content-encoding" not in sent.headers, sent.headers
    assert sent.headers["content-length"] == str(len(expected))


def assert_error(r: httpx2.Response, path: str, status: int, code: str) -> str:
    assert r.status_code == status, (r.status_code, r.text[:300])
    body = r.json()
    if path.startswith("/v1/messages"):
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
        return body["error"]["message"]
    assert body["error"]["code"] == code, body
    return body["error"]["message"]


@pytest.mark.parametrize("coding", list(ENCODE))
@pytest.mark.parametrize("path", list(BODIES))
def test_a_compressed_body_reaches_the_upstream_as_plain_json(proxy_url, upstream, path, coding):
    plain = json.dumps(BODIES[path]).encode()
    r = post(proxy_url, path, body=ENCODE[coding](plain), headers=headers_for(path, coding))
    assert r.status_code == 200, (r.status_code, r.text[:300])
    assert_plain(the_request(upstream, path), plain)


def test_stacked_codings_and_identity(proxy_url, upstream):
    path = "/v1/responses"
    plain = json.dumps(BODIES[path]).encode()
    sent = brotli.compress(zstandard.ZstdCompressor().compress(gzip.compress(plain)))
    r = post(proxy_url, path, body=sent, headers=headers_for(path, "identity, gzip, zstd, br"))
    assert r.status_code == 200, r.text
    assert_plain(the_request(upstream, path), plain)
    upstream.requests.clear()
    r = post(
        proxy_url, path, body=plain, headers=headers_for(path, "identity")
    )  # nothing to undo: the body and its header go up as sent
    assert r.status_code == 200, r.text
    sent = the_request(upstream, path)
    assert sent.body == plain and sent.headers["content-encoding"] == "identity"


def test_a_compressed_body_that_is_offloaded_and_reloaded(proxy_url, upstream):
    """The rewritten body (compaction, then a reload round) goes up plain too."""
    from starlette.responses import JSONResponse

    from tests.harness.servers import completion, scripted, tool_call

    messages = agent_history(steps=3, lines=200)
    plain = json.dumps({"model": "gpt-4o", "messages": messages}).encode()

    def reload_first(rec):
        return JSONResponse(completion(None, tool_calls=[tool_call("context_reload", {"ref": refs_sent(rec)[0]})]))

    upstream.handler = scripted(reload_first, lambda rec: JSONResponse(completion("done")))
    r = post(
        proxy_url,
        "/v1/chat/completions",
        body=zstandard.ZstdCompressor().compress(plain),
        headers={
            **headers_for("/v1/chat/completions", "zstd"),
            **{
                "X-Offload-Max-Total-Tokens": "100",
                "X-Offload-Max-Tool-Message-Tokens": "200",
                "X-Offload-Mode": "compact",
            },
        },
    )
    assert r.status_code == 200, r.text
    assert int(r.headers["x-offload-refs"]) > 0
    first, second = upstream.chat_requests()
    for sent in (first, second):
        assert "content-encoding" not in sent.headers
        assert sent.headers["content-length"] == str(len(sent.body))
        assert json.loads(sent.body)["messages"]


def test_a_client_gzipping_with_the_openai_sdk(proxy_url, upstream):
    """The OpenAI SDK over an httpx client that gzips every request body, as a client would."""
    import openai

    class Gzipping(httpx2.BaseTransport):
        def __init__(self) -> None:
            self.inner = httpx2.HTTPTransport()

        def handle_request(self, request):
            body = gzip.compress(request.read())
            headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"content-length"]
            headers += [(b"content-encoding", b"gzip"), (b"content-length", str(len(body)).encode())]
            return self.inner.handle_request(httpx2.Request(request.method, request.url, headers=headers, content=body))

    client = openai.OpenAI(
        base_url=f"{proxy_url}/v1", api_key="sk-compressed-sdk", http_client=httpx2.Client(transport=Gzipping())
    )
    answer = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "Hello there"
    (sent,) = upstream.chat_requests()
    assert "content-encoding" not in sent.headers
    assert json.loads(sent.body)["messages"] == [{"role": "user", "content": "hi"}]


def zeros_zstd(size: int) -> bytes:
    c = zstandard.ZstdCompressor().compressobj()
    piece = bytes(1 << 20)
    return b"".join([c.compress(piece) for _ in range(size >> 20)] + [c.flush()])


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return zeros_zstd(1 << 30)  # 1 GiB of zeros, ~32 KB sent


@pytest.mark.parametrize("path", list(BODIES))
def test_a_zstd_bomb_is_a_413(proxy_url, upstream, bomb, path):
    assert len(bomb) < 64 * 1024
    r = post(proxy_url, path, body=bomb, headers=headers_for(path, "zstd"))
    message = assert_error(r, path, 413, "request_too_large")
    assert "exceeds" in message
    assert upstream.requests == []


@pytest.mark.parametrize("coding", list(ENCODE))
def test_a_corrupt_body_is_a_400_in_each_shape(proxy_url, upstream, coding):
    for path in ("/v1/chat/completions", "/v1/messages"):
        plain = json.dumps(BODIES[path]).encode()
        r = post(proxy_url, path, body=ENCODE[coding](plain)[:-4], headers=headers_for(path, coding))
        message = assert_error(r, path, 400, "invalid_body")
        assert f"could not be decoded as {coding}" in message
    assert upstream.requests == []


def test_an_unknown_coding_is_a_415_in_each_shape(proxy_url, upstream):
    for path in BODIES:
        r = post(proxy_url, path, body=json.dumps(BODIES[path]).encode(), headers=headers_for(path, "compress"))
        message = assert_error(r, path, 415, "unsupported_content_encoding")
        assert "compress" in message
    assert upstream.requests == []


@pytest.mark.parametrize("path", ["/v1/embeddings", "/v1/files"])
def test_a_relayed_body_keeps_its_coding(proxy_url, upstream, path):
    plain = json.dumps({"model": "text-embedding-3-small", "input": "hello " * 200}).encode()
    sent = gzip.compress(plain)
    r = post(proxy_url, path, body=sent, headers=headers_for(path, "gzip"))
    assert r.status_code == 200, r.text
    (got,) = upstream.requests
    assert got.body == sent
    assert got.headers["content-encoding"] == "gzip"
    assert got.headers["content-length"] == str(len(sent))


def test_the_direct_api_reads_a_compressed_body(proxy_url, upstream):
    plain = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}).encode()
    r = httpx2.post(
        f"{proxy_url}/v1/offload",
        content=gzip.compress(plain),
        timeout=20,
        headers={"authorization": "Bearer sk-compressed-api", "content-encoding": "gzip"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["messages"] == [{"role": "user", "content": "hi"}]
