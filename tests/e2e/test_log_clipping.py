"""Client-chosen strings are clipped in every log line, whatever the log format.

A model name, a session id, a path, a query, a user agent, a tenant name of a megabyte (or as
much as the HTTP server lets through) reach the access line (json or text) or a warning: each
line stays a few KB, the stream of log lines stays small.
"""

from __future__ import annotations

import json

import httpx2
import pytest

from tests.harness.requests import post, request
from tests.harness.servers import ProxyProcess

HUGE = 1_000_000
HEADER = 30_000  # characters per header value (the HTTP server's limits come first past ~64 KB)
LINE_LIMIT = 6_000  # characters: MAX_MESSAGE_CHARS and the JSON around it


def huge_strings_through(url: str) -> None:
    """Each client-chosen string of a megabyte (a header's of 30,000 characters), one request each."""
    key = "sk-test-key"
    chat = {"model": "M" * HUGE, "messages": [{"role": "user", "content": "hi"}]}
    with httpx2.Client() as http:
        r = post(
            url,
            json=chat,
            key=key,
            headers={"user-agent": "U" * HEADER, "X-Client-Note": "H" * HEADER},
            client=http,
            timeout=30,
        )
        assert r.status_code == 200, r.text[:300]
        post(url, json=chat, key=key, headers={"X-Offload-Session": "S" * HEADER}, client=http, timeout=30)
        post(url, "/v1/responses", json={"model": "R" * HUGE, "input": "hi"}, key=key, client=http, timeout=30)
        post(
            url,
            "/v1/messages",
            json={"model": "A" * HUGE, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
            key="sk-ant-test",
            client=http,
            timeout=30,
        )
        post(url, json=chat, key=key, headers={"X-Offload-Tenant": "T" * HEADER}, client=http, timeout=30)
        request(url, f"/v1/{'p' * HEADER}?q={'Q' * HEADER}", method="GET", key=key, client=http, timeout=30)
        request(url, f"/{'x' * HEADER}", method="GET", key=key, client=http, timeout=30)
        post(url, body=b'{"model": "' + b"B" * HUGE, key=key, client=http, timeout=30)  # not JSON: refused


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_every_log_line_stays_a_few_kb(upstream, tmp_path, log_format):
    proxy = ProxyProcess(
        "--upstream",
        f"{upstream.url}/v1",
        "--log-format",
        log_format,
        data_dir=tmp_path,
        capture=True,
        capture_stdout=True,
    )  # uvicorn's access lines go to stdout
    proxy.start()
    try:
        huge_strings_through(proxy.url)
    finally:
        err = proxy.stop() + proxy.stdout
    lines = err.splitlines()
    assert max(map(len, lines)) < LINE_LIMIT, sorted(map(len, lines))[-5:]
    assert len(err) < 100_000, len(err)
    for letter in "MRASUHTpQx":
        assert letter * 1_000 not in err, letter
    access = [line for line in lines if '"route":' in line or " route=" in line]  # json, text
    assert len(access) >= 5, err[-3000:]
    [chat] = [line for line in access if '"model":"MMM' in line or " model=MMM" in line][:1]
    if log_format == "json":
        model = json.loads(chat)["model"]
        assert model.startswith("M" * 300) and model.endswith(f"…[{HUGE} chars]") and len(model) < 350
    if log_format == "text":  # the access line as text, its path clipped
        assert any(" GET /v1/ppp" in line and "chars]" in line for line in access), err[-3000:]
        assert f"…[{HUGE} chars]" in chat
