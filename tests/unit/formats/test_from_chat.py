"""Chat messages as the Responses input items a client would send (replay --format responses)."""

from __future__ import annotations

import copy

from proxy.core.texts import INJECTED_TOOLS
from proxy.formats.responses._from_chat import items_from_chat, items_with_offsets, tools_from_chat
from proxy.formats.responses._items import ResponsesView

VIEW = ResponsesView(INJECTED_TOOLS)

HISTORY = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the bug."},
    {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "pwd"}'}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "a.py\nb.py"},
    {"role": "tool", "tool_call_id": "call_2", "content": "/repo"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_3", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "cat a.py"}'}}
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_3",
        "content": [{"type": "text", "text": "x = 1"}, {"type": "text", "text": "y = 2"}],
    },
    {"role": "assistant", "content": "Done."},
]


def test_each_message_becomes_the_items_a_responses_client_sends():
    assert items_from_chat(HISTORY) == [
        {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "You are a coding agent."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the bug."}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
        {"type": "function_call", "call_id": "call_1", "name": "bash", "arguments": '{"cmd": "ls"}'},
        {"type": "function_call", "call_id": "call_2", "name": "bash", "arguments": '{"cmd": "pwd"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "a.py\nb.py"},
        {"type": "function_call_output", "call_id": "call_2", "output": "/repo"},
        {"type": "function_call", "call_id": "call_3", "name": "bash", "arguments": '{"cmd": "cat a.py"}'},
        {"type": "function_call_output", "call_id": "call_3", "output": "x = 1\ny = 2"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]},
    ]


def test_the_view_sees_the_same_conversation():
    items = items_from_chat(HISTORY)
    assert [VIEW.role(i) for i in items] == [
        "system",
        "user",
        "assistant",
        "assistant",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert [c for i in items for c in VIEW.calls(i)] == ["call_1", "call_2", "call_3"]
    assert [VIEW.answers(i) for i in items if VIEW.role(i) == "tool"] == ["call_1", "call_2", "call_3"]
    assert VIEW.tool_text(items[5]) == "a.py\nb.py"


def test_deterministic_and_prefixes_give_prefixes():
    original = copy.deepcopy(HISTORY)
    items, offsets = items_with_offsets(HISTORY)
    assert items == items_from_chat(HISTORY) == items_from_chat(copy.deepcopy(HISTORY))
    assert HISTORY == original  # the messages are not changed
    assert len(offsets) == len(HISTORY) + 1
    for k in range(len(HISTORY) + 1):
        assert items_from_chat(HISTORY[:k]) == items[: offsets[k]]


def test_parts_refusals_custom_calls_and_other_shapes():
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA", "detail": "low"}}
    user = {"role": "user", "name": "ann", "content": [{"type": "text", "text": "see"}, image]}
    assert items_from_chat([user]) == [
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "see"},
                {"type": "input_image", "image_url": "data:image/png;base64,AA", "detail": "low"},
            ],
        }
    ]
    developer = {"role": "developer", "content": "rules"}
    assert items_from_chat([developer])[0]["role"] == "developer"
    refusal = {"role": "assistant", "content": None, "refusal": "I can't."}
    assert items_from_chat([refusal]) == [
        {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]}
    ]
    empty = {"role": "assistant", "content": ""}  # no calls: the (empty) message stays
    assert items_from_chat([empty]) == [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": ""}]}
    ]
    custom = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin Patch"}}],
    }
    assert items_from_chat([custom]) == [
        {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin Patch"}
    ]
    tool_image = {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "shot"}, image]}
    assert items_from_chat([tool_image])[0]["output"] == [
        {"type": "input_text", "text": "shot"},
        {"type": "input_image", "image_url": "data:image/png;base64,AA", "detail": "low"},
    ]
    legacy = {"role": "function", "name": "f", "content": "1"}
    assert items_from_chat([legacy, "odd"]) == [legacy, "odd"]


def test_tools_become_flat_function_tools():
    chat_tools = [
        {"type": "function", "function": {"name": "bash", "description": "run", "parameters": {"type": "object"}}},
        {"type": "web_search"},
    ]
    assert tools_from_chat(chat_tools) == [
        {"type": "function", "name": "bash", "description": "run", "parameters": {"type": "object"}},
        {"type": "web_search"},
    ]
    assert tools_from_chat(None) is None
