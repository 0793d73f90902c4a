"""Each format's usage as a bill (`proxy.formats.*.usage`, `proxy.core.answers`): the providers' fields,
streamed and not, and hostile values read as no usage (counted), never an exception."""

from __future__ import annotations

import json

import pytest

from proxy.core.answers import MAX_TOKENS, UNREPORTED, Bill, Meter
from proxy.formats.chat._rounds import USAGE as CHAT
from proxy.formats.chat._rounds import without_usage
from proxy.formats.messages._rounds import USAGE as MESSAGES
from proxy.formats.responses._rounds import USAGE as RESPONSES


def test_chat_usage():
    usage = {
        "prompt_tokens": 1200,
        "completion_tokens": 80,
        "total_tokens": 1280,
        "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
    }
    assert CHAT.of_answer({"usage": usage}) == Bill(uncached=176, cache_read=1024, output=80, answers=1)
    assert CHAT.of_answer({"usage": {"prompt_tokens": 10, "completion_tokens": 5}}) == Bill(
        uncached=10, output=5, answers=1
    )
    assert CHAT.of_answer({"usage": {"prompt_tokens": 10, "prompt_tokens_details": None}}).uncached == 10


def test_responses_usage():
    usage = {
        "input_tokens": 5000,
        "input_tokens_details": {"cached_tokens": 4096},
        "output_tokens": 300,
        "output_tokens_details": {"reasoning_tokens": 200},
        "total_tokens": 5300,
    }
    assert RESPONSES.of_answer({"usage": usage}) == Bill(uncached=904, cache_read=4096, output=300, answers=1)


def test_messages_usage_with_and_without_the_write_split():
    usage = {
        "input_tokens": 50,
        "cache_read_input_tokens": 10_000,
        "cache_creation_input_tokens": 3000,
        "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 2000},
        "output_tokens": 400,
        "service_tier": "standard",
    }
    assert MESSAGES.of_answer({"usage": usage}) == Bill(
        uncached=50, cache_read=10_000, cache_write_5m=1000, cache_write_1h=2000, output=400, answers=1
    )
    plain = {
        "input_tokens": 50,
        "cache_creation_input_tokens": 3000,
        "cache_read_input_tokens": None,
        "output_tokens": 4,
    }
    assert MESSAGES.of_answer({"usage": plain}) == Bill(uncached=50, cache_write_5m=3000, output=4, answers=1)
    split_only = {"input_tokens": 1, "cache_creation": {"ephemeral_1h_input_tokens": 7}, "output_tokens": 1}
    assert MESSAGES.of_answer({"usage": split_only}).cache_write_1h == 7


def ident(value: object) -> str:
    """A test id the same in every process (an object's repr holds its address: xdist workers differ)."""
    plain = (type(None), str, int, float, bool, list, dict, tuple, bytes)
    return repr(value) if isinstance(value, plain) else type(value).__name__


HOSTILE = [None, "12", -1, True, False, 1.5, [], {}, {"x": 1}, MAX_TOKENS + 1, 10**30, float("nan")]


@pytest.mark.parametrize("value", HOSTILE, ids=ident)
@pytest.mark.parametrize(
    "reader, template, field",
    [
        (CHAT, {"prompt_tokens": 10, "completion_tokens": 5}, ("prompt_tokens",)),
        (
            CHAT,
            {"prompt_tokens": 10, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 1}},
            ("prompt_tokens_details", "cached_tokens"),
        ),
        (CHAT, {"prompt_tokens": 10, "completion_tokens": 5}, ("completion_tokens",)),
        (RESPONSES, {"input_tokens": 10, "output_tokens": 5}, ("input_tokens",)),
        (
            RESPONSES,
            {"input_tokens": 10, "output_tokens": 5, "input_tokens_details": {"cached_tokens": 1}},
            ("input_tokens_details", "cached_tokens"),
        ),
        (MESSAGES, {"input_tokens": 10, "output_tokens": 5}, ("input_tokens",)),
        (
            MESSAGES,
            {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 3},
            ("cache_read_input_tokens",),
        ),
        (
            MESSAGES,
            {
                "input_tokens": 10,
                "output_tokens": 5,
                "cache_creation_input_tokens": 4,
                "cache_creation": {"ephemeral_5m_input_tokens": 4},
            },
            ("cache_creation", "ephemeral_5m_input_tokens"),
        ),
    ],
)
def test_a_hostile_count_is_no_usage_never_a_guess(reader, template, field, value):
    usage = json.loads(json.dumps(template))
    target = usage
    for step in field[:-1]:
        target = target[step]
    target[field[-1]] = value
    bill = reader.of_answer({"usage": usage})
    optional = field[-1] in (
        "completion_tokens",
        "cached_tokens",
        "cache_read_input_tokens",
        "ephemeral_5m_input_tokens",
    ) or field == ("output_tokens",)
    if value is None and optional:
        assert bill.answers == 1 and bill.unreported == 0  # a null optional count is 0
    else:
        assert bill == UNREPORTED, (field, value)


