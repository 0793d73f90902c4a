"""Anthropic Messages API payloads as Anthropic sends them, for the fake upstream and the tests.

Builders of content blocks (`text`, `tool_use`, `thinking`, `redacted_thinking`), of `usage`
(with the prompt-cache fields), of a whole Message (`message`) and of the SSE events that stream
it (`events`): `message_start` (the message with no content and the input usage), then per block
`content_block_start`, its deltas (`text_delta`, `input_json_delta` in two halves,
`thinking_delta` then `signature_delta`) and `content_block_stop`, a `ping` after the first
block, then `message_delta` (stop_reason, output usage) and `message_stop`, each written as
`event: <type>` + `data: <json>` like the API.

`answer(rec, message)` answers a recorded `POST …/v1/messages` request the way it asked (JSON,
or SSE when `stream` is true), with the request's model. `parse_sse` reads a stream back.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

_ids = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}_fake{next(_ids):06d}"


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def tool_use(name: str, input: dict, *, id: str | None = None) -> dict:
    return {"type": "tool_use", "id": id or _id("toolu"), "name": name, "input": input}


def thinking(value: str = "Let me think.", *, signature: str = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxfake==") -> dict:
    return {"type": "thinking", "thinking": value, "signature": signature}


def redacted_thinking(data: str = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwfake") -> dict:
    return {"type": "redacted_thinking", "data": data}


def usage(input_tokens: int = 10, output_tokens: int = 5, *, cache_read: int = 0, cache_creation: int = 0) -> dict:
    return {
        "input_tokens": input_tokens,
        "cache_creation_input_tokens": cache_creation,
        "cache_read_input_tokens": cache_read,
        "output_tokens": output_tokens,
    }


def message(
    *content: dict,
    model: str = "claude-sonnet-4-5",
    id: str | None = None,
    stop_reason: str | None = None,
    usage: dict | None = None,
    context_management: dict | None = None,
) -> dict:
    """A Message; `stop_reason` defaults to tool_use when a client tool is called, else end_turn;
    `context_management` (the applied edits) when given."""
    if stop_reason is None:
        stop_reason = "tool_use" if any(block.get("type") == "tool_use" for block in content) else "end_turn"
    out = {
        "id": id or _id("msg"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": list(content),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage if usage is not None else _default_usage(),
    }
    if context_management is not None:
        out["context_management"] = context_management
    return out


_default_usage = usage


def _event(kind: str, data: dict) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def _block_events(index: int, block: dict) -> list[bytes]:
    kind = block.get("type")
    if kind == "text":
        start, deltas = {**block, "text": ""}, [{"type": "text_delta", "text": block["text"]}]
    elif kind == "tool_use":
        arguments = json.dumps(block.get("input", {}))
        half = len(arguments) // 2
        start = {**block, "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": part} for part in (arguments[:half], arguments[half:])]
    elif kind == "compaction":  # its summary comes whole in one compaction_delta
        start = {"type": "compaction", "content": None}
        deltas = [
            {
                "type": "compaction_delta",
                "content": block.get("content"),
                "encrypted_content": block.get("encrypted_content"),
            }
        ]
    elif kind == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [
            {"type": "thinking_delta", "thinking": block["thinking"]},
            {"type": "signature_delta", "signature": block["signature"]},
        ]
    else:  # redacted_thinking, server tool blocks: whole in their start event
        start, deltas = block, []
    return (
        [_event("content_block_start", {"index": index, "content_block": start})]
        + [_event("content_block_delta", {"index": index, "delta": delta}) for delta in deltas]
        + [_event("content_block_stop", {"index": index})]
    )


def events(msg: dict) -> list[bytes]:
    """The SSE events streaming `msg`."""
    usage_ = msg.get("usage") or {}
    start_usage = {**usage_, "output_tokens": 1}
    out = [
        _event(
            "message_start",
            {"message": {**msg, "content": [], "stop_reason": None, "stop_sequence": None, "usage": start_usage}},
        )
    ]
    for index, block in enumerate(msg["content"]):
        out += _block_events(index, block)
        if index == 0:
            out.append(_event("ping", {}))
    delta = {
        "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": usage_.get("output_tokens", 0)},
    }
    if "context_management" in msg:
        delta["context_management"] = msg["context_management"]
    out.append(_event("message_delta", delta))
    out.append(_event("message_stop", {}))
    return out


def answer(rec: Any, msg: dict) -> Response:
    """`msg` as JSON, or as SSE when the request asked for a stream; the request's model echoed."""
    body = rec.json()
    if isinstance(body.get("model"), str):
        msg = {**msg, "model": body["model"]}
    if body.get("stream") is True:
        return StreamingResponse(iter(events(msg)), media_type="text/event-stream")
    return JSONResponse(msg)


def is_messages_create(rec: Any) -> bool:
    """`POST …/v1/messages`: an Anthropic Messages request (not count_tokens)."""
    return rec.method == "POST" and rec.path.endswith("/v1/messages")


def count_answer(rec: Any) -> Response:
    """`POST …/v1/messages/count_tokens`: a count that grows with the body (a quarter of its bytes)."""
    return JSONResponse({"input_tokens": max(1, len(rec.body) // 4)})


def parse_sse(raw: bytes) -> list[dict]:
    """The JSON data of each event of an Anthropic stream, in order."""
    out = []
    for block in raw.decode().split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: "):
                out.append(json.loads(line[len("data: ") :]))
    return out


# ---------------------------------------------------------------- Anthropic's own context management

COMPACTION_BLOCK = {
    "type": "compaction",
    "content": "The user asked about the deploy; it paused at the quota.",
    "encrypted_content": "EpYBCkYIBxgCKkDnative+compaction/state==",
}
APPLIED_CLEAR = {"type": "clear_tool_uses_20250919", "cleared_tool_uses": 2, "cleared_input_tokens": 51234}
APPLIED_THINKING = {"type": "clear_thinking_20251015", "cleared_thinking_turns": 1, "cleared_input_tokens": 812}


def native_answer(rec: Any) -> Response | None:
    """How Anthropic answers a request carrying `context_management` edits (its triggers taken as
    crossed), else None: `context_management.applied_edits` for the clearing edits and, with
    `compact_20260112`, a `compaction` block first in the content (`stop_reason: "compaction"`
    when `pause_after_compaction`)."""
    body = rec.json() if rec.body else {}
    config = body.get("context_management")
    edits = config.get("edits") if isinstance(config, dict) else None
    if not isinstance(edits, list):
        return None
    kinds = {e.get("type"): e for e in edits if isinstance(e, dict)}
    applied = [
        edit
        for kind, edit in (("clear_tool_uses_20250919", APPLIED_CLEAR), ("clear_thinking_20251015", APPLIED_THINKING))
        if kind in kinds
    ]
    compact = kinds.get("compact_20260112")
    if compact is None:
        return answer(
            rec, message(text("Answered with cleared context."), context_management={"applied_edits": applied})
        )
    if compact.get("pause_after_compaction") is True:
        return answer(
            rec, message(COMPACTION_BLOCK, stop_reason="compaction", context_management={"applied_edits": applied})
        )
    return answer(
        rec, message(COMPACTION_BLOCK, text("Compacted and answered."), context_management={"applied_edits": applied})
    )
