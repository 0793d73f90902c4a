"""`POST /v1/responses/compact` bodies and answers in OpenAI's shapes, and the answer to a
`compaction_trigger` (a Response, or its stream)."""

import json

import openai
import pydantic
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from openai.types.responses.compacted_response import CompactedResponse

from proxy.errors import ProxyError
from proxy.formats.responses._compaction import (
    compacted_response,
    compaction_item,
    output_message,
    parse_compact_body,
    summary_body,
    triggered_events,
    triggered_response,
)
from proxy.http.error_map import status_of

TOKEN = "offload-compaction-v1:" + "A" * 43


def parse(body, **kwargs):
    return parse_compact_body(json.dumps(body).encode(), **kwargs)


def test_a_body_with_model_and_input_parses():
    body = {"model": "gpt-5", "input": "hi", "instructions": "x", "prompt_cache_key": "k", "image": {"a": 1}}
    assert parse(body) == body


@pytest.mark.parametrize(
    "body, param",
    [
        ({"input": "hi"}, "model"),
        ({"model": None, "input": "hi"}, "model"),
        ({"model": "gpt-5"}, "input"),
        ({"model": 5, "input": "hi"}, "model"),
        ({"model": "gpt-5", "input": 5}, "input"),
        ({"model": "gpt-5", "input": [5]}, "input[0]"),
        ({"model": "gpt-5", "input": "hi", "instructions": ["x"]}, "instructions"),
        ({"model": "gpt-5", "input": "hi", "previous_response_id": {}}, "previous_response_id"),
        ({"model": "gpt-5", "input": [{"role": "user", "content": {"x": 1}}]}, "input[0].content"),
    ],
)
def test_a_wrong_or_missing_field_is_a_400_naming_it(body, param):
    with pytest.raises(ProxyError) as err:
        parse(body)
    assert status_of(err.value) == 400 and err.value.param == param


def test_more_items_than_allowed_is_a_400():
    with pytest.raises(ProxyError) as err:
        parse({"model": "m", "input": [{"role": "user", "content": "x"}] * 3}, max_items=2)
    assert err.value.code == "too_many_messages"


def test_previous_response_id_alone_parses_for_the_caller_to_decide():
    assert parse({"model": "m", "previous_response_id": "resp_1"})["previous_response_id"] == "resp_1"


def test_the_summary_calls_take_only_what_responses_create_accepts():
    body = {
        "model": "m",
        "input": [],
        "instructions": "i",
        "image": {"context_compression": "enabled"},
        "prompt_cache_options": {},
        "service_tier": "flex",
    }
    assert summary_body(body) == {"model": "m", "instructions": "i", "service_tier": "flex", "input": []}


def test_a_user_message_becomes_an_output_item_with_parts():
    assert output_message({"role": "user", "content": "hi"}) == {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "hi"}],
    }
    item = {"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": "u"}], "id": "m1"}
    assert output_message(item) == item


def test_the_answer_is_deterministic_in_its_token_and_parses_with_the_sdk():
    one = compacted_response(TOKEN, [{"role": "user", "content": "task"}], created_at=1, tokens_in=3, tokens_out=2)
    two = compacted_response(TOKEN, [{"role": "user", "content": "task"}], created_at=1, tokens_in=3, tokens_out=2)
    assert one == two and one["id"] != compacted_response(TOKEN + "B", [], created_at=1)["id"]
    assert one["output"][-1] == compaction_item(TOKEN) and one["output"][-1]["id"].startswith("cmp_")
    parsed = openai._models.construct_type(type_=CompactedResponse, value=one)
    assert parsed.object == "response.compaction" and parsed.output[-1].encrypted_content == TOKEN
    assert (parsed.usage.input_tokens, parsed.usage.output_tokens, parsed.usage.total_tokens) == (3, 2, 5)
    CompactedResponse.model_validate({**one, "output": one["output"][-1:]})  # strictly valid, the item included


CODEX_REQUEST = {  # what Codex 0.171 sends with its compaction_trigger (trimmed)
    "model": "gpt-5-codex",
    "instructions": "You are Codex.",
    "input": [],
    "stream": True,
    "store": False,
    "tools": [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}, "strict": False}],
    "tool_choice": "auto",
    "parallel_tool_calls": False,
    "reasoning": {"effort": "medium", "summary": "auto"},
    "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "01a2",
    "client_metadata": {"x": "y"},
}


def test_a_trigger_is_answered_a_completed_response_whose_output_is_the_compaction_item_alone():
    lead = [compaction_item(TOKEN)]
    answer = triggered_response(lead, request=CODEX_REQUEST, created_at=7, tokens_in=300, tokens_out=40)
    assert answer["output"] == lead and answer["status"] == "completed" and answer["object"] == "response"
    assert answer["model"] == "gpt-5-codex" and answer["created_at"] == 7
    assert (answer["tools"], answer["store"], answer["instructions"]) == (
        CODEX_REQUEST["tools"],
        False,
        "You are Codex.",
    )
    assert answer["parallel_tool_calls"] is False and answer["reasoning"] == CODEX_REQUEST["reasoning"]
    assert "include" not in answer and "client_metadata" not in answer and "input" not in answer
    assert answer == triggered_response(lead, request=CODEX_REQUEST, created_at=7, tokens_in=300, tokens_out=40)
    assert (
        answer["id"].startswith("resp_")
        and answer["id"]
        != triggered_response([compaction_item(TOKEN + "B")], request=CODEX_REQUEST, created_at=7)["id"]
    )
    parsed = Response.model_validate(answer)  # strictly valid for the openai SDK
    assert parsed.output[0].type == "compaction" and parsed.output[0].encrypted_content == TOKEN
    assert (parsed.usage.input_tokens, parsed.usage.output_tokens, parsed.usage.total_tokens) == (300, 40, 340)


def test_a_request_with_few_fields_gets_the_apis_defaults():
    answer = triggered_response([compaction_item(TOKEN)], request={"model": 5}, created_at=1)
    assert answer["model"] == "unknown" and answer["tools"] == [] and answer["store"] is True
    assert answer["usage"]["total_tokens"] == 0
    Response.model_validate(answer)


def test_the_stream_is_the_event_sequence_openai_sends_for_it():
    answer = triggered_response(
        [compaction_item(TOKEN)], request=CODEX_REQUEST, created_at=7, tokens_in=3, tokens_out=2
    )
    events = triggered_events(answer)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == [0, 1, 2, 3, 4]
    assert events[0]["response"]["status"] == "in_progress" and events[0]["response"]["output"] == []
    assert events[0]["response"]["usage"] is None and events[0]["response"]["id"] == answer["id"]
    assert events[2]["output_index"] == events[3]["output_index"] == 0
    assert events[3]["item"] == compaction_item(TOKEN) and events[-1]["response"] == answer
    adapter = pydantic.TypeAdapter(ResponseStreamEvent)
    parsed = [adapter.validate_python(e) for e in events]  # every event as the SDK reads it
    assert parsed[3].item.encrypted_content == TOKEN and parsed[-1].response.usage.total_tokens == 5
