"""The replay runner in the two wire formats: requests per turn, the view, the pipeline's output."""

from __future__ import annotations

import pytest

from proxy.core.settings import OffloadSettings
from proxy.core.texts import history_ref
from proxy.formats import chat
from proxy.formats.messages import MESSAGES
from proxy.formats.responses import ResponsesView, items_from_chat
from proxy.replay import _bill as bill
from proxy.replay._bill import parse
from proxy.replay._runner import Replayer, budget, replay_namespace, requests_of, turns_of, upstream_for, view_for
from proxy.store.sqlite import SQLiteStore
from tests.harness.history import agent_history

pytestmark = pytest.mark.anyio


def conversation(steps: int = 8) -> dict:
    messages = agent_history(steps=steps, lines=120)
    for i in range(steps):  # assistant text before a call, as most traces have it
        messages[2 + 2 * i]["content"] = f"Looking at f{i}. " + "thinking " * 40
    messages.append({"role": "assistant", "content": "done"})
    return {"id": "c", "messages": messages, "tools": [{"type": "function", "function": {"name": "bash"}}]}


def test_views_by_format():
    assert view_for("chat") is chat.VIEW
    assert isinstance(view_for("responses"), ResponsesView)
    assert view_for("anthropic") is MESSAGES.view
    with pytest.raises(ValueError, match="unknown format 'gemini'"):
        view_for("gemini")


def test_requests_are_the_same_turns_in_both_formats():
    conv = conversation()
    chat_requests, chat_tools = requests_of(conv, "chat")
    items, tools = requests_of(conv, "responses")
    assert chat_requests == turns_of(conv["messages"]) and chat_tools is conv["tools"]
    assert tools == [{"type": "function", "name": "bash"}]
    assert len(items) == len(chat_requests)
    for request, converted in zip(chat_requests, items):
        assert converted == items_from_chat(request)
    for earlier, later in zip(items, items[1:]):  # each turn extends the previous one, sharing its items
        assert all(a is b for a, b in zip(earlier, later)) and len(later) > len(earlier)


async def test_a_responses_turn_is_compacted_and_compressed_in_the_responses_shape(tmp_path):
    conv = conversation()
    store, upstream = SQLiteStore(tmp_path), upstream_for(None)
    try:
        replayer = Replayer(
            store,
            OffloadSettings(max_total_tokens=1500, max_tool_message_tokens=300),
            upstream,
            headers=[],
            model="gpt-4o",
            format="responses",
        )
        request = requests_of(conv, "responses")[0][-1]
        counter = replayer.json_counter
        prepared = (await replayer._turn(request, replay_namespace(0, "c"))).prepared
    finally:
        await upstream.aclose()
        await store.close()
    sent = prepared.plan.items
    assert prepared.action == "compact+compress"
    assert all(isinstance(item, dict) and item.get("type") for item in sent)  # no chat message slipped in
    summaries = [item for item in sent if history_ref(replayer.view.text(item) or "")]
    assert summaries == [replayer.view.summary_item(replayer.view.text(summaries[0]))]
    assert counter.messages(sent) <= budget(
        sent, requests_of(conv, "responses")[1], replayer.settings, counter=counter, view=replayer.view
    )


@pytest.mark.parametrize("cuts", [True, False])
async def test_with_a_clock_each_turn_is_cut_knowing_when_the_session_last_sent(tmp_path, monkeypatch, cuts):
    seen: list = []
    real = Replayer._turn

    async def turn(self, request, namespace, tools=None, **kwargs):
        seen.append(kwargs.get("cuts"))
        return await real(self, request, namespace, tools, **kwargs)

    monkeypatch.setattr(Replayer, "_turn", turn)
    store, upstream = SQLiteStore(tmp_path), upstream_for(None)
    try:
        replayer = Replayer(
            store,
            OffloadSettings(),
            upstream,
            headers=[],
            model="claude-sonnet-4-5",
            format="anthropic",
            pricing="anthropic",
            gaps=parse("400s"),
            cache_cuts=cuts,
        )
        out = await replayer.conversation(conversation(steps=4))
    finally:
        await upstream.aclose()
        await store.close()
    cold = seen[: out.turns]  # the steady pass afterwards runs without a clock
    if not cuts:
        assert cold == [None] * out.turns
    else:
        assert cold[0].sent is None and not cold[0].cold  # the first turn: nothing sent yet
        assert [c.now for c in cold] == [400.0 * k for k in range(out.turns)]
        assert all(c.cold and c.sent.turns == k and c.sent.at == 400.0 * (k - 1) for k, c in enumerate(cold) if k)
    assert seen[out.turns :] == [None] * out.turns
    assert out.bill is not None and set(out.bill["keepalive_sweep"]) == {str(m) for m in bill.KEEPALIVE_SWEEP}
