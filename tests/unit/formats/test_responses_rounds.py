"""ResponsesRounds (the Responses format's side of the reload loop) and its request bodies."""

from __future__ import annotations

import json

import pytest

from proxy.core.texts import INJECTED_TOOLS, RELOAD_TOOL_SCHEMAS
from proxy.errors import ProxyError
from proxy.formats.responses import RESPONSES
from proxy.formats.responses._request import parse_responses_body
from proxy.formats.responses._rounds import ResponsesRounds, usage_from_chat
from proxy.http.error_map import status_of

USER = {"type": "message", "role": "user", "content": "Read the log."}
OUT = {"type": "function_call_output", "call_id": "c0", "output": "marker ref=abc"}
REASONING = {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAA"}
RELOAD = {
    "type": "function_call",
    "id": "fc_r",
    "call_id": "call_r",
    "name": "context_reload",
    "arguments": '{"ref": "abc"}',
    "status": "completed",
}
ANSWER = {
    "type": "message",
    "id": "msg_2",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "done", "annotations": []}],
}


def response(id_: str, output: list, usage: tuple[int, int] = (10, 2)) -> dict:
    return {
        "id": id_,
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "output": output,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1], "total_tokens": sum(usage)},
    }


def rounds_for(body: dict, **kw) -> ResponsesRounds:
    return RESPONSES.rounds(body, RESPONSES.history(body), RELOAD_TOOL_SCHEMAS, extra_usage=kw.get("extra"))


def run_two_rounds(body: dict) -> tuple[ResponsesRounds, list[dict]]:
    rounds = rounds_for(body)
    sent = [rounds.request(True)]
    calls = rounds.take(response("resp_1", [REASONING, RELOAD]))
    assert [(c.name, c.arguments) for c in calls] == [("context_reload", '{"ref": "abc"}')]
    rounds.answer(["the original"])
    sent.append(rounds.request(True))
    assert rounds.take(response("resp_2", [ANSWER])) == []
    return rounds, sent


def test_full_history_rounds_append_the_round_and_the_results() -> None:
    body = {"model": "m", "store": False, "include": ["reasoning.encrypted_content"], "input": [USER, OUT]}
    rounds, sent = run_two_rounds(body)
    assert rounds.chaining == "full"
    assert [t["name"] for t in sent[0]["tools"]] == sorted(INJECTED_TOOLS)
    assert sent[1]["input"] == [
        USER,
        OUT,
        REASONING,
        RELOAD,
        {"type": "function_call_output", "call_id": "call_r", "output": "the original"},
    ]
    final = rounds.result()
    assert final["id"] == "resp_1" and final["output"] == [ANSWER]
    assert final["usage"] == {"input_tokens": 20, "output_tokens": 4, "total_tokens": 24}
    assert (rounds.first_id, rounds.last_id) == ("resp_1", "resp_2")


def test_unreplayable_reasoning_is_dropped_and_ids_with_it() -> None:
    rounds, sent = run_two_rounds({"model": "m", "store": False, "input": [USER, OUT]})
    appended = sent[1]["input"][2:]
    assert [i["type"] for i in appended] == ["function_call", "function_call_output"]
    assert "id" not in appended[0] and appended[0]["call_id"] == "call_r"


def test_previous_response_id_rounds_are_chained_from_the_last_round() -> None:
    body = {"model": "m", "previous_response_id": "resp_0", "input": [USER]}
    rounds, sent = run_two_rounds(body)
    assert rounds.chaining == "previous_response_id"
    assert sent[0]["previous_response_id"] == "resp_0" and sent[0]["input"] == [USER]
    assert sent[1]["previous_response_id"] == "resp_1"
    assert sent[1]["input"] == [{"type": "function_call_output", "call_id": "call_r", "output": "the original"}]


def test_conversation_rounds_send_only_the_results() -> None:
    rounds, sent = run_two_rounds({"model": "m", "conversation": "conv_1", "input": "hi"})
    assert rounds.chaining == "conversation"
    assert sent[1]["conversation"] == "conv_1" and "previous_response_id" not in sent[1]
    assert [i["type"] for i in sent[1]["input"]] == ["function_call_output"]


def test_no_round_without_the_tools_offered() -> None:
    rounds = rounds_for({"model": "m", "input": [USER]})
    assert "tools" not in rounds.request(False)
    assert rounds.take(response("resp_1", [RELOAD])) == []
    assert rounds.result()["output"] == []  # the stray injected call is still hidden


