"""ItemView.call_details: the name and arguments of each tool call an item makes, in both formats."""

from __future__ import annotations

import json

import pytest

from proxy.core.view import ItemView
from proxy.formats.chat._items import VIEW as CHAT
from proxy.formats.responses._items import ResponsesView

RESPONSES = ResponsesView(("context_reload", "context_search"))


def test_both_views_have_it():
    for view in (CHAT, RESPONSES):
        checked: ItemView = view
        assert callable(checked.call_details)


def test_chat_function_and_custom_calls():
    message = {
        "role": "assistant",
        "content": "Running.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls -la"}'}},
            {
                "id": "c2",
                "type": "custom",
                "custom": {"name": "apply_patch", "input": "*** Begin Patch\n*** End Patch"},
            },
            {"id": "c3", "type": "function", "function": {"name": "odd", "arguments": {"already": "parsed"}}},
            {"id": "c4", "type": "function", "function": {"name": None}},
            "not a call",
        ],
    }
    assert CHAT.call_details(message) == (
        ("bash", '{"command": "ls -la"}'),
        ("apply_patch", "*** Begin Patch\n*** End Patch"),
        ("odd", '{"already": "parsed"}'),
        ("", ""),
    )


@pytest.mark.parametrize(
    "item",
    [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "c1", "content": "out"},
        {"role": "assistant", "content": "no calls"},
        {
            "role": "user",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "x", "arguments": "{}"}}],
        },
        "not a message",
    ],
)
def test_chat_items_without_calls(item):
    assert CHAT.call_details(item) == ()


@pytest.mark.parametrize(
    ("item", "details"),
    [
        (
            {"type": "function_call", "call_id": "c", "name": "exec_command", "arguments": '{"cmd": "ls"}'},
            (("exec_command", '{"cmd": "ls"}'),),
        ),
        (
            {"type": "function_call", "call_id": "c", "name": "read", "namespace": "fs", "arguments": "{}"},
            (("fs.read", "{}"),),
        ),
        (
            {"type": "custom_tool_call", "call_id": "c", "name": "apply_patch", "input": "*** Begin Patch"},
            (("apply_patch", "*** Begin Patch"),),
        ),
        (
            {"type": "local_shell_call", "call_id": "c", "action": {"type": "exec", "command": ["ls"]}},
            (("local_shell", json.dumps({"type": "exec", "command": ["ls"]})),),
        ),
        (
            {"type": "shell_call", "call_id": "c", "action": {"commands": ["make"]}},
            (("shell", json.dumps({"commands": ["make"]})),),
        ),
        (
            {"type": "apply_patch_call", "call_id": "c", "operation": {"type": "delete_file", "path": "a.py"}},
            (("apply_patch", json.dumps({"type": "delete_file", "path": "a.py"})),),
        ),
        (
            {"type": "computer_call", "call_id": "c", "action": {"type": "screenshot"}},
            (("computer", json.dumps({"type": "screenshot"})),),
        ),
        (
            {"type": "mcp_call", "id": "m", "server_label": "wiki", "name": "ask", "arguments": '{"q": 1}'},
            (("wiki.ask", '{"q": 1}'),),
        ),
        ({"type": "function_call", "call_id": "c", "name": 7, "arguments": None}, (("", ""),)),
        ({"type": "shell_call", "call_id": "c"}, (("shell", ""),)),
    ],
)
def test_responses_call_items(item, details):
    assert RESPONSES.call_details(item) == details


@pytest.mark.parametrize(
    "item",
    [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]},
        {"type": "function_call_output", "call_id": "c", "output": "x"},
        {"type": "reasoning", "summary": []},
        {"type": "web_search_call", "id": "w", "status": "completed"},
        {"role": "user", "content": "hi"},
        "not an item",
    ],
)
def test_responses_items_without_calls(item):
    assert RESPONSES.call_details(item) == ()
