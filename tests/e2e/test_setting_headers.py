"""A per-request setting header with a bad value, on every managed endpoint: a 400 in the
endpoint's own error shape naming the header, never a 500, and nothing sent upstream. The
setting that became optional (`X-Offload-Max-Tool-Message-Tokens`: unset, it follows the
trigger) cannot be unset, nor set to another type, by a header."""

from __future__ import annotations

import httpx2
import pytest

BAD = [
    "null",
    "None",
    "",
    "0",
    "-5",
    "6000.5",
    "1e9",
    "[1]",
    "{}",
    "٣٠٠٠".encode(),
    "9" * 300,
]  # Arabic digits as raw UTF-8
ENDPOINTS = [
    ("/v1/chat/completions", {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/responses", {"model": "gpt-5", "input": "hi"}),
    ("/v1/messages", {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}),
]


@pytest.mark.parametrize("path,body", ENDPOINTS, ids=[p for p, _ in ENDPOINTS])
def test_a_bad_tool_result_threshold_is_a_400_in_the_endpoints_shape(proxy_url, upstream, key, path, body):
    for value in BAD:
        r = httpx2.post(
            f"{proxy_url}{path}",
            json=body,
            timeout=10,
            headers={
                "authorization": f"Bearer {key}",
                "x-api-key": key,
                "anthropic-version": "2023-06-01",
                "X-Offload-Max-Tool-Message-Tokens": value,
            },
        )
        assert r.status_code == 400, (value, r.status_code, r.text)
        error = r.json()
        if path == "/v1/messages":
            assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error", error
        else:
            assert error["error"]["type"] == "invalid_request_error", error
        assert "X-Offload-Max-Tool-Message-Tokens" in error["error"]["message"], (value, error)
    assert not upstream.requests
    # a valid value goes through
    r = httpx2.post(
        f"{proxy_url}{path}",
        json=body,
        timeout=10,
        headers={
            "authorization": f"Bearer {key}",
            "x-api-key": key,
            "anthropic-version": "2023-06-01",
            "X-Offload-Max-Tool-Message-Tokens": "4000",
        },
    )
    assert r.status_code == 200, r.text
