"""The Messages format's summary request (`--summary-request prefix`): the turn's system, tools and
leading messages byte for byte, then the instruction; and how its answer is read."""

from __future__ import annotations

import pytest

from proxy.core import compression as cp
from proxy.core import jsonio
from proxy.core.texts import RELOAD_TOOL_SCHEMAS, SUMMARY_INSTRUCTION
from proxy.formats.messages import MESSAGES
from proxy.formats.messages._from_chat import message_answer
from proxy.formats.messages._request import SUMMARY_MAX_TOKENS, instruction_message, summary_max_tokens
from tests.unit.formats.test_messages import BODY, MESSAGES_, U0, U8

VIEW = MESSAGES.view
INSTRUCTION = instruction_message(SUMMARY_INSTRUCTION)
CLIENT = {
    **BODY,
    "stop_sequences": ["\n\nHuman:"],
    "temperature": 1,
    "tool_choice": {"type": "auto"},
    "output_config": {"effort": "medium", "format": {"type": "json_schema", "schema": {"type": "object"}}},
}


def turn_and_summary(body: dict, items: list, cut: int, injected: bool) -> tuple[dict, dict]:
    turn = MESSAGES.rounds(body, items, RELOAD_TOOL_SCHEMAS, extra_usage=None).request(injected)
    endpoint, request = MESSAGES.summary_request(
        body, items[:cut], SUMMARY_INSTRUCTION, tools=RELOAD_TOOL_SCHEMAS if injected else (), model="claude-haiku-4-5"
    )
    assert endpoint == "messages"
    return turn, request


@pytest.mark.parametrize("injected", [True, False])
def test_the_summary_request_starts_with_the_turns_own_request(injected):
    items = MESSAGES.history(CLIENT)
    cut = items.index(MESSAGES_[7])  # before A7: a message boundary
    turn, request = turn_and_summary(CLIENT, items, cut, injected)
    n = len(MESSAGES_) - 2  # the messages before A7
    assert jsonio.dumps(request["messages"][:n]) == jsonio.dumps(turn["messages"][:n])
    assert request["messages"][n:] == [INSTRUCTION]
    assert jsonio.dumps(request["tools"]) == jsonio.dumps(turn["tools"])
    assert jsonio.dumps(request["system"]) == jsonio.dumps(turn["system"])
    assert request["thinking"] == CLIENT["thinking"] and request["tool_choice"] == {"type": "auto"}
    assert request["model"] == "claude-haiku-4-5" and request["max_tokens"] == 32000
    assert request["output_config"] == {"effort": "medium"} and request["temperature"] == 1
    assert request["metadata"] == CLIENT["metadata"]
    for gone in ("stream", "stop_sequences"):
        assert gone not in request, gone
    assert CLIENT["output_config"]["format"]  # the client's body is not changed


def test_a_prefix_with_the_prior_summary_is_forwarded_as_the_turn_forwards_it():
    final = {"role": "assistant", "content": [{"type": "text", "text": "Linted."}]}
    later = {"role": "user", "content": "And the docs?"}
    body = {
        **BODY,
        "messages": [
            *MESSAGES_,
            final,
            later,
            {"role": "assistant", "content": "Sure."},
            {"role": "user", "content": "Go on."},
        ],
    }
    items = MESSAGES.history(body)
    summary = cp.summary_item(VIEW, "<state_snapshot>s</state_snapshot>", "REFabc123", count=11, tokens=900)
    whole = cp.assemble(items, VIEW, 1, cut=items.index(later), summary=summary)  # [U0, summary, U8 (kept), later, …]
    turn = MESSAGES.rounds(body, whole, RELOAD_TOOL_SCHEMAS, extra_usage=None).request(True)
    _, request = MESSAGES.summary_request(body, whole[:3], SUMMARY_INSTRUCTION, tools=RELOAD_TOOL_SCHEMAS, model="m")
    # one user message of the task, the summary and U8; the turn's holds `later` too, after the same blocks
    first = request["messages"][0]["content"]
    assert jsonio.dumps(turn["messages"][0]["content"][: len(first)]) == jsonio.dumps(first)
    assert turn["messages"][0]["content"][len(first) :] == [{"type": "text", "text": "And the docs?"}]
    assert request["messages"][1:] == [INSTRUCTION]
    _, alone = MESSAGES.summary_request(body, whole[:2], SUMMARY_INSTRUCTION, tools=(), model="m")
    # the task and the summary, one message; the instruction never merged into it
    assert alone["messages"] == [{"role": "user", "content": [*U0["content"], *summary["content"]]}, INSTRUCTION]


