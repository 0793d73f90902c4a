"""The answer to a Messages turn paused after an emulated compaction (`compact_20260112` with
`pause_after_compaction`): the `compaction` block alone, `stop_reason: "compaction"`, as
Anthropic answers it; the upstream is asked for no turn. Pure."""

from __future__ import annotations

import hashlib
from typing import Any

from proxy.core.jsonio import JsonObject
from proxy.formats.messages.stream import block_events


def _usage(tokens_in: int, tokens_out: int) -> JsonObject:
    counts = {
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    return {**counts, "iterations": [{"type": "compaction", **counts}]}


def paused_message(block: JsonObject, *, model: Any, tokens_in: int, tokens_out: int) -> JsonObject:
    """The message: `block` alone, its id derived from the block (the same compaction, the same id)."""
    digest = hashlib.sha256(str(block.get("encrypted_content") or block.get("content")).encode()).hexdigest()
    return {
        "id": f"msg_cmp{digest[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model if isinstance(model, str) else "unknown",
        "content": [block],
        "stop_reason": "compaction",
        "stop_sequence": None,
        "usage": _usage(tokens_in, tokens_out),
    }


def paused_events(message: JsonObject) -> list[JsonObject]:
    """The same message streamed: message_start, the block's events, message_delta (with the
    message's `context_management`, if any), message_stop."""
    usage = message["usage"]
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "usage": {k: v for k, v in usage.items() if k != "iterations"} | {"output_tokens": 0},
    }
    out = [{"type": "message_start", "message": start}]
    for index, block in enumerate(message["content"]):
        out += block_events(index, block)
    delta = {"type": "message_delta", "delta": {"stop_reason": "compaction", "stop_sequence": None}, "usage": usage}
    if "context_management" in message:
        delta["context_management"] = message["context_management"]
    out.append(delta)
    out.append({"type": "message_stop"})
    return out
