"""One Date and at most one Server header on every response, relayed or the proxy's own.

Through the real servers: the proxy and the fake upstream both run under uvicorn with the options
`serve` uses (tests.harness.servers.ServerThread → proxy.cli.uvicorn_options)."""

from __future__ import annotations

from email.utils import parsedate_to_datetime

import httpx2
from starlette.responses import JSONResponse, StreamingResponse

from tests.harness.servers import ProxyProcess, stream_chunks

UPSTREAM_DATE = "Mon, 01 Jan 2024 00:00:00 GMT"
AUTH = {"Authorization": "Bearer sk-test"}


def like_a_real_upstream(extra: dict[str, str] | None = None):
    """An upstream that names itself, as OpenAI's and most do (its Date comes from its own server)."""

    async def handler(request, rec):
        headers = {"server": "fake-openai", **(extra or {})}
        if rec.path.endswith("/chat/completions") and rec.json().get("stream"):
            return StreamingResponse(iter(stream_chunks("Hi there")), media_type="text/event-stream", headers=headers)
        if rec.path.endswith("/chat/completions"):
            from tests.harness.servers import completion

            return JSONResponse(completion("Hi there"), headers=headers)
        return JSONResponse({"object": "list", "data": [{"id": "gpt-4o", "object": "model"}]}, headers=headers)

    return handler


def assert_one_date(response: httpx2.Response) -> None:
    dates = response.headers.get_list("date")
    assert len(dates) == 1, response.headers.raw
    parsedate_to_datetime(dates[0])  # a valid HTTP date


def test_relayed_response_has_one_date_and_one_server(proxy_url, upstream):
    upstream.handler = like_a_real_upstream()
    response = httpx2.get(f"{proxy_url}/v1/models", headers=AUTH, timeout=10)
    assert response.status_code == 200 and response.json()["data"][0]["id"] == "gpt-4o"
    assert_one_date(response)
    assert response.headers.get_list("server") == ["fake-openai"]  # the upstream's, once


def test_relayed_date_is_the_upstreams_own(proxy_url, upstream):
    upstream.handler = like_a_real_upstream({"date": UPSTREAM_DATE})
    response = httpx2.get(f"{proxy_url}/v1/models", headers=AUTH, timeout=10)
    assert response.headers.get_list("date") == [UPSTREAM_DATE]


def test_chat_completions_have_one_date_and_at_most_one_server(proxy_url, upstream):
    upstream.handler = like_a_real_upstream()
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    plain = httpx2.post(f"{proxy_url}/v1/chat/completions", json=body, headers=AUTH, timeout=10)
    assert plain.status_code == 200
    with httpx2.stream(
        "POST", f"{proxy_url}/v1/chat/completions", json={**body, "stream": True}, headers=AUTH, timeout=10
    ) as streamed:
        assert streamed.status_code == 200
        streamed.read()
    for response in (plain, streamed):
        assert_one_date(response)
        assert len(response.headers.get_list("server")) <= 1


def test_the_proxys_own_responses_have_a_date(proxy_url, upstream):
    health = httpx2.get(f"{proxy_url}/healthz", timeout=10)
    bad = httpx2.post(f"{proxy_url}/v1/chat/completions", content=b"{not json", headers=AUTH, timeout=10)
    assert health.status_code == 200 and bad.status_code == 400
    for response in (health, bad):
        assert_one_date(response)
        assert len(response.headers.get_list("server")) <= 1
    assert not upstream.requests  # both answered by the proxy itself


def test_the_fake_upstream_sends_a_date_of_its_own(upstream):
    response = httpx2.get(f"{upstream.url}/v1/models", timeout=10)
    assert_one_date(response)


def test_python_m_proxy_serve_answers_with_one_date_and_no_duplicate_server(tmp_path):
    with ProxyProcess("--log-level", "warning", data_dir=tmp_path / "data") as proxy:
        health = httpx2.get(f"{proxy.url}/healthz", timeout=5)
        assert_one_date(health)
        assert len(health.headers.get_list("server")) <= 1


def _raw_post(url: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
    """A request written byte for byte (httpx2 would refuse the header values sent here)."""
    import socket
    from urllib.parse import urlsplit

    where = urlsplit(url)
    lines = [
        f"POST {path} HTTP/1.1",
        f"host: {where.netloc}",
        f"content-length: {len(body)}",
        "connection: close",
        *(f"{name}:{value}" for name, value in headers.items()),
    ]
    with socket.create_connection((where.hostname, where.port), timeout=20) as s:
        s.sendall("\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), rest


def test_whitespace_around_a_header_value_is_not_sent_upstream(proxy_url, upstream):
    """RFC 9110 §5.5: whitespace around a field value is no part of it. The HTTP parser in front
    of the proxy may keep it; the client to the upstream refuses it (a 502 'upstream
    unreachable' for a well-formed request): the proxy sends the value without it."""
    import gzip

    chat = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}'
    for path, body, extra in [
        ("/v1/chat/completions", chat, {}),
        ("/v1/embeddings", b'{"model": "e", "input": "x"}', {}),
        ("/v1/embeddings", gzip.compress(b'{"model": "e", "input": "x"}'), {"content-encoding": " gzip \t"}),
    ]:
        upstream.requests.clear()
        headers = {
            "authorization": " Bearer sk-test ",
            "content-type": "application/json ",
            "x-client-note": " padded\t",
            **extra,
        }
        status, answer = _raw_post(proxy_url, path, headers, body)
        assert status == 200, (path, status, answer[:200])
        [sent] = upstream.requests
        assert sent.headers["x-client-note"] == "padded" and sent.headers["content-type"] == "application/json"
