"""The real Codex CLI as people run it: its built-in OpenAI provider with only `openai_base_url`
pointed at the proxy. Codex then speaks the Responses WebSocket mode first (`ws://…/v1/responses`,
`OpenAI-Beta: responses_websockets=…`, later requests of a turn as `previous_response_id` plus the
new items): it must connect and stay on it (no WebSocket error, no fallback to HTTPS), and its
task must go as it goes over HTTP (tests/e2e/test_codex_cli.py): the shell's 5000 lines offloaded,
reloaded in a round Codex never sees, the next turn's history offloaded the same way.
"""

from __future__ import annotations

import pytest

from tests.e2e.test_codex_cli import FINAL, LINES, SEQ, codex_binary, model_handler  # noqa: F401 (fixture)
from tests.harness.codex import WEBSOCKET_FALLBACK, Codex
from tests.harness.responses import REF, input_items

SETTINGS = {
    "mode": "compact",
    "max_total_tokens": 2000,
    "max_tool_message_tokens": 500,
    "keep_recent": 0,
    "max_reload_tokens": 50_000,
}


@pytest.fixture(scope="module")
def codex_proxy(make_proxy):
    with make_proxy(**SETTINGS) as url:
        yield url


def on_the_websocket(run) -> None:
    logs = run.stdout + run.stderr
    assert "successfully connected to Responses WebSocket" in run.stderr, run.stderr[-3000:]
    assert WEBSOCKET_FALLBACK not in logs
    assert "failed to connect to Responses WebSocket" not in logs
    # errors of the transport (a retried stream, a fallback); the model-metadata notice of a fake model stays
    notices = [i["message"] for i in run.items("error")] + [
        e.get("message", "") for e in run.events if e.get("type") == "error"
    ]
    assert [n for n in notices if "WebSocket" in n or "Reconnecting" in n or "stream" in n] == []


def test_codex_with_only_its_base_url_changed_runs_over_the_websocket(
    codex_binary,
    codex_proxy,
    upstream,  # noqa: F811
    tmp_path,
):
    upstream.handler = model_handler
    codex = Codex(
        codex_binary,
        home=tmp_path / "codex-home",
        workdir=tmp_path / "work",
        base_url=f"{codex_proxy}/v1",
        builtin=True,
    )
    run = codex.run(f"Run seq 1 {LINES} and tell me what you saw.", "-c", "tool_output_token_limit=200000", timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    on_the_websocket(run)
    assert run.trapped == []
    [shell] = run.items("command_execution")
    assert f"seq 1 {LINES}" in shell["command"] and shell["exit_code"] == 0
    assert [m["text"] for m in run.items("agent_message")] == [FINAL]
    assert "context_reload" not in run.stdout and "context_reload" not in run.stderr

    # upstream (over HTTP/SSE): the whole history each time, the output offloaded, then reloaded
    first, second, third = upstream.responses_requests()
    assert all("previous_response_id" not in r.json() for r in (first, second, third))
    assert second.json()["stream"] is True and second.json()["store"] is False
    assert input_items(second)[: len(input_items(first))] == input_items(first)
    [output] = [i for i in input_items(second) if i.get("type") == "function_call_output"]
    assert output["output"].startswith("[offloaded tool result: ") and SEQ not in second.body.decode()
    [ref] = REF.findall(output["output"])
    assert SEQ in input_items(third)[-1]["output"]

    # the next turn (a new process, a new connection, Codex's full input): offloaded the same way.
    # Codex writes its own copies of the earlier outputs with fields of its own (`content: null`, its
    # turn metadata), so past the first request's items the bytes differ from the ones the proxy
    # held: one prompt-cache miss per new connection (docs/websocket.md)
    turn2 = codex.resume("What was the last number?", "-c", "tool_output_token_limit=200000", timeout=180)
    assert turn2.returncode == 0, turn2.stderr[-3000:]
    on_the_websocket(turn2)
    assert [m["text"] for m in turn2.items("agent_message")] == [f"FINAL 2: still offloaded as {[ref]}."]
    [fourth] = upstream.responses_requests()[3:]
    assert input_items(fourth)[: len(input_items(first))] == input_items(first)
    [again] = [i for i in input_items(fourth) if i.get("type") == "function_call_output"]
    assert again == output
