"""How an answer ended, in each format's whole answers, stream events and error bodies."""

from __future__ import annotations

import pytest

from proxy.core.finish import ERROR, Ending, is_context_error, may_end, of_value


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
