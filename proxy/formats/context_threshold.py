"""Threshold compaction asked of the provider, read when the proxy applies it itself: the checks
the formats share (`proxy.formats.responses._compaction`, `proxy.formats.messages._emulation`).

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

from typing import Any

from proxy.errors import Kind, ProxyError
from proxy.formats.messages._clearing_edits import MAX_EDITS, MAX_VALUE

MIN_THRESHOLD = 1000
MAX_ENTRIES = MAX_EDITS  # context_management entries / edits read per request (one limit for both checks)


def bad(message: str, param: str) -> ProxyError:
    return ProxyError(Kind.BAD_REQUEST, message, code="invalid_context_management", param=param)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def token_count(value: Any, param: str) -> int:
    if not _integer(value):
        raise bad(f"{param} must be an integer (a number of tokens), not {type(value).__name__}.", param)
    if not MIN_THRESHOLD <= value <= MAX_VALUE:
        raise bad(f"{param} must be from {MIN_THRESHOLD} to {MAX_VALUE} tokens.", param)
    return int(value)


def entries(value: Any, param: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise bad(f"{param} must be an array.", param)
    if len(value) > MAX_ENTRIES:
        raise bad(f"{param} holds {len(value)} entries; at most {MAX_ENTRIES} are accepted.", param)
    for i, entry in enumerate(value):
        if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
            raise bad(f"{param}[{i}] must be an object with a string `type`.", f"{param}[{i}]")
    return value
