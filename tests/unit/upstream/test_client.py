"""Unit level, upstream faked with respx: URL building, error mapping, relay through the app."""

from __future__ import annotations

import httpx2
import pytest
import respx
from starlette.testclient import TestClient

from proxy.config import ServerSettings
from proxy.errors import ProxyError
from proxy.http.app import create_app
from proxy.http.error_map import status_of
from proxy.upstream.client import Upstream

BASE = "http://upstream.test/v1"


def test_url_keeps_path_and_query():
    up = Upstream(ServerSettings(upstream=BASE + "/"))
    assert up.url("models") == f"{BASE}/models"
    assert up.url("/files/abc/content", b"a=1&b=%20") == f"{BASE}/files/abc/content?a=1&b=%20"


@pytest.mark.anyio
@pytest.mark.parametrize(
    "error,status,code",
    [
        (httpx2.ConnectError("refused"), 502, "upstream_unreachable"),
        (httpx2.ConnectTimeout("slow"), 504, "upstream_timeout"),
        (httpx2.ReadTimeout("slow"), 504, "upstream_timeout"),
        (httpx2.RemoteProtocolError("garbage"), 502, "upstream_unreachable"),
    ],
)
async def test_transport_errors_map_to_openai_errors(error, status, code):
    up = Upstream(ServerSettings(upstream=BASE))
    with respx.mock:
        respx.post(f"{BASE}/chat/completions").mock(side_effect=error)
        with pytest.raises(ProxyError) as info:
            await up.send("POST", "chat/completions", headers=[], content=b"{}")
    assert (status_of(info.value), info.value.code) == (status, code)
    await up.aclose()


def test_app_relays_and_offloads_against_respx(tmp_path):
    app = create_app(ServerSettings(upstream=BASE, data_dir=tmp_path))
    with respx.mock(assert_all_called=True) as mock, TestClient(app) as client:
        models = mock.get(f"{BASE}/models").mock(
            return_value=httpx2.Response(
                200, json={"object": "list", "data": []}, headers={"x-request-id": "req_respx"}
            )
        )
        chat = mock.post(f"{BASE}/chat/completions").mock(
            return_value=httpx2.Response(200, json={"id": "x", "object": "chat.completion", "choices": []})
        )
        r = client.get("/v1/models", headers={"X-Offload-Mode": "off", "Authorization": "Bearer k"})
        assert r.status_code == 200 and r.headers["x-request-id"] == "req_respx"
        sent = models.calls.last.request
        assert sent.headers["authorization"] == "Bearer k" and "x-offload-mode" not in sent.headers
        big = "line of tool output\n" * 3000
        body = {
            "model": "gpt-4o",
            "messages": [
                {"role": "user", "content": "go"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "sh", "arguments": "{}"}}],
                },
                {"role": "tool", "tool_call_id": "c1", "content": big},
                {"role": "user", "content": "next"},
            ],
        }
        r = client.post(
            "/v1/chat/completions",
            json=body,
            headers={"X-Offload-Max-Total-Tokens": "100", "Authorization": "Bearer k"},
        )
        assert r.status_code == 200 and r.headers["x-offload-action"] == "compact"
        forwarded = chat.calls.last.request
        assert b"ref=" in forwarded.content and big.encode() not in forwarded.content
        assert b"context_reload" in forwarded.content
