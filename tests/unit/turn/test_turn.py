"""The turn (`proxy.turn`) driven with plain values, no Starlette request: its steps in order,
its flags, and what it leaves in the store."""

from __future__ import annotations

import dataclasses
import json

import pytest

from proxy.core.settings import OffloadSettings
from proxy.core.texts import INJECTED_TOOLS
from proxy.formats.chat import CHAT
from proxy.formats.messages import MESSAGES
from proxy.formats.responses import RESPONSES
from proxy.http.error_map import status_of
from proxy.offload import records as response_chains
from proxy.offload.records import TenantStore
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore
from proxy.turn import TurnInput, run_turn
from tests.harness.history import REF, agent_history

pytestmark = pytest.mark.anyio
SETTINGS = OffloadSettings(mode="compact", max_total_tokens=2000, max_tool_message_tokens=500)


def no_summariser(body, settings, refs, *, background):
    return None


@pytest.fixture
def tenant(tmp_path) -> TenantStore:
    return TenantStore(SQLiteStore(tmp_path), "ns-turn", 3600, Sealer(None))


def given(fmt, body: dict, tenant: TenantStore, **kwargs) -> TurnInput:
    raw = json.dumps(body).encode()
    return TurnInput(
        fmt,
        raw,
        body,
        fmt.history(body),
        kwargs.pop("settings", SETTINGS),
        tenant,
        kwargs.pop("compressor", no_summariser),
        **kwargs,
    )


async def test_a_small_request_goes_as_sent(tenant):
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    turn = await run_turn(given(CHAT, body, tenant))
    assert turn.items == body["messages"] and turn.prepared.action == "none"
    assert not turn.changed and not turn.inject_reload_tools and turn.answers_as_is
    assert (b"x-offload-action", b"none") in turn.extra_headers


async def test_a_large_tool_result_is_stored_and_the_reload_tools_offered(tenant):
    body = {"model": "gpt-4o", "messages": agent_history(steps=4, lines=300)}
    turn = await run_turn(given(CHAT, body, tenant))
    assert turn.prepared.action == "compact" and turn.changed and turn.inject_reload_tools
    refs = {r for item in turn.items for r in REF.findall(json.dumps(item))}
    assert refs and refs == set(turn.prepared.plan.refs)
    for ref in refs:  # every reference the turn forwards resolves in the tenant's store
        assert await tenant.refs().load(ref) is not None
    offered = turn.rounds.request(True)
    assert {t["function"]["name"] for t in offered["tools"]} >= set(INJECTED_TOOLS)
    assert not turn.answers_as_is


async def test_the_turn_reports_its_figures_as_plain_values(tenant):
    """What the HTTP layer writes on the request's record comes from the turn, not the record."""
    body = {"model": "gpt-4o", "stream": True, "messages": agent_history(steps=4, lines=300)}
    turn = await run_turn(given(CHAT, body, tenant))
    report = turn.report()
    plan = turn.prepared.plan
    assert (report.model, report.stream, report.action) == ("gpt-4o", True, "compact")
    assert (report.tokens_before, report.tokens_after) == (plan.tokens_before, plan.tokens_after)
    assert report.refs == len(plan.refs) and report.refs_created == len(turn.prepared.written) > 0
    assert report.offloaded_bytes > 0 and report.session is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.action = "none"  # type: ignore[misc]


async def test_the_clients_own_reload_tool_turns_offloading_off(tenant):
    tool = {"type": "function", "function": {"name": "context_reload", "parameters": {"type": "object"}}}
    body = {"model": "gpt-4o", "messages": agent_history(steps=4, lines=300), "tools": [tool]}
    turn = await run_turn(given(CHAT, body, tenant))
    assert turn.settings.mode == "off" and not turn.inject_reload_tools and turn.prepared.action == "none"
    assert any("context_reload" in w for w in turn.warnings)


async def test_a_stored_chain_is_continued_with_the_hidden_answers_first(tenant):
    carried = [{"type": "function_call_output", "call_id": "c1", "output": "hidden answer"}]
    await tenant.remember_chain("resp_1", response_chains.Continuation("resp_2", carried))
    body = {"model": "gpt-4o", "previous_response_id": "resp_1", "input": "next"}
    turn = await run_turn(given(RESPONSES, body, tenant))
    assert turn.body["previous_response_id"] == "resp_2" and turn.continued and turn.changed
    assert turn.items[0] == carried[0] and turn.items[1:] == RESPONSES.history(body)


async def test_emulated_clearing_edits_are_applied_stored_and_shown(tenant):
    log = "\n".join(f"line {i}: all good here, nothing to see, value {i * 3}" for i in range(200))
    messages: list[dict] = [{"role": "user", "content": "go"}]
    for i in range(3):
        messages.append(
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "bash", "input": {}}]}
        )
        messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": log}]})
    edits = {
        "edits": [
            {
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "tool_uses", "value": 1},
                "keep": {"type": "tool_uses", "value": 1},
            }
        ]
    }
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": messages, "context_management": edits}
    turn = await run_turn(given(MESSAGES, body, tenant, emulating=True, settings=OffloadSettings(mode="off")))
    assert "context_management" not in turn.body and turn.changed
    assert [a["type"] for a in turn.edits.applied] == ["clear_tool_uses_20250919"]
    assert turn.rounds.context_management == {"applied_edits": turn.edits.applied}
    assert "context-edits" in turn.prepared.action and not turn.answers_as_is
    assert any(e["type"] == "context_edit" for e in turn.events)
    relayed = await run_turn(given(MESSAGES, body, tenant, emulating=False, settings=OffloadSettings(mode="off")))
    assert relayed.body["context_management"] == edits and relayed.edits.applied is None


