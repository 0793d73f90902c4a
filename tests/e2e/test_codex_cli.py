"""The real Codex CLI, unchanged, through the proxy (wire_api = "responses").

The fake model makes Codex run a shell command printing 5000 lines; Codex sends the output back
(`function_call_output`), the proxy offloads it and the fake model reloads it with
`context_reload`, which the proxy answers itself; then the model answers. Codex sees its own shell
call and the answer, never the reload, and its turn's usage counts every upstream round. Its
next turn (`codex exec resume --last`) sends the same history: the proxy forwards the same bytes
(same ref, same marker), so the provider's prompt cache keeps hitting. Codex runs offline: a trap behind every proxy variable proves that it reached for nothing else.

The Codex CLI is installed once with npm into .cache/npm-codex (tests/harness/codex.py); without
npm on PATH this module is skipped (CI=true: fails), and the run ends saying so.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.harness.codex import Codex, install
from tests.harness.prerequisites import require
from tests.harness.responses import REF, answer, function_call, input_items, message, reasoning, usage
from tests.harness.servers import default_handler, is_responses_create

LINES = 5000
SEQ = "\n".join(str(i) for i in range(1, LINES + 1))
SETTINGS = {
    "mode": "compact",
    "max_total_tokens": 2000,
    "max_tool_message_tokens": 500,
    "keep_recent": 0,
    "max_reload_tokens": 50_000,
}
USAGE = [
    usage(5_000, 50, cached=0, reasoning_tokens=10),
    usage(6_000, 20, cached=4_000, reasoning_tokens=5),
    usage(12_000, 15, cached=5_000, reasoning_tokens=0),
]
FINAL = f"FINAL: reloaded {LINES} numbered lines."


@pytest.fixture(scope="session")
def codex_binary():
    require(
        shutil.which("npm") is not None, "npm", "not on PATH: the Codex CLI (npm @openai/codex) cannot be installed"
    )
    return install()  # an install that fails is a failure, not a skip


@pytest.fixture(scope="module")
def codex_proxy(make_proxy):
    with make_proxy(**SETTINGS) as url:
        yield url


def codex_model(rec):
    """Run `seq 1 5000`; reload its output when it comes back offloaded; say what came back.

    On a later turn (a user message after the shell call), answer with the refs it sees.
    """
    items = input_items(rec)
    last = items[-1]
    if last.get("role") == "user" and any(i.get("type") == "function_call" for i in items):
        return answer(
            rec,
            message(f"FINAL 2: still offloaded as {REF.findall(json.dumps(items))}."),
            usage=usage(7_000, 12, cached=6_000),
        )
    if last.get("type") == "function_call_output" and last["call_id"] == "call_reload_1":
        numbered = re.findall(r"^\d+$", last["output"], re.M)
        return answer(rec, message(f"FINAL: reloaded {len(numbered)} numbered lines."), usage=USAGE[2])
    if last.get("type") == "function_call_output":
        refs = REF.findall(last["output"])
        if not refs:
            return answer(rec, message("FINAL: saw the output verbatim."), usage=USAGE[1])
        return answer(
            rec,
            reasoning("**Reloading the output**", encrypted_content="gAAAAB-codex-reload"),
            function_call("context_reload", {"ref": refs[0]}, call_id="call_reload_1"),
            usage=USAGE[1],
        )
    return answer(
        rec,
        reasoning("**Running it**", encrypted_content="gAAAAB-codex-shell"),
        function_call("exec_command", {"cmd": f"seq 1 {LINES}", "login": False}, call_id="call_shell_1"),
        usage=USAGE[0],
    )


async def model_handler(request, rec):
    return codex_model(rec) if is_responses_create(rec) else await default_handler(request, rec)


def test_codex_exec_through_the_proxy(codex_binary, codex_proxy, upstream, tmp_path):
    upstream.handler = model_handler
    codex = Codex(codex_binary, home=tmp_path / "codex-home", workdir=tmp_path / "work", base_url=f"{codex_proxy}/v1")
    run = codex.run(f"Run seq 1 {LINES} and tell me what you saw.", "-c", "tool_output_token_limit=200000")

    # Codex: finished, offline, its own shell call and the answer, never the reload
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.trapped == []
    [shell] = run.items("command_execution")
    assert f"seq 1 {LINES}" in shell["command"] and shell["exit_code"] == 0
    assert [m["text"] for m in run.items("agent_message")] == [FINAL]
    assert [r["text"] for r in run.items("reasoning")] == ["**Running it**"]  # not the reasoning that led to the reload
    assert "context_reload" not in run.stdout and "context_reload" not in run.stderr
    keys = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")
    assert {k: run.usage()[k] for k in keys} == {
        "input_tokens": 23_000,
        "cached_input_tokens": 9_000,
        "output_tokens": 85,
        "reasoning_output_tokens": 15,
    }

    # upstream: the shell's output offloaded in the request after the shell call, then reloaded
    first, second, third = upstream.responses_requests()
    sent = first.json()
    assert (sent["stream"], sent["store"], sent["include"]) == (True, False, ["reasoning.encrypted_content"])
    codex_tools = sent["tools"]
    assert "exec_command" in [t.get("name") for t in codex_tools]  # the shell tool this test scripts
    assert second.json()["tools"][: len(codex_tools)] == codex_tools
    assert [t.get("name") for t in second.json()["tools"][len(codex_tools) :]] == ["context_reload", "context_search"]
    [output] = [
        i for i in input_items(second) if i.get("call_id") == "call_shell_1" and i["type"] == "function_call_output"
    ]
    assert output["output"].startswith("[offloaded tool result: ") and len(output["output"]) < 2_000
    assert f"\n{LINES - 1}\n{LINES}" not in second.body.decode()
    [ref] = REF.findall(output["output"])
    replayed = [i for i in input_items(second) if i.get("type") == "reasoning"]
    assert [r["encrypted_content"] for r in replayed] == ["gAAAAB-codex-shell"]  # Codex's own replay
    added = input_items(third)[len(input_items(second)) :]
    assert [i.get("type") for i in added] == ["reasoning", "function_call", "function_call_output"]
    assert (added[1]["name"], json.loads(added[1]["arguments"])) == ("context_reload", {"ref": ref})
    assert SEQ in added[2]["output"]

    # the next turn: Codex resends its history, the proxy forwards the same prefix, byte for byte
    turn2 = codex.resume("What was the last number?", "-c", "tool_output_token_limit=200000")
    assert turn2.returncode == 0, turn2.stderr[-3000:]
    assert turn2.trapped == [] and turn2.items("command_execution") == []
    assert [m["text"] for m in turn2.items("agent_message")] == [f"FINAL 2: still offloaded as {[ref]}."]
    [fourth] = upstream.responses_requests()[3:]
    prefix = input_items(second)
    assert input_items(fourth)[: len(prefix)] == prefix
    assert [(i.get("type"), i.get("role")) for i in input_items(fourth)[len(prefix) :]] == [
        ("message", "assistant"),
        ("message", "user"),
    ]
