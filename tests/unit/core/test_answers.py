"""proxy.core.answers: the measured bill's reading, how an answer ended, text that arrives in
pieces, repeated identical tool calls."""

from __future__ import annotations

import json

import pytest

from proxy.core.answers import ERROR, Ending, GrowingText, call_key, is_context_error, may_end, of_value, repeated_calls
from proxy.formats import chat
from proxy.formats.messages import MESSAGES

# ==================== answers
# How an answer ended, in each format's whole answers, stream events and error bodies.


@pytest.mark.parametrize(
    "value, ending",
    [
        # chat completions: whole and a stream's last chunk; a chunk before it says nothing
        ({"object": "chat.completion", "choices": [{"finish_reason": "stop"}]}, Ending("stop")),
        ({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}, Ending("tool_calls")),
        ({"choices": [{"delta": {"content": "x"}, "finish_reason": None}]}, None),
        ({"choices": [], "usage": {"prompt_tokens": 1}}, None),
        # Responses: whole, terminal events, an incomplete one's reason, a failed one's error
        ({"object": "response", "status": "completed"}, Ending("completed")),
        ({"type": "response.completed", "response": {"status": "completed"}}, Ending("completed")),
        (
            {
                "type": "response.incomplete",
                "response": {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}},
            },
            Ending("max_output_tokens"),
        ),
        (
            {
                "type": "response.failed",
                "response": {"status": "failed", "error": {"code": "context_length_exceeded", "message": "too long"}},
            },
            Ending(ERROR, True, True),
        ),
        ({"type": "response.output_text.delta", "delta": "stop"}, None),
        ({"type": "response.created", "response": {"status": "in_progress", "error": None}}, None),
        # Anthropic: whole, message_delta, message_start's null
        ({"type": "message", "stop_reason": "end_turn"}, Ending("end_turn")),
        ({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}}, Ending("max_tokens")),
        ({"type": "message_start", "message": {"stop_reason": None}}, None),
        (
            {"type": "message_delta", "delta": {"stop_reason": "model_context_window_exceeded"}},
            Ending("model_context_window_exceeded", context_error=True),
        ),
        # errors: OpenAI's body, Anthropic's body and event, the Responses stream's error event
        (
            {
                "error": {
                    "message": "This model's maximum context length is 128000 tokens.",
                    "code": "context_length_exceeded",
                }
            },
            Ending(ERROR, True, True),
        ),
        ({"error": {"message": "Rate limit reached", "type": "requests"}}, Ending(ERROR, True, False)),
        (
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "prompt is too long: 210000 tokens > 200000 maximum",
                },
            },
            Ending(ERROR, True, True),
        ),
        ({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, Ending(ERROR, True, False)),
        ({"type": "error", "code": "server_error", "message": "oops"}, Ending(ERROR, True, False)),
        # not an answer, or a reason that is no reason
        ([], None),
        ("stop", None),
        ({"choices": [{"finish_reason": "x" * 500}]}, None),
    ],
)
def test_endings(value, ending):
    assert of_value(value) == ending


def test_context_errors_by_code_or_message_only():
    assert is_context_error({"code": "context_length_exceeded"})
    assert is_context_error("Input is too long for requested model.")
    assert not is_context_error({"code": "rate_limit_exceeded", "message": "slow down"})
    assert not is_context_error(None) and not is_context_error(42)


def test_only_events_that_may_end_an_answer_are_worth_parsing():
    assert may_end('{"choices":[{"finish_reason": "stop"}]}')
    assert not may_end('{"choices":[{"delta":{"content":"finish_reason"},"finish_reason":null}]}')
    assert may_end('{"type":"response.completed","response":{}}')
    assert not may_end('{"type":"response.output_text.delta","delta":"x"}')
    assert may_end('{"type": "error", "error": {}}') and may_end('{"error": {"message": "x"}}')
    assert not may_end('{"delta": {"text": "\\"error\\": {"}}')  # inside a string: escaped quotes


# ==================== growing text


def test_pieces_are_kept_apart_until_read_then_joined_once():
    grown = GrowingText("ab")
    for piece in ["c", "", "de", "f"] * 1000:
        grown.add(piece)
    assert len(grown.pieces) == 1 + 3000  # nothing joined while it grows (the empty pieces not even kept)
    assert grown.text() == "ab" + "cdef" * 1000
    assert grown.pieces == ["ab" + "cdef" * 1000]  # joined once: a second read joins nothing
    assert str(grown) == grown.text() and grown.pieces == ["ab" + "cdef" * 1000]
    grown.add("g")
    assert grown.text().endswith("fg")
    assert not GrowingText() and GrowingText().text() == "" and GrowingText("x")


# ==================== repeats
# Repeated identical tool calls, over every format's view.


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
