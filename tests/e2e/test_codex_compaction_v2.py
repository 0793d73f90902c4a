"""The real Codex CLI compacting remotely ("compaction v2") through the proxy while it emulates.

Codex 0.171 with a provider it takes for OpenAI's compacts remotely, both ways people set it up
(docs/websocket.md): its built-in provider with only `openai_base_url` changed, which speaks the
Responses WebSocket mode (the compaction request a `response.create` on it, no fallback to
HTTPS), and a provider of its own named "OpenAI" (`tests.harness.codex.OPENAI_NAME`, HTTP/SSE,
`supports_websockets = false`). Once the usage it is told
crosses `model_auto_compact_token_limit`, mid-turn, it streams a normal `POST /responses` whose
input is its history followed by `{"type": "compaction_trigger"}`, requires exactly one
`compaction` output item back, then goes on with its user and developer messages followed by
that item. The fake upstream knows nothing of compaction, so the proxy emulates it
(`--context-management auto`, a loopback upstream): it summarises the history itself and
answers the item holding its token; the next requests carry the item back and the proxy
expands it into what it stands for, so the upstream sees the summary (its `ref=` reloadable)
and never the trigger, the item or the token.

The fake model runs six shell steps (`seq`, 400 lines each), reports usage above Codex's limit
after step 3 (Codex compacts once), finishes the steps from what the summary says, reloads the
summarised originals through the proxy and answers; then `codex exec resume` asks one more
turn of the same session, which carries the compaction item again.
"""

from __future__ import annotations

import json
import logging
import re

import httpx2
import pytest

from proxy.core.compaction import ANY_VERSION
from proxy.core.texts import refs_in
from tests.e2e.test_codex_cli import codex_binary  # noqa: F401  (the session fixture installing Codex)
from tests.e2e.test_codex_websocket import on_the_websocket
from tests.harness.codex import OPENAI_NAME, WEBSOCKET_FALLBACK, Codex
from tests.harness.responses import answer, function_call, input_items, message, usage
from tests.harness.servers import default_handler, is_responses_create, is_summary_call, snapshot_answer

STEPS = 6
LINES = 400
COMPACT_AT = 3  # the response calling this step reports usage above Codex's limit
CODEX_LIMIT = 6_000
API_KEY = "sk-codex-test"  # what tests/harness/codex.py gives Codex
TRIGGER = {"type": "compaction_trigger"}
SETTINGS = {"max_tool_message_tokens": 300}  # the proxy offloads each step's output too


def done_steps(items: list[dict]) -> int:
    """The newest step the history shows: a step's call, or a summary saying how far it got."""
    blob = json.dumps(items)
    return max(
        [int(k) for k in re.findall(r"steps-done=(\d+)", blob)]
        + [int(k) for k in re.findall(r"call_step_(\d+)", blob)],
        default=0,
    )


def step_command(k: int) -> str:
    return f"seq {k * 100_000} {k * 100_000 + LINES - 1}"


def text_of(item: dict) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or () if isinstance(p, dict))


class Model:
    """The fake model: six steps, a reload of the summarised originals, the answer."""

    def __init__(self) -> None:
        self.reloaded: str | None = None  # what the reload returned

    def __call__(self, rec):
        items = input_items(rec)
        last = items[-1]
        if last.get("type") == "function_call_output" and last["call_id"] == "call_reload":
            self.reloaded = last["output"]
            return answer(rec, message(f"FINAL: {STEPS} steps."), usage=usage(2_000, 20))
        if last.get("role") == "user" and "one more thing" in text_of(last):
            return answer(rec, message(f"STILL HERE: steps-done={done_steps(items)}."), usage=usage(2_000, 20))
        done = done_steps(items)
        if done >= STEPS:  # every step run: reload what the summary folded
            [ref] = {
                r
                for i in items
                if i.get("type") == "message" and "steps-done=" in text_of(i)
                for r in refs_in(text_of(i))
            }
            return answer(
                rec, function_call("context_reload", {"ref": ref}, call_id="call_reload"), usage=usage(2_000, 20)
            )
        k = done + 1
        return answer(
            rec,
            function_call("exec_command", {"cmd": step_command(k), "login": False}, call_id=f"call_step_{k}"),
            usage=usage(CODEX_LIMIT + 1_000 if k == COMPACT_AT else 1_000, 20),
        )


def events(proxy: str) -> list[dict]:
    got = httpx2.get(f"{proxy}/v1/offload/events", headers={"authorization": f"Bearer {API_KEY}"}, timeout=20)
    assert got.status_code == 200, got.text
    return got.json()["data"]


def access_lines(caplog) -> list[dict]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "proxy.access"]