@pytest.mark.parametrize(
    "answer", [None, "x", 7, [], {"usage": None}, {"usage": "lots"}, {"usage": [1, 2]}, {}], ids=ident
)
def test_answers_without_a_readable_usage(answer):
    for reader in (CHAT, RESPONSES, MESSAGES):
        assert reader.of_answer(answer) == UNREPORTED


@pytest.mark.parametrize(
    "reader, usage",
    [
        (CHAT, {"prompt_tokens_details": "x", "prompt_tokens": 1}),
        (CHAT, {"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 6}}),  # more cached than sent
        (RESPONSES, {"input_tokens": 5, "input_tokens_details": {"cached_tokens": 6}}),
        (RESPONSES, {"input_tokens": 5, "input_tokens_details": [1]}),
        (
            MESSAGES,
            {"input_tokens": 1, "cache_creation_input_tokens": 2, "cache_creation": {"ephemeral_1h_input_tokens": 3}},
        ),
        (MESSAGES, {"input_tokens": 1, "cache_creation": ["x"]}),
        (MESSAGES, {"output_tokens": 1}),  # no input count at all
    ],
    ids=ident,
)
def test_inconsistent_usage_is_no_usage(reader, usage):
    assert reader.of_answer({"usage": usage}) == UNREPORTED


def test_streams():
    chat = CHAT.stream()
    for event in (
        {"choices": [{"delta": {"content": "hi"}}], "usage": None},
        {
            "choices": [],
            "usage": {"prompt_tokens": 9, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}},
        },
    ):
        chat.feed(event)
    assert chat.bill() == Bill(uncached=5, cache_read=4, output=2, answers=1)
    assert CHAT.stream().bill() == UNREPORTED  # a stream that reported none

    responses = RESPONSES.stream()
    responses.feed({"type": "response.created", "response": {"usage": None}})
    responses.feed({"type": "response.completed", "response": {"usage": {"input_tokens": 7, "output_tokens": 3}}})
    assert responses.bill() == Bill(uncached=7, output=3, answers=1)

    messages = MESSAGES.stream()
    messages.feed(
        {
            "type": "message_start",
            "message": {
                "usage": {
                    "input_tokens": 3,
                    "cache_read_input_tokens": 900,
                    "cache_creation_input_tokens": 100,
                    "output_tokens": 1,
                }
            },
        }
    )
    messages.feed({"type": "content_block_delta", "usage": {"output_tokens": 10**20}})  # not a usage event
    messages.feed({"type": "message_delta", "usage": {"output_tokens": 42}})
    assert messages.bill() == Bill(uncached=3, cache_read=900, cache_write_5m=100, output=42, answers=1)
    broken = MESSAGES.stream()
    broken.feed({"type": "message_start", "message": {"usage": {"input_tokens": 3, "output_tokens": 1}}})
    broken.feed({"type": "message_delta", "usage": "nope"})
    assert broken.bill() == UNREPORTED


def test_bills_add_and_a_meter_keeps_first_and_last():
    meter = Meter()
    one, two = Bill(uncached=1, output=2, answers=1), Bill(cache_read=5, output=1, answers=1)
    for bill in (one, UNREPORTED, two):
        meter.add(bill)
    assert meter.total == Bill(uncached=1, cache_read=5, output=3, answers=2, unreported=1)
    assert (meter.first, meter.last) == (one, two)
    assert Bill(uncached=10, cache_read=90, output=7, answers=1).scaled_input(2.0) == Bill(
        uncached=20, cache_read=180, output=7, answers=1
    )


def test_asking_for_a_chat_streams_usage():
    assert CHAT.asking({"stream": True, "messages": []}) == {
        "stream": True,
        "messages": [],
        "stream_options": {"include_usage": True},
    }
    assert CHAT.asking({"stream": True, "stream_options": {"include_obfuscation": False}})["stream_options"] == {
        "include_obfuscation": False,
        "include_usage": True,
    }
    assert CHAT.asking({"stream": True, "stream_options": {"include_usage": True}}) is None  # asked itself
    assert CHAT.asking({"stream": False}) is None and CHAT.asking({}) is None
    assert CHAT.asking({"stream": True, "stream_options": "x"}) is None  # the upstream's 400, as sent
    assert RESPONSES.asking({"stream": True}) is None and MESSAGES.asking({"stream": True}) is None


@pytest.mark.parametrize(
    "data, expected",
    [
        (
            b'{"id":"c","choices":[{"index":0,"delta":{"content":"a"}}],"usage":null}',
            b'{"id":"c","choices":[{"index":0,"delta":{"content":"a"}}]}',
        ),
        (b'{"usage":null,"id":"c","choices":[]}', b'{"id":"c","choices":[]}'),
        (b'{"id":"c","choices":[],"usage":{"prompt_tokens":1}}', None),
        (
            b'{"id":"c", "choices": [{"delta": {"content": "\\"usage\\":null,"}}], "usage": null}',
            b'{"id":"c", "choices": [{"delta": {"content": "\\"usage\\":null,"}}]}',
        ),
        (
            b'{"id":"c","choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":1}}',
            b'{"id":"c","choices":[{"delta":{"content":"x"}}]}',
        ),
        (b'{"id":"c","choices":[]}', b'{"id":"c","choices":[]}'),
        # an error mid-stream carrying the usage so far: the error reaches the client, the usage does not
        (b'{"error":{"message":"overloaded"},"usage":{"prompt_tokens":1}}', b'{"error":{"message":"overloaded"}}'),
        (b"[DONE]", b"[DONE]"),
        (b"not json", b"not json"),
    ],
)
def test_what_asking_added_is_taken_out_byte_for_byte(data, expected):
    assert CHAT.unasked(data) == expected


def test_a_usage_key_no_cut_can_remove_is_written_again():
    event = {"id": "c", "usage": None, "choices": []}
    assert json.loads(without_usage(b'{"id":"c","usage" :null ,"choices":[]}', event)) == {"id": "c", "choices": []}


def test_nested_usage_keys_cost_a_bounded_number_of_parses(monkeypatch):
    """An upstream's chunk holding thousands of nested `"usage"` keys before the top-level one is
    rewritten in a few parses, not one per key (that was quadratic: 47 s of event loop for 224 KB)."""
    from proxy.formats.chat import _rounds as chat_usage

    parses = []
    real, decode = chat_usage.jsonio.loads, json.JSONDecoder.raw_decode
    monkeypatch.setattr(chat_usage.jsonio, "loads", lambda data: parses.append(1) or real(data))
    monkeypatch.setattr(json.JSONDecoder, "raw_decode", lambda self, *a, **k: parses.append(1) or decode(self, *a, **k))
    event = {
        "id": "c",
        "choices": [{"index": 0, "delta": {"content": "x"}}],
        "junk": [{"usage": 0} for _ in range(2000)],
        "usage": None,
    }
    out = CHAT.unasked(json.dumps(event).encode())
    assert json.loads(out) == {k: v for k, v in event.items() if k != "usage"}
    assert len(parses) <= 16
    # the top-level member first in the text, nested ones after it: still the one taken out
    parses.clear()
    first = {"usage": None, "id": "c", "choices": [{"delta": {"content": "x"}}], "junk": [{"usage": 0}] * 2000}
    assert json.loads(CHAT.unasked(json.dumps(first).encode())) == {k: v for k, v in first.items() if k != "usage"}
    assert len(parses) <= 16
