"""The /v1 traps: upstreams written with or without /v1, API paths called without /v1, the
proxy's own 404/405 in the family's error shape, and 502/504 naming the upstream's host."""

from __future__ import annotations

import asyncio
import socket

import anthropic
import httpx2
import openai
import pytest
from starlette.responses import JSONResponse, StreamingResponse

from tests.harness.servers import stream_chunks

KEY = {"authorization": "Bearer sk-test-key"}
ANTHROPIC = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}
CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
MESSAGE = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("openai_base, anthropic_base", [("", "/v1"), ("/v1/", "")])
def test_upstreams_with_or_without_v1(make_proxy, upstream, openai_base, anthropic_base):
    with make_proxy(upstream=upstream.url + openai_base, anthropic_upstream=upstream.url + anthropic_base) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test-key", max_retries=0)
        assert client.chat.completions.create(**CHAT).choices[0].message.content == "Hello there"
        client.models.list()
        claude = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0)
        assert claude.messages.create(**MESSAGE).content[0].text == "Hello there"
    assert [r.path for r in upstream.requests] == ["/v1/chat/completions", "/v1/models", "/v1/messages"]


def test_a_tenants_upstreams_with_or_without_v1(make_proxy, upstream, tmp_path):
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(
        f'[tenants.a]\napi_keys = ["pk-team-a-secret-0001"]\nupstream = "{upstream.url}"\n'
        f'anthropic_upstream = "{upstream.url}/v1/"\n'
    )
    with make_proxy(
        upstream="http://127.0.0.1:9/v1",
        anthropic_upstream="http://127.0.0.1:9",
        upstream_api_key="sk-server",
        tenants_file=tenants,
    ) as url:
        key = {"authorization": "Bearer pk-team-a-secret-0001"}
        assert httpx2.post(f"{url}/v1/chat/completions", json=CHAT, headers=key).status_code == 200
        r = httpx2.post(f"{url}/v1/messages", json=MESSAGE, headers={**key, "anthropic-version": "2023-06-01"})
        assert r.status_code == 200
    assert [r.path for r in upstream.requests] == ["/v1/chat/completions", "/v1/messages"]


def test_api_paths_answer_without_v1(make_proxy, upstream):
    with make_proxy() as url:
        client = openai.OpenAI(base_url=url, api_key="sk-test-key", max_retries=0)  # the root as base URL
        chat = client.chat.completions.with_raw_response.create(**CHAT)
        assert chat.headers["x-offload-action"] and chat.parse().choices[0].message.content == "Hello there"
        stream = client.chat.completions.create(**CHAT, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices).strip() == "Hello there"
        answer = client.responses.with_raw_response.create(model="gpt-4o", input="hi")
        assert answer.headers["x-offload-action"]
        assert client.models.with_raw_response.list().http_response.json()["path"] == "/v1/models"
        message = httpx2.post(f"{url}/messages", json=MESSAGE, headers=ANTHROPIC)
        assert message.status_code == 200 and message.headers["x-offload-action"]
        count = httpx2.post(f"{url}/messages/count_tokens/", json=MESSAGE, headers=ANTHROPIC)
        assert count.status_code == 200 and count.json()["input_tokens"] > 0
        # the proxy's own paths stay its own
        assert httpx2.get(f"{url}/healthz").json() == {"status": "ok"}
        assert httpx2.get(f"{url}/readyz").status_code == 200
        assert httpx2.get(f"{url}/metrics").status_code == 200
        assert httpx2.get(f"{url}/dashboard").headers["content-type"].startswith("text/html")
        # still identified: no credential, no answer
        assert httpx2.post(f"{url}/chat/completions", json=CHAT).status_code == 401
    paths = [r.path for r in upstream.requests]
    assert "/v1/chat/completions" in paths and "/v1/models" in paths and "/v1/messages" in paths
    assert "/v1/responses" in paths and all(p.startswith("/v1/") for p in paths)