@pytest.mark.parametrize("transport", ["websocket", "http"])
def test_codex_compacts_remotely_through_the_emulation_and_goes_on(
    codex_binary,
    make_proxy,
    upstream,  # noqa: F811
    tmp_path,
    caplog,
    transport,
):
    websocket = transport == "websocket"
    caplog.set_level(logging.INFO, logger="proxy.access")
    model = Model()
    summaries: list = []

    async def handler(request, rec):
        if is_summary_call(rec):  # the proxy's own summary (the compaction's): how far the history got
            summaries.append(rec)
            return snapshot_answer(rec, f"<state_snapshot>steps-done={done_steps(input_items(rec))}</state_snapshot>")
        if is_responses_create(rec):
            return model(rec)
        return await default_handler(request, rec)

    upstream.handler = handler
    with make_proxy(**SETTINGS) as proxy:
        # the built-in provider (base URL only: the WebSocket mode), or one named "OpenAI" over HTTP
        codex = Codex(
            codex_binary,
            home=tmp_path / "codex-home",
            workdir=tmp_path / "work",
            base_url=f"{proxy}/v1",
            provider_name=OPENAI_NAME,
            builtin=websocket,
        )
        run = codex.run(
            f"Run the {STEPS} steps.",
            "-c",
            "tool_output_token_limit=200000",
            "-c",
            f"model_auto_compact_token_limit={CODEX_LIMIT}",
            timeout=90,
        )

        # Codex finished, offline, every step run once, with the model's answer, no error on the way
        assert run.returncode == 0, run.stderr[-3000:]
        assert run.trapped == []
        assert not [e for e in run.events if e.get("type") == "error"], run.stdout[-3000:]
        assert "compaction" not in run.stderr.lower(), run.stderr[-3000:]
        if websocket:
            on_the_websocket(run)
        assert WEBSOCKET_FALLBACK not in run.stdout + run.stderr
        shells = run.items("command_execution")
        assert [s["exit_code"] for s in shells] == [0] * STEPS
        assert [step_command(k) in s["command"] for k, s in enumerate(shells, 1)] == [True] * STEPS
        assert [m["text"] for m in run.items("agent_message")] == [f"FINAL: {STEPS} steps."]

        # Codex compacted once, remotely: its trigger reached the proxy, which answered it without
        # asking the upstream a turn; the upstream never saw a trigger, a compaction item or a token
        requests = upstream.responses_requests()
        for rec in upstream.requests:
            assert b"compaction_trigger" not in rec.body and ANY_VERSION.encode() not in rec.body
            assert b'"compaction"' not in rec.body.replace(b" ", b"")
        [summary] = summaries  # the compaction's one summary: of steps 1-3
        assert done_steps(input_items(summary)) == COMPACT_AT
        assert not [r for r in upstream.requests if r.path.endswith("/responses/compact")]

        # after it every request holds the summary in the compaction item's place, and the steps
        # before it are gone (Codex dropped them; the record holds the summary instead)
        after = [r for r in requests if f"steps-done={COMPACT_AT}" in json.dumps(input_items(r))]
        assert len(after) >= STEPS - COMPACT_AT + 1
        assert requests[-len(after) :] == after  # every request from the compaction on
        for rec in after:
            items = input_items(rec)
            calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
            assert not [c for c in calls if c in {f"call_step_{k}" for k in range(1, COMPACT_AT + 1)}], calls
            assert sum(f"Run the {STEPS} steps." in text_of(i) for i in items if i.get("role") == "user") == 1

        # the summary's originals are the proxy's to reload: steps 1-3's outputs, byte for byte
        assert model.reloaded is not None
        for k in range(1, COMPACT_AT + 1):
            assert "\\n".join(str(k * 100_000 + n) for n in range(LINES)) in model.reloaded, k
        compactions = [e for e in events(proxy) if e.get("type") == "provider_compaction"]
        assert [(e["emulated"], e["endpoint"]) for e in compactions] == [(True, "responses")]
        # every turn came the way Codex was set up, the compaction's among them
        lines = [line for line in access_lines(caplog) if line["route"] == "responses"]
        [compacting] = [line for line in lines if line.get("action") == "emulated-compaction"]
        # one line a turn: each upstream request but the hidden reload round's, and the compaction's (none)
        assert len(lines) == len(requests) - 1 + 1
        assert {line.get("transport") for line in lines} == {"websocket" if websocket else None}
        assert compacting["status"] == 200

        # the session goes on: the next turn carries the compaction item back, expanded again
        more = codex.resume(
            "And one more thing: how far did you get?",
            "-c",
            f"model_auto_compact_token_limit={CODEX_LIMIT}",
            timeout=90,
        )
        assert more.returncode == 0, more.stderr[-3000:]
        if websocket:
            on_the_websocket(more)
        assert [m["text"] for m in more.items("agent_message")] == [f"STILL HERE: steps-done={STEPS}."]
        last = upstream.responses_requests()[-1]
        assert f"steps-done={COMPACT_AT}".encode() in last.body and b"compaction" not in last.body
        assert len(summaries) == 1  # no second compaction
