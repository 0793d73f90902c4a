"""`offload-proxy demo` (scripts/demo) as a user runs it: a subprocess, its printed tables, the
dashboard and the statistics API reachable with the printed one-time admin token until Ctrl-C,
and offline (no tiktoken encodings: estimated counts)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx2
import pytest

from proxy.demo._run import CONVERSATION, free_port, steps
from proxy.replay._runner import load_conversations

TURNS = len(steps(load_conversations(CONVERSATION)[0]["messages"]))
FORMATS = ("chat", "responses", "anthropic")
TURN_ROW = re.compile(r"^\s*(\d+)  .{34} +(\d+) +(\d+) +(\d+) +(\d+) +[\d.]+  (.+?) +(\d+)/(\d+)/(\d+)$")
TOTAL_ROW = re.compile(r"^(chat|responses|anthropic) +(\d+) +(\d+) +(\d+) +(\d+) +([\d.]+) +(\d+) +(\d+) +(\d+)$")


def demo_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "proxy", "demo", *args]


def parse(stdout: str) -> dict:
    lines = stdout.splitlines()
    turns = [m.groups() for m in map(TURN_ROW.match, lines) if m]
    totals = {
        m.group(1): [int(x) if x.isdigit() else float(x) for x in m.groups()[1:]]
        for m in map(TOTAL_ROW.match, lines)
        if m
    }
    url = re.search(r"^Dashboard: +(http://127\.0\.0\.1:\d+/dashboard)$", stdout, re.M)
    token = re.search(r"^Admin token: +(\S+)$", stdout, re.M)
    return {"turns": turns, "totals": totals, "url": url and url.group(1), "token": token and token.group(1)}


def check_tables(found: dict) -> None:
    assert [int(t[0]) for t in found["turns"]] == list(range(1, TURNS + 1))
    actions = {t[5] for t in found["turns"]}
    assert {"none", "compress", "compact+compress"} <= actions, actions
    assert set(found["totals"]) == set(FORMATS)
    for format, (turns, errors, raw, forwarded, ratio, compacted, compressed, reloads) in found["totals"].items():
        assert turns == TURNS and errors == 0, format
        assert 0 < forwarded < 0.6 * raw and ratio < 0.6, format  # compaction and compression saved tokens
        assert compacted > 0 and compressed > 0 and reloads > 0, format  # the fake model reloaded offloaded results
    assert all(int(t[3]) < int(t[1]) for t in found["turns"][-5:])  # the last turns forwarded less than raw


def store_folder(stderr: str) -> Path:
    return Path(re.search(r"embedded store in (\S+)\)", stderr).group(1))


def test_demo_no_wait_prints_the_tables_and_stops_on_the_ports_asked(tmp_path):
    port, upstream_port = free_port(), free_port()
    done = subprocess.run(
        demo_command("--no-wait", "--port", str(port), "--upstream-port", str(upstream_port)),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = parse(done.stdout)
    check_tables(found)
    assert found["url"] is None and found["token"] is None  # the dashboard is down already: not offered
    assert "Sign in" not in done.stdout and "Proxy:" not in done.stdout
    assert "the statistics API: %d requests" % (3 * TURNS) in done.stdout
    assert all(f"{format:10} {TURNS}/{TURNS} turns" in done.stderr for format in FORMATS)  # the progress
    assert not store_folder(done.stderr).exists()  # its temporary data removed
    for url in (f"http://127.0.0.1:{port}/healthz", f"http://127.0.0.1:{upstream_port}/"):  # both stopped
        with pytest.raises(httpx2.TransportError):
            httpx2.get(url, timeout=2)


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job of a script (a CI runner) starts


def test_demo_keeps_the_dashboard_up_with_the_printed_token_until_ctrl_c(tmp_path):
    """Started with SIGINT ignored, as in CI: Ctrl-C stops it all the same."""
    upstream = f"http://127.0.0.1:{free_port()}"
    process = subprocess.Popen(
        demo_command("--upstream-port", upstream.rpartition(":")[2]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        preexec_fn=ignore_sigint,
    )
    errors: list[str] = []
    threading.Thread(target=lambda: errors.extend(process.stderr), daemon=True).start()
    lines: list[str] = []
    timer = threading.Timer(240, process.terminate)  # SIGTERM: the demo still stops its servers
    timer.start()
    try:
        for line in process.stdout:
            lines.append(line)
            if line.startswith("Sign in with the admin token"):
                break
        found = parse("".join(lines))
        assert found["turns"], ("".join(lines)[-1500:], "".join(errors)[-3000:])  # why it did not get there
        check_tables(found)
        assert found["url"] and found["token"] and len(found["token"]) >= 20
        root = found["url"].removesuffix("/dashboard")
        page = httpx2.get(found["url"], timeout=10)
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        admin = {"authorization": f"Bearer {found['token']}"}
        stats = httpx2.get(f"{root}/v1/offload/stats", params={"window": "1h"}, headers=admin, timeout=10)
        assert stats.status_code == 200, stats.text
        totals = stats.json()["totals"]
        assert totals["requests"] == 3 * TURNS and totals["tokens_saved"] > 0 and totals["reload_rounds"] > 0
        other = httpx2.get(
            f"{root}/v1/offload/stats",
            params={"window": "1h"},
            headers={"authorization": "Bearer not-the-token"},
            timeout=10,
        )
        # without an upstream key any other key is some tenant's own provider key: it sees nothing of the demo's
        assert other.status_code == 200 and other.json()["totals"]["requests"] == 0
        assert httpx2.get(f"{upstream}/", timeout=10).status_code  # the fake upstream on the port asked
        assert process.poll() is None  # still up
        process.send_signal(signal.SIGINT)  # Ctrl-C
        assert process.wait(timeout=30) == 0
    finally:
        timer.cancel()
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    for url in (found["url"], f"{upstream}/"):  # both servers stopped
        with pytest.raises(httpx2.TransportError):
            httpx2.get(url, timeout=2)
    assert not store_folder("".join(errors)).exists()


def test_demo_works_offline_without_tiktoken_encodings(tmp_path):
    """A fresh clone without ../shared and no network: tokens are estimated, the demo runs all the same."""
    empty = tmp_path / "no-encodings"
    empty.mkdir()
    env = {
        **os.environ,
        "TIKTOKEN_CACHE_DIR": str(empty),
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1,localhost",
    }  # any download: refused
    done = subprocess.run(
        demo_command("--no-wait"),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    check_tables(parse(done.stdout))
    assert "tokens: ESTIMATES" in done.stdout
    assert not list(empty.iterdir())  # nothing was downloaded


def test_the_anthropic_sdk_streams_through_the_proxy_from_the_bundled_fake(tmp_path):
    import anthropic

    from proxy.demo._run import free_port, wait_up
    from tests.harness.servers import ProxyProcess

    port = free_port()
    fake = subprocess.Popen([sys.executable, "-m", "proxy.demo.fake_upstream", str(port)], stdin=subprocess.DEVNULL)
    try:
        assert wait_up(f"http://127.0.0.1:{port}/", fake, timeout=30)
        upstream = f"http://127.0.0.1:{port}"
        with ProxyProcess(
            "--upstream",
            f"{upstream}/v1",
            "--anthropic-upstream",
            upstream,
            "--log-level",
            "warning",
            data_dir=tmp_path / "data",
        ) as proxy:
            client = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant-demo-key", max_retries=0, timeout=20)
            with client.messages.stream(
                model="claude-sonnet-4", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
            ) as stream:
                texts = list(stream.text_stream)
                final = stream.get_final_message()
        assert "".join(texts) == "ok" and final.stop_reason == "end_turn" and final.content[0].text == "ok"
    finally:
        fake.terminate()
        fake.wait(timeout=15)


def test_the_admin_token_goes_by_environment_whatever_it_starts_with():
    """secrets.token_urlsafe may start with "-": once given as `--admin-token <token>`, serve took
    it for an option and the demo failed (about one run in 64). It is not in argv at all now."""
    from proxy.demo._run import Servers

    servers = Servers(0, "-dash-first-token")
    try:
        servers.start()
        assert all("-dash-first-token" not in " ".join(map(str, p.args)) for p in servers.processes)
        metrics = f"{servers.root}/metrics"  # the admin token's alone
        r = httpx2.get(metrics, headers={"authorization": "Bearer -dash-first-token"}, timeout=10)
        assert r.status_code == 200, r.text
        assert httpx2.get(metrics, headers={"authorization": "Bearer other"}, timeout=10).status_code in (401, 403)
    finally:
        servers.stop()