def test_proxy_404_and_405_are_json_in_the_familys_shape(make_proxy, upstream):
    with make_proxy(admin_token="admin-token-0123456789") as url:
        r = httpx2.get(f"{url}/nothing-here", headers=KEY)
        assert r.status_code == 404 and r.headers["content-type"] == "application/json"
        assert r.json()["error"]["code"] == "not_found" and "/v1" in r.json()["error"]["message"]
        r = httpx2.get(f"{url}/nothing-here", headers=ANTHROPIC)
        assert r.status_code == 404
        assert r.json() == {
            "type": "error",
            "error": {"type": "not_found_error", "message": r.json()["error"]["message"]},
        }
        r = httpx2.post(f"{url}/healthz", headers=KEY)
        assert r.status_code == 405 and "GET" in r.headers["allow"]
        assert r.json()["error"]["code"] == "method_not_allowed"
        r = httpx2.delete(f"{url}/dashboard", headers=ANTHROPIC)
        assert r.status_code == 405 and r.json()["type"] == "error"
        r = httpx2.post(f"{url}/v1/offload/stats", headers={"authorization": "Bearer admin-token-0123456789"})
        assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    assert not upstream.requests


def test_unreachable_upstream_is_a_502_naming_its_host_only(make_proxy, upstream):
    port = closed_port()
    with make_proxy(
        upstream=f"http://user:s3cret-pw@127.0.0.1:{port}/v1?key=s3cret-query",
        anthropic_upstream=f"http://127.0.0.1:{port}",
    ) as url:
        for path, body, headers in (
            ("/v1/chat/completions", CHAT, KEY),
            ("/v1/models", None, KEY),
            ("/v1/messages", MESSAGE, ANTHROPIC),
        ):
            r = httpx2.request("POST" if body else "GET", f"{url}{path}", json=body, headers=headers)
            assert r.status_code == 502, r.text
            assert f"127.0.0.1:{port}" in r.text and "s3cret" not in r.text and "/v1" not in r.text


def test_upstream_timeouts_are_504_naming_its_host(make_proxy, upstream):
    async def slow(request, rec):
        if "stream" in rec.json():

            async def body():
                for chunk in stream_chunks("one two")[:2]:
                    yield chunk
                await asyncio.sleep(3)

            return StreamingResponse(body(), media_type="text/event-stream")
        await asyncio.sleep(3)
        return JSONResponse({})

    upstream.handler = slow
    host = upstream.url.removeprefix("http://")
    with make_proxy(read_timeout=0.3) as url:
        r = httpx2.post(f"{url}/v1/chat/completions", json=CHAT, headers=KEY)
        assert r.status_code == 504 and host in r.json()["error"]["message"]
        r = httpx2.post(f"{url}/v1/chat/completions", json={**CHAT, "stream": True}, headers=KEY)
        assert r.status_code == 200 and f"The upstream stream at {host} broke off (ReadTimeout)" in r.text


def test_a_reload_round_whose_body_stalls_is_a_504_naming_the_host(make_proxy, upstream):
    """Through the reload loop (the request has references): the answer's headers come, its body
    does not."""
    from tests.harness.history import agent_history

    async def stalls(request, rec):
        async def body():
            yield b'{"id": "chatcmpl-1", '
            await asyncio.sleep(3)
            yield b"}"

        return StreamingResponse(body(), media_type="application/json")

    upstream.handler = stalls
    host = upstream.url.removeprefix("http://")
    with make_proxy(read_timeout=0.3) as url:
        r = httpx2.post(
            f"{url}/v1/chat/completions",
            json={"model": "gpt-4o", "messages": agent_history(steps=2)},
            headers={**KEY, "X-Offload-Max-Total-Tokens": "1000", "X-Offload-Max-Tool-Message-Tokens": "500"},
            timeout=20,
        )
        assert r.status_code == 504, r.text
        assert r.json()["error"]["message"] == f"Upstream timed out at {host} (ReadTimeout)."
