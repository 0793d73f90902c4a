"""Threshold compaction asked of the provider, read when the proxy applies it itself.

Responses: `context_management: [{"type": "compaction", "compact_threshold": N}]`; Messages:
`context_management: {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens",
"value": N}, "pause_after_compaction": bool, "instructions": str}]}` (beta `compact-2026-01-12`).
Every field is checked as the provider would (a 400 naming the `param`), and lists are bounded:
the proxy reads them on every request.

Bounds: a threshold is an integer of at least MIN_THRESHOLD tokens. Anthropic itself refuses a
`compact_20260112` trigger under 50,000 tokens; the emulation accepts smaller ones, because the
upstreams it serves (vLLM, Ollama, llama.cpp…) often have far smaller context windows. A relayed
request gets the provider's own checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.errors import Kind, ProxyError
from proxy.formats.messages.edits_config import MAX_EDITS, MAX_VALUE

MIN_THRESHOLD = 1000
MAX_ENTRIES = MAX_EDITS  # context_management entries / edits read per request (one limit for both checks)
ANTHROPIC_DEFAULT_TRIGGER = 150_000  # compact_20260112's default trigger (input tokens)
COMPACT_EDIT = "compact_20260112"


@dataclass(frozen=True)
class Threshold:
    """A threshold compaction the request asks for."""

    tokens: int | None  # compact when the forwarded input holds more tokens; None: the proxy's own trigger
    pause: bool = False  # Messages `pause_after_compaction`: answer the compaction alone, no turn
    instructions: str | None = None  # Messages `instructions`: replaces the summariser's instruction


def _bad(message: str, param: str) -> ProxyError:
    return ProxyError(Kind.BAD_REQUEST, message, code="invalid_context_management", param=param)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _tokens(value: Any, param: str) -> int:
    if not _integer(value):
        raise _bad(f"{param} must be an integer (a number of tokens), not {type(value).__name__}.", param)
    if not MIN_THRESHOLD <= value <= MAX_VALUE:
        raise _bad(f"{param} must be from {MIN_THRESHOLD} to {MAX_VALUE} tokens.", param)
    return value


def _entries(value: Any, param: str) -> list[dict]:
    if not isinstance(value, list):
        raise _bad(f"{param} must be an array.", param)
    if len(value) > MAX_ENTRIES:
        raise _bad(f"{param} holds {len(value)} entries; at most {MAX_ENTRIES} are accepted.", param)
    for i, entry in enumerate(value):
        if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
            raise _bad(f"{param}[{i}] must be an object with a string `type`.", f"{param}[{i}]")
    return value


def responses_threshold(asked: Any) -> Threshold | None:
    """The compaction a Responses `context_management` asks for (None: none). ProxyError 400
    for a malformed one (only `compaction` entries exist; one at most)."""
    if asked is None:
        return None
    found: Threshold | None = None
    for i, entry in enumerate(_entries(asked, "context_management")):
        if entry["type"] != "compaction":
            raise _bad(
                f'context_management[{i}].type {entry["type"][:40]!r} is not supported; use "compaction".',
                f"context_management[{i}].type",
            )
        if found is not None:
            raise _bad(
                f"context_management[{i}] is a second compaction entry; one at most.", f"context_management[{i}]"
            )
        value = entry.get("compact_threshold")
        found = Threshold(None if value is None else _tokens(value, f"context_management[{i}].compact_threshold"))
    return found


def messages_threshold(asked: Any) -> Threshold | None:
    """The `compact_20260112` edit of a Messages `context_management` (None: none). ProxyError
    400 for a malformed one. Other edit types are left to their own emulation."""
    if asked is None:
        return None
    if not isinstance(asked, dict):
        raise _bad("context_management must be an object.", "context_management")
    edits = asked.get("edits")
    if edits is None:
        return None
    found: Threshold | None = None
    for i, edit in enumerate(_entries(edits, "context_management.edits")):
        if edit["type"] != COMPACT_EDIT:
            continue
        param = f"context_management.edits[{i}]"
        if found is not None:
            raise _bad(f"{param} is a second {COMPACT_EDIT} edit; one at most.", param)
        trigger = edit.get("trigger")
        tokens = ANTHROPIC_DEFAULT_TRIGGER
        if trigger is not None:
            if not isinstance(trigger, dict) or trigger.get("type") != "input_tokens":
                raise _bad(f'{param}.trigger must be {{"type": "input_tokens", "value": N}}.', f"{param}.trigger")
            tokens = _tokens(trigger.get("value"), f"{param}.trigger.value")
        pause = edit.get("pause_after_compaction", False)
        if not isinstance(pause, bool):
            raise _bad(f"{param}.pause_after_compaction must be a boolean.", f"{param}.pause_after_compaction")
        instructions = edit.get("instructions")
        if instructions is not None and (not isinstance(instructions, str) or not instructions.strip()):
            raise _bad(f"{param}.instructions must be a non-empty string.", f"{param}.instructions")
        found = Threshold(tokens, pause, instructions)
    return found
