"""Repeated identical tool calls, over every format's view."""

from __future__ import annotations

import json

from proxy.core.repeats import call_key, repeated_calls
from proxy.formats import chat
from proxy.formats.messages import MESSAGES


def chat_call(name: str, args: dict | str, i: int) -> dict:
    text = args if isinstance(args, str) else json.dumps(args)
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": text}}],
    }


def test_the_same_call_again_counts_key_order_and_spacing_aside():
    items = [
        chat_call("bash", {"cmd": "ls", "cwd": "/"}, 0),
        {"role": "tool", "tool_call_id": "c0", "content": "a"},
        chat_call("bash", '{"cwd": "/",  "cmd": "ls"}', 1),
        chat_call("bash", {"cmd": "ls -la"}, 2),
        chat_call("read", {"cmd": "ls", "cwd": "/"}, 3),
        chat_call("bash", {"cmd": "ls", "cwd": "/"}, 4),
    ]
    assert repeated_calls(items, chat.VIEW) == 2
    assert repeated_calls([], chat.VIEW) == 0


def test_free_form_and_broken_arguments_compare_as_written():
    assert call_key("apply_patch", "*** Begin Patch") == ("apply_patch", "*** Begin Patch")
    assert call_key("f", "{not json") == ("f", "{not json")
    assert call_key("f", "[" * 10 + "{") == ("f", "[" * 10 + "{")
    deep = '{"a":' * 15_000 + "1" + "}" * 15_000  # past the parser's recursion limit: as written
    assert call_key("f", deep) == ("f", deep)
    huge = '{"a": "' + "x" * 200_000 + '"}'  # past MAX_ARGUMENT_CHARS: never parsed
    assert call_key("f", huge) == ("f", huge)
    assert call_key("f", ' {"b": 1, "a": 2} ') == ("f", '{"a":2,"b":1}')


def test_messages_tool_use_blocks():
    use = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "grep", "input": {"q": "x"}}]}
    again = {"role": "assistant", "content": [{"type": "tool_use", "id": "t2", "name": "grep", "input": {"q": "x"}}]}
    items = MESSAGES.history({"messages": [{"role": "user", "content": "go"}, use, again]})
    assert repeated_calls(items, MESSAGES.view) == 1
