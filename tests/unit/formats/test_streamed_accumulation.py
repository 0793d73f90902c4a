"""Streamed rounds collect what they must send back (text, thinking, tool arguments) in time
linear in the stream, in every wire format: no delta is ever concatenated with `+` onto what
came before (which copies the whole text at each delta: quadratic). Counted, not timed: every
delta is a `Piece`, a str that counts each `+` it takes part in."""

from __future__ import annotations

import json

from proxy.core.texts import INJECTED_TOOLS, RELOAD_TOOL_SCHEMAS
from proxy.formats.chat._rounds import ChatRounds
from proxy.formats.messages import MESSAGES
from proxy.formats.responses._rounds import StreamRewriter

N = 2_000


class Piece(str):
    """A delta that counts the concatenations it takes part in (`text + piece`, `piece + text`)."""

    added = 0

    def __add__(self, other):
        Piece.added += 1
        return str.__add__(self, other)

    def __radd__(self, other):
        Piece.added += 1
        return str.__add__(other, self)


def pieces(text: str, size: int = 3) -> list[Piece]:
    return [Piece(text[i : i + size]) for i in range(0, len(text), size)]


def test_piece_counts_what_a_quadratic_accumulation_does():
    Piece.added = 0
    text = ""
    for piece in pieces("x" * 30):
        text += piece
    assert Piece.added == 10 and text == "x" * 30


ARGUMENTS = json.dumps({"ref": "r" * (N // 2)})
ANSWER = "word " * N


def test_chat_stream():
    Piece.added = 0
    rounds = ChatRounds({}, [{"role": "user", "content": "q"}], RELOAD_TOOL_SCHEMAS)
    rounds.request(True)
    chunk = {"id": "c", "created": 1, "model": "m"}
    rounds.feed({**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    for piece in pieces(ANSWER):
        rounds.feed({**chunk, "choices": [{"index": 0, "delta": {"content": piece}}]})
    rounds.feed(
        {
            **chunk,
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "context_reload", "arguments": ""},
                            }
                        ]
                    },
                }
            ],
        }
    )
    for piece in pieces(ARGUMENTS):
        rounds.feed(
            {
                **chunk,
                "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}}],
            }
        )
    rounds.feed({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    [call] = rounds.calls()
    assert Piece.added == 0
    assert call.arguments == ARGUMENTS
    rounds.answer(["result"])
    assert rounds.messages[1]["content"] == ANSWER


def test_messages_stream():
    Piece.added = 0
    body = {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [{"role": "user", "content": "q"}]}
    rounds = MESSAGES.rounds(body, MESSAGES.history(body), RELOAD_TOOL_SCHEMAS, extra_usage=None)
    rounds.request(True)
    events = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "content": [],
                "usage": {"input_tokens": 1},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        *(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": p}}
            for p in pieces(ANSWER)
        ),
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "s"}},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        *(
            {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": p}}
            for p in pieces(ANSWER)
        ),
        *(
            {"type": "content_block_delta", "index": 1, "delta": {"type": "citations_delta", "citation": {"n": i}}}
            for i in range(N)
        ),
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "context_reload", "input": {}},
        },
        *(
            {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": p}}
            for p in pieces(ARGUMENTS)
        ),
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 1}},
    ]
    for event in events:
        rounds.feed(event)
    [call] = rounds.calls()
    assert Piece.added == 0
    assert json.loads(call.arguments) == json.loads(ARGUMENTS)
    rounds.answer(["result"])
    thinking, text, tool_use = rounds.items[-2]["content"]
    assert thinking == {"type": "thinking", "thinking": ANSWER, "signature": "s"}
    assert text == {"type": "text", "text": ANSWER, "citations": [{"n": i} for i in range(N)]}
    assert tool_use["input"] == json.loads(ARGUMENTS)


def test_responses_stream():
    Piece.added = 0
    rewriter = StreamRewriter(INJECTED_TOOLS)
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "context_reload",
        "arguments": ARGUMENTS,
        "status": "completed",
    }
    message = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": ANSWER, "annotations": []}],
    }
    events = [
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress", "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": {**message, "content": []}},
        *(
            {
                "type": "response.output_text.delta",
                "output_index": 0,
                "item_id": "msg_1",
                "content_index": 0,
                "delta": p,
            }
            for p in pieces(ANSWER)
        ),
        {"type": "response.output_item.done", "output_index": 0, "item": message},
        {"type": "response.output_item.added", "output_index": 1, "item": {**call, "arguments": ""}},
        *(
            {"type": "response.function_call_arguments.delta", "output_index": 1, "item_id": "fc_1", "delta": p}
            for p in pieces(ARGUMENTS)
        ),
        {"type": "response.output_item.done", "output_index": 1, "item": call},
        {"type": "response.completed", "response": {"id": "resp_1", "status": "completed", "output": [message, call]}},
    ]
    for event in events:
        rewriter.feed(event)
    assert Piece.added == 0
    assert rewriter.injected_only and rewriter.calls_to_run == [call]
