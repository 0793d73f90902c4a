"""The demo's bundled conversation: the shipped file is what proxy/demo/conversation.py writes,
and it is the agent conversation the demo promises (tool calls answered, large results, long)."""

from __future__ import annotations

import json

from proxy.demo._run import CONVERSATION
from proxy.demo.conversation import conversation
from proxy.replay._runner import load_conversations, turns_of


def test_the_shipped_file_is_the_generators_output():
    assert json.loads(CONVERSATION.read_text()) == conversation()
    assert CONVERSATION.read_text().count("\n") == 1  # one JSONL line


def test_it_is_a_few_hundred_kb_with_large_tool_results_and_a_long_history():
    size = CONVERSATION.stat().st_size
    assert 150_000 < size < 500_000
    conv = load_conversations(CONVERSATION)[0]
    results = [m["content"] for m in conv["messages"] if m["role"] == "tool"]
    assert sum(len(r) > 8_000 * 1.2 for r in results) >= 8  # above 2,000 tokens: compacted
    assert len(turns_of(conv["messages"])) >= 30


def test_every_call_is_answered_in_order():
    messages = conversation()["messages"]
    for k, message in enumerate(messages):
        for call in message.get("tool_calls") or ():
            assert messages[k + 1] == {**messages[k + 1], "role": "tool", "tool_call_id": call["id"]}
            assert set(json.loads(call["function"]["arguments"])) <= {"command", "path", "old", "new"}
