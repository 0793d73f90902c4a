"""The proxy's own output first in the client's answer (an emulated compaction): the `lead` of
each format's rounds, non-streamed and streamed, indexes and sequence numbers consistent."""

from proxy.core.texts import INJECTED_TOOLS
from proxy.formats.messages import _emulation as paused
from proxy.formats.messages._rounds import MessagesRounds
from proxy.formats.responses._rounds import ResponsesRounds
from tests.harness import anthropic as fake_anthropic
from tests.harness import responses as fake_responses

ITEM = {"id": "cmp_1", "type": "compaction", "encrypted_content": "offload-compaction-v1:x"}
BLOCK = {"type": "compaction", "content": "[summary] ref=abc", "encrypted_content": "offload-compaction-v1:x"}


def responses_rounds():
    return ResponsesRounds(
        {"model": "m", "input": []},
        [],
        [],
        names=INJECTED_TOOLS,
        extra_usage={"prompt_tokens": 300, "completion_tokens": 40},
        lead=[ITEM],
    )


def test_responses_non_streamed_output_opens_with_the_lead():
    rounds = responses_rounds()
    answer = fake_responses.response(fake_responses.message("Hi"), usage=fake_responses.usage(10, 5))
    assert rounds.take(answer) == []
    result = rounds.result()
    assert result["output"][0] == ITEM and result["output"][1]["type"] == "message"
    assert result["usage"]["input_tokens"] == 310 and result["usage"]["output_tokens"] == 45


def test_responses_stream_announces_the_lead_at_index_0_and_shifts_the_rest():
    rounds = responses_rounds()
    upstream = fake_responses.events(fake_responses.response(fake_responses.message("Hi")))
    out = [e for event in upstream for e in rounds.feed(event)]
    out += rounds.finish()
    numbers = [e["sequence_number"] for e in out]
    assert numbers == list(range(numbers[0], numbers[0] + len(out)))
    kinds = [e["type"] for e in out]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
    ]
    assert out[2]["item"] == ITEM == out[3]["item"] and out[2]["output_index"] == 0
    assert {e["output_index"] for e in out[4:] if "output_index" in e} == {1}
    assert [o["type"] for o in out[-1]["response"]["output"]] == ["compaction", "message"]


def test_messages_non_streamed_content_opens_with_the_lead():
    rounds = MessagesRounds({"model": "m", "messages": []}, [], [], names=INJECTED_TOOLS, lead=[BLOCK])
    rounds.take(fake_anthropic.message(fake_anthropic.text("Hi")))
    assert rounds.result()["content"] == [BLOCK, fake_anthropic.text("Hi")]


def test_messages_stream_sends_the_block_whole_at_index_0_after_message_start():
    rounds = MessagesRounds({"model": "m", "messages": []}, [], [], names=INJECTED_TOOLS, lead=[BLOCK])
    upstream = fake_anthropic.parse_sse(
        b"".join(fake_anthropic.events(fake_anthropic.message(fake_anthropic.text("Hi"))))
    )
    out = [e for event in upstream for e in rounds.feed(event)] + rounds.finish()
    assert [e["type"] for e in out[:4]] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
    ]
    assert out[1]["content_block"] == {"type": "compaction", "content": None, "encrypted_content": None}
    assert out[2]["delta"] == {
        "type": "compaction_delta",
        "content": BLOCK["content"],
        "encrypted_content": BLOCK["encrypted_content"],
    }
    assert {e["index"] for e in out[:4] if "index" in e} == {0}
    assert {e["index"] for e in out[4:] if "index" in e} == {1}


def test_a_paused_answer_is_the_block_alone():
    message = paused.paused_message(BLOCK, model="claude", tokens_in=300, tokens_out=40)
    assert message["content"] == [BLOCK] and message["stop_reason"] == "compaction"
    assert message["usage"]["input_tokens"] == 300 and message["usage"]["iterations"][0]["type"] == "compaction"
    events = paused.paused_events(message)
    assert [e["type"] for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[4]["delta"]["stop_reason"] == "compaction"