def test_summary_usage_is_added_in_the_responses_shape() -> None:
    assert usage_from_chat({"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}) == {
        "input_tokens": 5,
        "output_tokens": 1,
        "total_tokens": 6,
    }
    rounds = RESPONSES.rounds(
        {"input": [USER]},
        [USER],
        RELOAD_TOOL_SCHEMAS,
        extra_usage={"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    )
    rounds.request(False)
    rounds.take(response("resp_1", [ANSWER]))
    assert rounds.result()["usage"] == {"input_tokens": 15, "output_tokens": 3, "total_tokens": 18}


def test_stream_failure_is_a_response_failed_event_with_a_code_the_sdk_knows() -> None:
    rounds = rounds_for({"model": "m", "input": [USER], "stream": True})
    rounds.request(True)
    created = {
        "type": "response.created",
        "sequence_number": 0,
        "response": {"id": "resp_1", "object": "response", "status": "in_progress", "output": []},
    }
    assert [e["type"] for e in rounds.feed(created)] == ["response.created"]
    failed = rounds.fail({"error": {"message": "upstream said no", "type": "x", "code": "weird_code"}})
    assert failed[0]["type"] == "response.failed"
    assert failed[0]["response"]["error"] == {"code": "server_error", "message": "upstream said no"}
    assert failed[0]["response"]["id"] == "resp_1"
    assert rounds.fail({"error": {"message": "again"}}) == []  # one end only


def test_a_stream_without_a_terminal_event_ends_failed() -> None:
    rounds = rounds_for({"model": "m", "input": [USER], "stream": True})
    rounds.request(True)
    rounds.feed(
        {
            "type": "response.created",
            "sequence_number": 0,
            "response": {"id": "resp_1", "object": "response", "status": "in_progress", "output": []},
        }
    )
    assert rounds.calls() == []
    assert [e["type"] for e in rounds.finish()] == ["response.failed"]


def test_encode_writes_the_event_name_only_when_it_is_safe() -> None:
    rounds = rounds_for({"input": "x"})
    assert rounds.encode({"type": "response.completed"}).startswith(b"event: response.completed\ndata: {")
    injected = rounds.encode({"type": "a\ndata: {}"})
    assert injected.startswith(b"data: ") and injected.count(b"\n") == 2
    assert json.loads(injected[6:]) == {"type": "a\ndata: {}"}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": 5}, "input"),
        ({"input": ["text"]}, "input[0]"),
        ({"input": [{"type": "message", "role": 3}]}, "input[0].role"),
        ({"input": [{"type": "message", "content": 7}]}, "input[0].content"),
        ({"input": [{"type": "function_call_output", "call_id": "c", "output": [1]}]}, "input[0].output[0]"),
        ({"input": [{"type": "function_call_output", "call_id": 1}]}, "input[0].call_id"),
        ({"tools": {"a": 1}}, "tools"),
        ({"stream": "yes"}, "stream"),
        ({"store": 1}, "store"),
        ({"instructions": ["x"]}, "instructions"),
        ({"previous_response_id": 1}, "previous_response_id"),
    ],
)
def test_bad_bodies_are_400_naming_the_field(body: dict, param: str) -> None:
    with pytest.raises(ProxyError) as caught:
        parse_responses_body(json.dumps(body).encode())
    assert status_of(caught.value) == 400 and caught.value.param == param


def test_good_bodies_parse_as_sent() -> None:
    body = {
        "model": "m",
        "input": [
            USER,
            OUT,
            {
                "type": "computer_call_output",
                "call_id": "c",
                "output": {"type": "computer_screenshot", "image_url": "data:"},
            },
            {"type": "something_new", "payload": {"a": [1, 2]}},
        ],
        "instructions": "be brief",
        "stream": True,
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }
    assert parse_responses_body(json.dumps(body).encode()) == body
    assert parse_responses_body(b'{"input": "hi"}') == {"input": "hi"}
    with pytest.raises(ProxyError) as caught:
        parse_responses_body(json.dumps({"input": [USER] * 5}).encode(), max_items=4)
    assert caught.value.code == "too_many_messages"


def test_events_before_an_item_is_announced_are_held_until_it_is() -> None:
    from proxy.formats.responses._rounds import StreamRewriter

    rewriter = StreamRewriter(INJECTED_TOOLS)
    created = {
        "type": "response.created",
        "sequence_number": 0,
        "response": {"id": "resp_1", "object": "response", "status": "in_progress", "output": []},
    }
    delta = {
        "type": "response.output_text.delta",
        "sequence_number": 1,
        "output_index": 0,
        "item_id": "msg_2",
        "content_index": 0,
        "delta": "done",
    }
    added = {"type": "response.output_item.added", "sequence_number": 2, "output_index": 0, "item": ANSWER}
    assert len(rewriter.feed(created)) == 1
    assert rewriter.feed(delta) == []  # nothing says yet whether it is the client's
    out = rewriter.feed(added)
    assert [e["type"] for e in out] == ["response.output_text.delta", "response.output_item.added"]
    assert [e["sequence_number"] for e in out] == [1, 2]
    # an injected call announced late: its early events are dropped
    late = StreamRewriter(INJECTED_TOOLS)
    late.feed(created)
    args = {
        "type": "response.function_call_arguments.delta",
        "sequence_number": 1,
        "output_index": 0,
        "item_id": "fc_r",
        "delta": '{"ref"',
    }
    assert late.feed(args) == []
    assert (
        late.feed({"type": "response.output_item.done", "sequence_number": 2, "output_index": 0, "item": RELOAD}) == []
    )
    completed = {"type": "response.completed", "sequence_number": 3, "response": response("resp_1", [RELOAD])}
    assert late.feed(completed) == [] and late.injected_only
