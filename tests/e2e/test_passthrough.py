"""The proxy is invisible: every endpoint relayed unchanged, with the real OpenAI SDK as client."""

from __future__ import annotations

import gzip
import io
import json

import httpx2
from starlette.responses import JSONResponse, Response

RELAYED_HEADERS = {
    "x-request-id": "req_123",
    "openai-processing-ms": "42",
    "x-ratelimit-remaining-requests": "99",
    "x-ratelimit-reset-tokens": "1s",
    "retry-after": "3",
}


def test_models_list_relayed_with_headers(client, upstream):
    async def handler(request, rec):
        return JSONResponse(
            {"object": "list", "data": [{"id": "gpt-4o", "object": "model", "created": 1, "owned_by": "openai"}]},
            headers=RELAYED_HEADERS,
        )

    upstream.handler = handler
    raw = client.models.with_raw_response.list()
    assert [m.id for m in raw.parse()] == ["gpt-4o"]
    for name, value in RELAYED_HEADERS.items():
        assert raw.headers[name] == value
    rec = upstream.requests[-1]
    assert (rec.method, rec.path) == ("GET", "/v1/models")
    assert rec.headers["authorization"] == "Bearer sk-test-key"


def test_offload_headers_never_reach_upstream(client, upstream):
    client.models.list(extra_headers={"X-Offload-Mode": "off", "X-Offload-Tenant": "t1", "X-Custom": "kept"})
    headers = upstream.requests[-1].headers
    assert not [h for h in headers if h.startswith("x-offload-")]
    assert headers["x-custom"] == "kept"


def test_embeddings(client, upstream):
    async def handler(request, rec):
        return JSONResponse(
            {
                "object": "list",
                "model": "text-embedding-3-small",
                "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}],
                "usage": {"prompt_tokens": 2, "total_tokens": 2},
            }
        )

    upstream.handler = handler
    result = client.embeddings.create(model="text-embedding-3-small", input="hi", encoding_format="float")
    assert result.data[0].embedding == [0.1, 0.2]
    assert upstream.requests[-1].json()["input"] == "hi"


def test_unknown_path_method_query_and_body(proxy_url, upstream):
    async def handler(request, rec):
        return Response(b"teapot-body", status_code=418, headers={"x-odd": "1"}, media_type="text/plain")

    upstream.handler = handler
    r = httpx2.put(
        f"{proxy_url}/v1/some/new/thing%2Fx?a=1&b=%20two",
        content=b"\x00\x01raw",
        headers={"x-y": "z", "authorization": "Bearer k"},
    )
    assert (r.status_code, r.content, r.headers["x-odd"]) == (418, b"teapot-body", "1")
    rec = upstream.requests[-1]
    assert (rec.method, rec.path, rec.query, rec.body) == (
        "PUT",
        "/v1/some/new/thing/x",
        "a=1&b=%20two",
        b"\x00\x01raw",
    )
    assert rec.headers["x-y"] == "z"


def test_responses_endpoint(client, upstream):
    async def handler(request, rec):
        return JSONResponse(
            {
                "id": "resp_1",
                "object": "response",
                "created_at": 1,
                "status": "completed",
                "model": "gpt-4o",
                "output": [],
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
            }
        )

    upstream.handler = handler
    result = client.responses.create(model="gpt-4o", input="hello")
    assert result.id == "resp_1"
    assert upstream.requests[-1].path == "/v1/responses"


def test_multipart_upload_is_byte_exact(client, upstream):
    async def handler(request, rec):
        return JSONResponse(
            {
                "id": "file-1",
                "object": "file",
                "bytes": len(rec.body),
                "created_at": 1,
                "filename": "data.jsonl",
                "purpose": "batch",
                "status": "processed",
            }
        )

    upstream.handler = handler
    payload = b'{"a": 1}\n' * 50_000 + bytes(range(256))
    client.files.create(file=("data.jsonl", io.BytesIO(payload), "application/jsonl"), purpose="batch")
    rec = upstream.requests[-1]
    assert rec.headers["content-type"].startswith("multipart/form-data; boundary=")
    assert payload in rec.body


def test_compressed_response_passes_untouched(proxy_url, upstream):
    body = json.dumps({"ok": True}).encode()

    async def handler(request, rec):
        return Response(gzip.compress(body), headers={"content-encoding": "gzip"}, media_type="application/json")

    upstream.handler = handler
    r = httpx2.get(f"{proxy_url}/v1/anything", headers={"accept-encoding": "gzip", "authorization": "Bearer k"})
    assert r.headers["content-encoding"] == "gzip"
    assert r.json() == {"ok": True}


def test_health_endpoints(proxy_url):
    assert httpx2.get(f"{proxy_url}/healthz").json() == {"status": "ok"}
    ready = httpx2.get(f"{proxy_url}/readyz")
    assert ready.status_code == 200 and ready.json()["store"] == "ok"


def test_no_cookies_kept_and_no_headers_added(proxy_url, upstream):
    """The proxy is no client of its own: cookies are not replayed to others, nothing is added."""

    async def handler(request, rec):
        return JSONResponse({"ok": True}, headers={"set-cookie": "session=secret; Path=/"})

    upstream.handler = handler
    first = httpx2.get(f"{proxy_url}/v1/a", headers={"authorization": "Bearer alice"})
    assert first.headers["set-cookie"] == "session=secret; Path=/"  # relayed to its client...
    with httpx2.Client() as bare:
        bare.get(
            f"{proxy_url}/v1/b",
            headers={"authorization": "Bearer bob", "accept-encoding": "identity", "user-agent": "agent/1"},
        )
    rec = upstream.requests[-1]
    assert "cookie" not in rec.headers  # ...but never sent upstream for someone else
    assert rec.headers["accept-encoding"] == "identity"
    assert rec.headers["user-agent"] == "agent/1"
