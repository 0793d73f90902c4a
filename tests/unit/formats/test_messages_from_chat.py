"""Chat traces as the Anthropic Messages requests a client would send (replay --format anthropic),
and Anthropic messages back as chat messages."""

from __future__ import annotations

import copy
import json

from proxy.core import jsonio
from proxy.formats.chat._items import VIEW as CHAT_VIEW
from proxy.formats.messages import MESSAGES
from proxy.formats.messages._from_chat import (
    body_from_chat,
    chat_from_answer,
    chat_from_items,
    chat_from_message,
    items_from_chat,
    items_with_offsets,
    message_answer,
    messages_from_chat,
    system_from_chat,
    tools_from_chat,
)
from proxy.formats.messages._items import PART
from proxy.formats.messages._request import history, with_history

VIEW = MESSAGES.view

HISTORY = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
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
            {"id": "call_3", "type": "function", "function": {"name": "bash", "arguments": "cat a.py"}},
            {"id": "call_4", "type": "function", "function": {"name": "noop", "arguments": ""}},
            {"id": "call_5", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin Patch"}},
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_3",
        "content": [{"type": "text", "text": "x = 1"}, {"type": "text", "text": "y = 2"}],
    },
    {"role": "tool", "tool_call_id": "call_4", "content": ""},
    {"role": "tool", "tool_call_id": "call_5", "content": "Done."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Look:"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            {"type": "image_url", "image_url": {"url": "https://example.org/a.png"}},
        ],
    },
    {"role": "system", "content": "Mid-conversation note."},
    {"role": "assistant", "content": "Done.", "refusal": None},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
    },
    {"type": "custom", "custom": {"name": "apply_patch"}},
]


def test_each_turn_becomes_what_an_anthropic_client_sends():
    assert system_from_chat(HISTORY) == "You are a coding agent.\n\nBe brief."
    assert messages_from_chat(HISTORY) == [
        {"role": "user", "content": "Fix the bug."},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "call_1", "name": "bash", "input": {"cmd": "ls"}},
                {"type": "tool_use", "id": "call_2", "name": "bash", "input": {"cmd": "pwd"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "a.py\nb.py"},
                {"type": "tool_result", "tool_use_id": "call_2", "content": "/repo"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "call_3", "name": "bash", "input": {"_raw": "cat a.py"}},
                {"type": "tool_use", "id": "call_4", "name": "noop", "input": {}},
                {"type": "tool_use", "id": "call_5", "name": "apply_patch", "input": {"input": "*** Begin Patch"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_3",
                    "content": [{"type": "text", "text": "x = 1"}, {"type": "text", "text": "y = 2"}],
                },
                {"type": "tool_result", "tool_use_id": "call_4", "content": ""},
                {"type": "tool_result", "tool_use_id": "call_5", "content": "Done."},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look:"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                {"type": "image", "source": {"type": "url", "url": "https://example.org/a.png"}},
            ],
        },
        {"role": "user", "content": "Mid-conversation note."},
        {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
    ]


def test_the_items_are_the_views_items_of_that_body():
    body = body_from_chat(HISTORY, model="claude-sonnet-4-5", tools=TOOLS)
    assert list(body) == ["model", "max_tokens", "system", "messages", "tools"]
    items = items_from_chat(HISTORY)
    assert items == history(body)
    assert jsonio.dumps(with_history(body, items)) == jsonio.dumps(body)
    assert [VIEW.role(i) for i in items] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "tool",
        "tool",
        "tool",
        "user",
        "user",
        "assistant",
    ]
    assert [c for i in items for c in VIEW.calls(i)] == ["call_1", "call_2", "call_3", "call_4", "call_5"]
    assert [VIEW.answers(i) for i in items if VIEW.role(i) == "tool"] == [
        "call_1",
        "call_2",
        "call_3",
        "call_4",
        "call_5",
    ]
    assert VIEW.tool_text(items[5]) == "x = 1\ny = 2" and PART in items[6]
    assert body["tools"] == [
        {"name": "bash", "description": "Run a command.", "input_schema": TOOLS[0]["function"]["parameters"]},
        TOOLS[1],
    ]


def test_deterministic_and_prefixes_give_prefixes():
    original = copy.deepcopy(HISTORY)
    items, offsets = items_with_offsets(HISTORY)
    assert items == items_from_chat(copy.deepcopy(HISTORY)) and HISTORY == original
    assert len(offsets) == len(HISTORY) + 1 and offsets[:3] == [0, 0, 0]  # system messages are no items
    for k in range(len(HISTORY) + 1):
        assert items_from_chat(HISTORY[:k]) == items[: offsets[k]]


def test_odd_messages_are_kept():
    odd = [{"role": "function", "name": "f", "content": "x"}, "junk", {"role": "assistant"}]
    assert items_from_chat(odd) == [odd[0], "junk", {"role": "assistant", "content": ""}]
    assert system_from_chat(odd) is None and "system" not in body_from_chat(odd, model="m")
    assert tools_from_chat(None) is None


def test_anthropic_messages_back_to_chat():
    back = chat_from_items(items_from_chat(HISTORY))
    assert [m["role"] for m in back] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "tool",
        "tool",
        "tool",
        "user",
        "user",
        "assistant",
    ]
    assert back[1]["tool_calls"][0] == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "bash", "arguments": '{"cmd": "ls"}'},
    }
    assert back[5] == {"role": "tool", "tool_call_id": "call_3", "content": "x = 1\ny = 2"}
    assert back[8]["content"][1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    assert [CHAT_VIEW.answers(m) for m in back if m["role"] == "tool"] == [
        "call_1",
        "call_2",
        "call_3",
        "call_4",
        "call_5",
    ]
    mixed = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}, {"type": "text", "text": "more"}],
    }
    assert chat_from_message(mixed) == [
        {"role": "tool", "tool_call_id": "t", "content": "r"},
        {"role": "user", "content": "more"},
    ]
    summary = VIEW.summary_item("snapshot")
    assert chat_from_items([summary]) == [{"role": "user", "content": "snapshot"}]


def test_answers_both_ways():
    answer = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hm", "signature": "s"},
            {"type": "text", "text": "Running it."},
            {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "make"}},
        ],
        "stop_reason": "tool_use",
    }
    assert chat_from_answer(answer) == {
        "role": "assistant",
        "content": "Running it.",
        "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "make"}'}}
        ],
    }
    made = message_answer("<state_snapshot>x</state_snapshot>", model="m", input_tokens=5, output_tokens=6)
    assert chat_from_answer(made) == {"role": "assistant", "content": "<state_snapshot>x</state_snapshot>"}
    assert json.loads(jsonio.dumps(made))["usage"]["input_tokens"] == 5