async def test_the_turn_input_is_not_changed(tenant):
    body = {"model": "gpt-4o", "messages": agent_history(steps=4, lines=300)}
    before = json.dumps(body)
    await run_turn(given(CHAT, body, tenant))
    assert json.dumps(body) == before


class Summarising:
    """A summariser whose fold keeps the task and puts one summary item after it."""

    def __init__(self) -> None:
        self.folded: list[list] = []

    async def fold(self, compacted, originals, settings, counter, *, keep_recent, cpu):
        from proxy.core.compaction import Offload
        from proxy.core.texts import history_marker
        from proxy.offload.summarizer import Compressed

        self.folded.append(list(compacted))
        summary = RESPONSES.view.summary_item(history_marker("sumref12345678", len(compacted) - 1, 99) + "\nsummary")
        return Compressed(
            [compacted[0], summary],
            Offload("sumref12345678", "history", "the originals\n", 99),
            summary_at=1,
            usage_in=120,
            usage_out=30,
        )


CODEX_HISTORY = [
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix the bug"}]},
    {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "log " * 300},
]
TRIGGER = {"type": "compaction_trigger"}


async def test_an_emulated_compaction_trigger_is_compacted_and_answers_alone(tenant):
    folder = Summarising()
    body = {"model": "gpt-5-codex", "input": [*CODEX_HISTORY, TRIGGER], "stream": True, "store": False}
    turn = await run_turn(given(RESPONSES, body, tenant, emulating=True, compressor=lambda *a, **k: folder))
    assert folder.folded == [CODEX_HISTORY]  # the history before the trigger
    assert turn.inline.paused and turn.items == [] and not turn.inject_reload_tools and not turn.answers_as_is
    [item] = turn.inline.lead
    assert item["type"] == "compaction" and (turn.inline.tokens_in, turn.inline.tokens_out) == (120, 30)
    assert (b"x-offload-action", b"emulated-compaction") in turn.extra_headers
    answer = RESPONSES.compaction_emulation.paused_answer(
        turn.inline.lead, body=turn.body, created_at=1, tokens_in=120, tokens_out=30
    )
    assert answer["output"] == [item] and answer["usage"]["total_tokens"] == 150

    # the next request carries the item back after the user messages Codex keeps: it is expanded
    later = {"model": "gpt-5-codex", "input": [CODEX_HISTORY[0], item, {"role": "user", "content": "go on"}]}
    nxt = await run_turn(given(RESPONSES, later, tenant, emulating=True))
    assert not nxt.inline.paused and nxt.changed
    assert nxt.items[0] == CODEX_HISTORY[0] and "ref=sumref12345678" in json.dumps(nxt.items[1])
    assert nxt.items[2:] == [{"role": "user", "content": "go on"}] and "compaction" not in json.dumps(nxt.items)


async def test_a_compaction_trigger_is_relayed_as_sent_when_the_upstream_compacts_natively(tenant):
    body = {"model": "gpt-5-codex", "input": [*CODEX_HISTORY, TRIGGER], "stream": True}
    turn = await run_turn(given(RESPONSES, body, tenant, emulating=False))
    assert not turn.inline.paused and turn.items[-1] == TRIGGER and not turn.inject_reload_tools
    misplaced = {"model": "gpt-5-codex", "input": [TRIGGER, *CODEX_HISTORY]}  # the provider's to refuse
    assert (await run_turn(given(RESPONSES, misplaced, tenant, emulating=False))).items[0] == TRIGGER


async def test_a_misplaced_emulated_trigger_is_refused_before_anything_is_stored(tenant):
    from proxy.errors import ProxyError

    body = {"model": "gpt-5-codex", "input": [*CODEX_HISTORY, TRIGGER, {"role": "user", "content": "x"}]}
    with pytest.raises(ProxyError) as err:
        await run_turn(given(RESPONSES, body, tenant, emulating=True))
    assert (status_of(err.value), err.value.param) == (400, "input[3]")


CLIENT_COMPACTION = "Your task is to create a detailed summary of the conversation so far, paying close attention to…"


async def test_a_clients_own_compaction_gets_the_originals_that_fit_the_window(tenant):
    history = agent_history(steps=4, lines=300)
    body = {"model": "gpt-4o", "messages": [*history, {"role": "user", "content": CLIENT_COMPACTION}]}
    turn = await run_turn(given(CHAT, body, tenant))
    assert turn.prepared.action == "none" and turn.items == body["messages"]  # the originals, not previews
    assert (b"x-offload-client-compaction", b"claude-code") in turn.extra_headers
    assert turn.settings.max_total_tokens == int(128_000 * 0.8)
    plain = await run_turn(
        given(CHAT, {"model": "gpt-4o", "messages": [*history, {"role": "user", "content": "go on"}]}, tenant)
    )
    assert plain.prepared.action == "compact"  # the same history otherwise
    assert not any(name == b"x-offload-client-compaction" for name, _ in plain.extra_headers)


async def test_a_clients_own_compaction_past_the_window_is_reduced_to_fit(tenant):
    history = agent_history(steps=8, lines=2500)  # ~ 8 x 30,000 tokens: past gpt-4o's window
    body = {
        "model": "gpt-4o",
        "max_tokens": 4000,
        "messages": [*history, {"role": "user", "content": CLIENT_COMPACTION}],
    }
    turn = await run_turn(given(CHAT, body, tenant))
    budget = int(128_000 * 0.8)
    assert turn.prepared.plan.tokens_before > budget >= turn.prepared.plan.tokens_after
    assert turn.prepared.action == "compact" and turn.items[-1] == body["messages"][-1]
