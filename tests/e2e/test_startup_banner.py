"""`python -m proxy serve` says once what it is doing (the banner), a missing tiktoken encoding in
one line, and writes one line per request."""

from __future__ import annotations

import json
import os
import socket

import httpx2

from tests.harness.servers import ProxyProcess
from tests.harness.websocket import Socket, completed, texts

KEY = {"authorization": "Bearer sk-test-key"}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def banner_of(stderr: str) -> dict[str, str]:
    """The banner's lines by their first word."""
    lines = stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("offload-proxy "))
    found = {"version": lines[start].split()[1]}
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        name, _, rest = line.strip().partition(" ")
        found[name] = rest.strip()
    return found


def test_banner_says_where_everything_is(tmp_path, upstream):
    proxy = ProxyProcess(
        "--log-format",
        "text",
        "--upstream",
        upstream.url,
        "--anthropic-upstream",
        f"{upstream.url}/v1/",
        "--max-total-tokens",
        "5000",
        "--admin-token",
        "admin-secret-0123456789",
        data_dir=tmp_path / "data",
        capture=True,
    )
    with proxy, Socket(proxy.url) as ws:  # `serve` serves the WebSocket mode it announces
        assert texts(completed(ws.create(input="hi"))) == ["Hello there"]
    stderr = proxy.stderr
    banner = banner_of(stderr)
    assert banner["version"] == __import__("proxy").__version__
    assert banner["listening"].startswith(proxy.url) and f"{proxy.url}/v1" in banner["listening"]
    assert banner["openai"].startswith(f"{upstream.url}/v1/")  # written without /v1: shown as called
    assert banner["anthropic"].startswith(f"{upstream.url}/v1/")
    assert banner["store"] == f"SQLite {(tmp_path / 'data' / 'offload.sqlite3').resolve()}"
    assert "mode auto" in banner["offload"] and "5000 tokens" in banner["offload"]
    assert "tool results over 1666 tokens" in banner["offload"]  # unset: a third of a trigger below 18000
    assert "(the newest too over 25000)" in banner["offload"]
    assert banner["auth"].startswith("client keys relayed")
    assert banner["context"].startswith("auto: openai emulated by the proxy, anthropic emulated")  # a local upstream
    assert banner["dashboard"] == f"{proxy.url}/dashboard"
    assert banner["metrics"] == f"{proxy.url}/metrics (admin token required)"
    ws_url = proxy.url.replace("http://", "ws://")
    assert banner["websocket"].startswith(
        f"{ws_url}/v1/responses served (Responses WebSocket mode; the upstream "
        "reached over HTTP/SSE); 64 connection(s) per tenant, 1024 per worker, idle 900 s"
    )
    assert "admin-secret" not in stderr
    assert stderr.count("offload-proxy 0") == 1


def test_banner_never_shows_a_redis_password(tmp_path):
    port = closed_port()  # no Redis there: the proxy still starts, ready but degraded
    url = f"redis://:t0p-s3cret@127.0.0.1:{port}/0?password=0ther-s3cret"
    proxy = ProxyProcess(
        "--log-format",
        "text",
        "--redis-url",
        url,
        "--upstream-api-key",
        "sk-operator-key-123",
        data_dir=tmp_path / "data",
        capture=True,
        capture_stdout=True,
        ready_path="/healthz",
    )
    with proxy:
        ready = httpx2.get(f"{proxy.url}/readyz")
        assert ready.status_code == 200 and ready.json()["degraded"] is True
    stderr = proxy.stderr
    banner = banner_of(stderr)
    assert banner["store"] == f"Redis redis://:***@127.0.0.1:{port}/0?password=***"
    assert banner["auth"].startswith("proxy keys required")
    everything = stderr + proxy.stdout
    assert "s3cret" not in everything and "sk-operator" not in everything


def test_json_banner_is_json_lines(tmp_path, upstream):
    proxy = ProxyProcess("--upstream", f"{upstream.url}/v1", data_dir=tmp_path / "data", capture=True)
    with proxy:
        pass
    records = [json.loads(line) for line in proxy.stderr.splitlines() if line.startswith("{")]
    banner = [r["message"] for r in records if r.get("logger") == "proxy.startup"]
    assert banner[0].startswith("offload-proxy ") and any(m.startswith("store") for m in banner)
    assert any("/…" in m for m in banner) and "\\u2026" not in proxy.stderr  # UTF-8 as written, not escaped
    assert all(line.startswith("{") for line in proxy.stderr.splitlines() if line.strip())


