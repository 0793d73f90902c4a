"""The real Codex CLI through `offload-proxy wrap codex`, against the bundled fake upstream.

The wrapper starts the proxy itself (every serve option on its command line: the upstream, the
offload thresholds, the admin token) and points Codex at it with `-c` overrides alone (its
built-in OpenAI provider with the proxy's base URL, over the Responses WebSocket): the harness's
own config.toml still names its `fake` provider, which the overrides replace for this run without
the file being touched. The fake model is test_codex_cli's: Codex runs `seq 1 5000`,
the proxy offloads the output and runs the model's `context_reload` itself. The exit line's
numbers are the proxy's statistics (read again from the proxy `--keep` left running), and the
exit status is Codex's. Codex's harness options (`--strict-config`: every key wrap passes must be
one Codex 0.171 knows; the network trap) go through the wrapper unchanged.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import urllib.request

import pytest
from starlette.responses import JSONResponse

from tests.e2e.test_codex_cli import FINAL, LINES, model_handler
from tests.harness import wrap
from tests.harness.codex import WEBSOCKET_FALLBACK, Codex, install
from tests.harness.prerequisites import require
from tests.harness.servers import is_responses_create

SETTINGS = (
    "--mode",
    "compact",
    "--max-total-tokens",
    "2000",
    "--max-tool-message-tokens",
    "500",
    "--keep-recent",
    "0",
    "--max-reload-tokens",
    "50000",
)


@pytest.fixture(scope="session")
def codex_binary():
    require(
        shutil.which("npm") is not None, "npm", "not on PATH: the Codex CLI (npm @openai/codex) cannot be installed"
    )
    return install()


def wrapped(codex_binary, tmp_path, *options: str) -> Codex:
    """Codex as `offload-proxy wrap codex OPTIONS -- exec …`, found on PATH."""
    env = wrap.environment(codex_binary.parent, base={})
    return Codex(
        codex_binary,
        home=tmp_path / "codex-home",
        workdir=tmp_path / "work",
        base_url="http://127.0.0.1:9/v1",  # the harness's own provider: not used through wrap
        prefix=[*wrap.argv("codex", *options), "--"],
        env={
            "PATH": env["PATH"],
            "PYTHONPATH": env["PYTHONPATH"],
            "CODEX_API_KEY": "sk-codex-wrap-test",
            "TMPDIR": str(tmp_path),
        },
    )


def stats(url: str, token: str) -> dict:
    request = urllib.request.Request(f"{url}/v1/offload/stats?window=1h", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10) as answer:
        return json.loads(answer.read())["totals"]


def test_codex_exec_through_wrap(codex_binary, upstream, tmp_path):
    upstream.handler = model_handler
    token = wrap.token()
    codex = wrapped(
        codex_binary, tmp_path, "--upstream", f"{upstream.url}/v1", *SETTINGS, "--admin-token", token, "--keep"
    )
    try:
        run = codex.run(f"Run seq 1 {LINES} and tell me what you saw.", "-c", "tool_output_token_limit=200000")
        # Codex finished through the proxy, offline, over the Responses WebSocket (its built-in
        # provider, as wrap points it); the reload stayed inside the proxy
        assert run.returncode == 0, run.stderr[-3000:]
        assert WEBSOCKET_FALLBACK not in run.stderr and "failed to connect to Responses WebSocket" not in run.stderr
        assert run.trapped == []
        assert [m["text"] for m in run.items("agent_message")] == [FINAL]
        assert "context_reload" not in run.stdout
        sent = [r for r in upstream.requests if is_responses_create(r)]
        assert len(sent) == 3  # the shell call, the request carrying its offloaded output, the reload round
        assert all(r.headers["authorization"] == "Bearer sk-codex-wrap-test" for r in sent)  # the user's key
        assert sent[1].json()["input"][-1]["output"].startswith("[offloaded tool result: ")

        # the exit line: the proxy's own statistics, and where the kept proxy is
        line = wrap.parse(run.stderr)
        assert (line["requests"], line["reloads"]) == ("2", "1")
        totals = stats(line["url"], token)
        assert (int(line["before"]), int(line["after"])) == (totals["tokens_before"], totals["tokens_after"])
        assert int(line["after"]) < int(line["before"])
        estimate = totals["counterfactual"]
        assert float(line["cost"]) == pytest.approx(estimate["billed_usd"] / estimate["usd"]["total"], abs=0.005)
        assert float(line["billed"]) == pytest.approx(totals["bill"]["usd"]["total"], abs=0.00005)
        assert wrap.roots(wrap.proxies_with(token)) == [int(line["pid"])]
    finally:
        pids = wrap.proxies_with(token)
        for pid in wrap.roots(pids):
            os.kill(pid, signal.SIGTERM)
        assert wrap.wait_gone(pids) == []


def test_codex_exit_status_passes_through_and_the_proxy_stops(codex_binary, upstream, tmp_path):
    async def refuse(request, rec):
        # a 400 (not retried: a 500 would be retried over the WebSocket, then again over HTTPS)
        return JSONResponse(
            {"error": {"message": "model not allowed", "type": "invalid_request_error", "code": "model_not_found"}},
            status_code=400,
        )

    upstream.handler = refuse
    token = wrap.token()
    codex = wrapped(codex_binary, tmp_path, "--upstream", f"{upstream.url}/v1", "--admin-token", token)
    # the user's own -c options come after wrap's and win: here a provider entry over HTTP, no retries
    run = codex.run("hello")
    assert WEBSOCKET_FALLBACK not in run.stderr
    assert run.returncode == 1, run.stderr[-3000:]
    assert [e["type"] for e in run.events][-1] == "turn.failed"  # Codex's own account of the 400
    assert wrap.parse(run.stderr)["requests"] == "1"
    assert wrap.proxies_with(token) == []  # stopped before the wrapper returned