@pytest.mark.parametrize(
    "choice, expected",
    [
        ({"type": "any"}, {"type": "none"}),
        ({"type": "tool", "name": "Bash"}, {"type": "none"}),
        ({"type": "none"}, {"type": "none"}),
        ({"type": "auto", "disable_parallel_tool_use": True}, {"type": "auto", "disable_parallel_tool_use": True}),
    ],
)
def test_only_a_tool_choice_forcing_a_call_is_replaced(choice, expected):
    _, request = MESSAGES.summary_request(
        {**BODY, "tool_choice": choice}, MESSAGES.history(BODY)[:1], SUMMARY_INSTRUCTION, tools=(), model="m"
    )
    assert request["tool_choice"] == expected


@pytest.mark.parametrize(
    "body, expected",
    [
        ({}, SUMMARY_MAX_TOKENS),
        ({"max_tokens": 1024}, SUMMARY_MAX_TOKENS),
        ({"max_tokens": 64000, "thinking": {"type": "disabled"}}, SUMMARY_MAX_TOKENS),
        ({"max_tokens": 32000, "thinking": {"type": "enabled", "budget_tokens": 10000}}, 32000),
        ({"thinking": {"type": "enabled", "budget_tokens": 10000}}, 10000 + SUMMARY_MAX_TOKENS),
        ({"max_tokens": 5000, "thinking": {"type": "enabled", "budget_tokens": 8000}}, 8000 + SUMMARY_MAX_TOKENS),
        ({"max_tokens": 20000, "thinking": {"type": "adaptive"}}, 20000),
    ],
)
def test_max_tokens(body, expected):
    assert summary_max_tokens(body) == expected


def test_calls_left_unanswered_at_the_end_of_the_prefix_are_closed():
    calling = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_x", "name": "Bash", "input": {}},
        ],
    }
    body = {"model": "m", "messages": [U8, calling]}
    _, request = MESSAGES.summary_request(body, MESSAGES.history(body), SUMMARY_INSTRUCTION, tools=(), model="m")
    assert request["messages"][:2] == [U8, calling]
    assert request["messages"][2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "is_error": True}, INSTRUCTION["content"][0]],
    }


def test_summary_answer_reads_the_text_and_everything_sent():
    answer = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "…", "signature": "sig"},
            {"type": "text", "text": "<state_snapshot>"},
            {"type": "text", "text": "done</state_snapshot>"},
        ],
        "stop_reason": "end_turn",
        "usage": {
            "input_tokens": 12,
            "cache_read_input_tokens": 9000,
            "cache_creation_input_tokens": 40,
            "output_tokens": 700,
        },
    }
    assert MESSAGES.summary_answer(answer) == ("<state_snapshot>done</state_snapshot>", 9052, 700)
    assert MESSAGES.summary_answer(message_answer("x", model="m", input_tokens=3, output_tokens=4)) == ("x", 3, 4)
    assert MESSAGES.summary_answer({"content": []}) == ("", 0, 0)
    for bad in (None, [], {"type": "error", "error": {"type": "api_error"}}, {"content": "text"}):
        with pytest.raises(ValueError):
            MESSAGES.summary_answer(bad)