def test_text_logs_write_one_line_per_request(tmp_path, upstream):
    proxy = ProxyProcess(
        "--log-format",
        "text",
        "--upstream",
        f"{upstream.url}/v1",
        data_dir=tmp_path / "data",
        capture=True,
        capture_stdout=True,
    )
    with proxy:
        assert httpx2.get(f"{proxy.url}/v1/models", headers=KEY).status_code == 200
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
        assert httpx2.post(f"{proxy.url}/v1/chat/completions", json=body, headers=KEY).status_code == 200
        assert httpx2.get(f"{proxy.url}/no-such-page").status_code == 404
    everything = (proxy.stderr + proxy.stdout).splitlines()
    for path, status in (("/v1/models", 200), ("/v1/chat/completions", 200), ("/no-such-page", 404)):
        lines = [
            line
            for line in everything
            if path in line and "offload-proxy" not in line and "listening" not in line and "dashboard" not in line
        ]
        assert len(lines) == 1, lines
        assert f" {path} {status} " in lines[0]
    chat = next(line for line in everything if "/v1/chat/completions 200" in line)
    assert "route=chat" in chat and "action=none" in chat and "tokens_before=" in chat


def test_a_missing_tiktoken_encoding_is_one_line(tmp_path, upstream):
    env = {
        **os.environ,
        "TIKTOKEN_CACHE_DIR": str(tmp_path / "empty-cache"),
        # no network for the download, whatever the machine has
        "HTTPS_PROXY": f"http://127.0.0.1:{closed_port()}",
        "https_proxy": f"http://127.0.0.1:{closed_port()}",
    }
    (tmp_path / "empty-cache").mkdir()
    proxy = ProxyProcess(
        "--log-format", "text", "--upstream", f"{upstream.url}/v1", data_dir=tmp_path / "data", capture=True, env=env
    )
    with proxy:
        pass
    lines = [line for line in proxy.stderr.splitlines() if "o200k_base" in line]
    assert len(lines) == 1, proxy.stderr
    assert "o200k_base" in lines[0] and "estimated" in lines[0] and "TIKTOKEN_CACHE_DIR" in lines[0]
    assert len(lines[0].replace(str(tmp_path), "")) < 400
    assert "Traceback" not in proxy.stderr and "resolve" not in proxy.stderr.lower()


def test_on_a_terminal_the_banner_is_an_aligned_block_and_the_logs_stay_json(tmp_path, upstream):
    """A person at a terminal (stderr, where the banner and logs go, is one): the banner as the
    text format writes it, the request log lines JSON as ever (the default --log-format json)."""
    proxy = ProxyProcess("--upstream", f"{upstream.url}/v1", data_dir=tmp_path / "data", terminal=("stderr",))
    with proxy:
        assert httpx2.get(f"{proxy.url}/v1/models", headers=KEY).status_code == 200
    lines = proxy.stderr.splitlines()
    banner = banner_of(proxy.stderr)
    assert banner["version"] == __import__("proxy").__version__
    assert banner["listening"].startswith(proxy.url) and banner["store"].startswith("SQLite ")
    assert banner["workers"] == "1; logs json at info"
    start = next(i for i, line in enumerate(lines) if line.startswith("offload-proxy "))
    block = lines[start + 1 : start + len(banner)]
    assert all(line[:14].startswith("  ") and line[14] != " " for line in block), block  # one column of values
    assert not [line for line in lines if '"proxy.startup"' in line]  # no banner record as JSON
    requests = [json.loads(line) for line in lines if '"event":"request"' in line]
    assert [r["path"] for r in requests] == ["/v1/models"]


def test_off_a_terminal_the_banner_is_json_whatever_stdout_is(tmp_path, upstream):
    """stdout at a terminal, stderr to a file or collector: the banner goes where the logs go,
    so it is JSON records like them."""
    proxy = ProxyProcess(
        "--upstream", f"{upstream.url}/v1", data_dir=tmp_path / "data", capture=True, terminal=("stdout",)
    )
    with proxy:
        pass
    records = [json.loads(line) for line in proxy.stderr.splitlines() if line.strip()]  # every line JSON
    banner = [r["message"] for r in records if r.get("logger") == "proxy.startup"]
    assert banner[0].startswith("offload-proxy ") and any(m.startswith("listening") for m in banner)
