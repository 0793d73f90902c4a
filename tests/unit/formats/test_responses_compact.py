"""`POST /v1/responses/compact` bodies and answers in OpenAI's shapes."""

import json

import openai
import pytest

from proxy.errors import ProxyError
from proxy.formats.responses.compact import (compacted_response, compaction_item, output_message,
                                             parse_compact_body, summary_body)
from openai.types.responses.compacted_response import CompactedResponse

TOKEN = "offload-compaction-v1:" + "A" * 43


def parse(body, **kwargs):
    return parse_compact_body(json.dumps(body).encode(), **kwargs)


def test_a_body_with_model_and_input_parses():
    body = {"model": "gpt-5", "input": "hi", "instructions": "x", "prompt_cache_key": "k", "image": {"a": 1}}
    assert parse(body) == body


@pytest.mark.parametrize("body, param", [
    ({"input": "hi"}, "model"),
    ({"model": None, "input": "hi"}, "model"),
    ({"model": "gpt-5"}, "input"),
    ({"model": 5, "input": "hi"}, "model"),
    ({"model": "gpt-5", "input": 5}, "input"),
    ({"model": "gpt-5", "input": [5]}, "input[0]"),
    ({"model": "gpt-5", "input": "hi", "instructions": ["x"]}, "instructions"),
    ({"model": "gpt-5", "input": "hi", "previous_response_id": {}}, "previous_response_id"),
    ({"model": "gpt-5", "input": [{"role": "user", "content": {"x": 1}}]}, "input[0].content"),
])
def test_a_wrong_or_missing_field_is_a_400_naming_it(body, param):
    with pytest.raises(ProxyError) as err:
        parse(body)
    assert err.value.status == 400 and err.value.param == param


def test_more_items_than_allowed_is_a_400():
    with pytest.raises(ProxyError) as err:
        parse({"model": "m", "input": [{"role": "user", "content": "x"}] * 3}, max_items=2)
    assert err.value.code == "too_many_messages"


def test_previous_response_id_alone_parses_for_the_caller_to_decide():
    assert parse({"model": "m", "previous_response_id": "resp_1"})["previous_response_id"] == "resp_1"


def test_the_summary_calls_take_only_what_responses_create_accepts():
    body = {"model": "m", "input": [], "instructions": "i", "image": {"context_compression": "enabled"},
            "prompt_cache_options": {}, "service_tier": "flex"}
    assert summary_body(body) == {"model": "m", "instructions": "i", "service_tier": "flex", "input": []}


def test_a_user_message_becomes_an_output_item_with_parts():
    assert output_message({"role": "user", "content": "hi"}) == {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
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
