"""`offload-proxy serve` options, environment variables and --help."""

from __future__ import annotations

import subprocess
import sys

import pytest

from proxy.cli import build_parser, resolve_settings


def test_help_documents_every_option():
    out = subprocess.run([sys.executable, "-m", "proxy", "serve", "--help"], capture_output=True, text=True,
                         check=True).stdout
    for option in ("--host", "--port", "--upstream", "--redis-url", "--data-dir", "--workers", "--log-level",
                   "OFFLOAD_UPSTREAM", "OFFLOAD_REDIS_URL"):
        assert option in out


def test_cli_overrides_env_overrides_default(monkeypatch):
    monkeypatch.setenv("OFFLOAD_UPSTREAM", "http://env.example/v1")
    monkeypatch.setenv("OFFLOAD_PORT", "9001")
    settings = resolve_settings(build_parser().parse_args(["serve", "--port", "9002"]))
    assert settings.upstream == "http://env.example/v1"
    assert settings.port == 9002
    assert settings.redis_url is None and settings.workers == 1


def test_invalid_option_is_a_clear_error():
    with pytest.raises(SystemExit) as info:
        from proxy.cli import main

        main(["serve", "--port", "not-a-port"])
    assert "port" in str(info.value)


def test_python_m_proxy_serve_runs_with_embedded_store(tmp_path):
    import time

    import httpx

    from tests.servers import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--port", str(port), "--data-dir",
                             str(tmp_path / "data"), "--log-level", "warning"])
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and proc.poll() is None, "server did not come up"
                time.sleep(0.1)
        assert ready.status_code == 200
        assert (tmp_path / "data" / "offload.sqlite3").exists()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
