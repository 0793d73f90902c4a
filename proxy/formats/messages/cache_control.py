"""Anthropic's prompt cache on a Messages request: what the provider caches of it
(`cached_request`, for `proxy.core.prompt_cache`) and the caching the proxy adds for a client
that asked for none (`with_caching`, `--cache-control auto`).

Anthropic caches only where a request asks: `cache_control` on a tool, a system block or a
message's content block (a breakpoint), or at the top level (request-level automatic caching: a
breakpoint on the last block, moving forward as the conversation grows). The cache order is
tools, then system, then messages; a breakpoint's `cache_control` is not part of what is cached,
so a breakpoint moved to a later block still finds the earlier prefix (20 boundaries back).

`with_caching` adds, to a request carrying no `cache_control` anywhere, the top-level
`{"type": "ephemeral"}` and a breakpoint on the last system block (the last tool when there is
no system): the automatic breakpoint caches the conversation turn by turn, the other keeps the
tools and system cached when the proxy's summary rewrites what follows them (measured on the
traces: bench/cache_control.py, docs/caching.md). Both stay where they are across turns, the
bytes before them unchanged, and the proxy's summary calls, made from the same body, carry them
too. A client's own `cache_control`, wherever it is, leaves the request as it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from proxy.core.jsonio import JsonObject
from proxy.core.prompt_cache import FIVE_MINUTES, Block, Request, content_key

EPHEMERAL = {"type": "ephemeral"}
Strategy = Literal["automatic", "system+automatic", "none"]
STRATEGY: Strategy = "system+automatic"  # chosen by measurement (bench/cache_control.py)
# Where a client's `cache_control` can sit without being a breakpoint of its own: inside a
# tool's schema (a property may be named so) or a tool call's arguments.
_OPAQUE = frozenset({"input_schema", "input"})


def _carries(value: Any) -> bool:
    """Does a `cache_control` key sit in `value` (outside _OPAQUE)? A walk over its lists and
    objects only, without recursion."""
    pending = [value]
    while pending:
        current = pending.pop()
        if isinstance(current, dict):
            if "cache_control" in current:
                return True
            pending.extend(v for k, v in current.items() if isinstance(v, (dict, list)) and k not in _OPAQUE)
        elif isinstance(current, list):
            pending.extend(v for v in current if isinstance(v, (dict, list)))
    return False


def _messages_carry(messages: Any) -> bool:
    """`_carries` for the messages list, its two outer levels (messages, their content blocks)
    in plain loops: it is asked of the whole history on every turn."""
    if not isinstance(messages, list):
        return _carries(messages)
    for message in messages:
        if not isinstance(message, dict):
            if _carries(message):
                return True
            continue
        if "cache_control" in message:
            return True
        for key, value in message.items():
            if key == "content" and isinstance(value, list):
                for block in value:
                    if isinstance(block, dict):
                        if "cache_control" in block:
                            return True
                        for inner_key, inner in block.items():
                            if isinstance(inner, (dict, list)) and inner_key not in _OPAQUE and _carries(inner):
                                return True
                    elif isinstance(block, list) and _carries(block):
                        return True
            elif isinstance(value, (dict, list)) and key not in _OPAQUE and _carries(value):
                return True
    return False


def has_cache_control(body: JsonObject) -> bool:
    """Does the request ask for caching anywhere: at the top level, on a tool, a system block, a
    content block (nested ones too, e.g. in a tool_result)?"""
    return (
        "cache_control" in body
        or _carries(body.get("tools"))
        or _carries(body.get("system"))
        or _messages_carry(body.get("messages"))
    )


def with_caching(body: JsonObject, strategy: Strategy = STRATEGY) -> JsonObject:
    """`body` with the proxy's caching (see the module docstring), or `body` itself when it
    carries `cache_control` already, has no messages list, or `strategy` is "none"."""
    if strategy == "none" or has_cache_control(body) or not isinstance(body.get("messages"), list):
        return body
    out = {**body, "cache_control": dict(EPHEMERAL)}
    if strategy == "system+automatic":
        out = _mark_head(out)
    return out


def _mark_head(body: JsonObject) -> JsonObject:
    """The last system block marked (a string system becomes one text block), else the last tool."""
    system = body.get("system")
    if isinstance(system, str) and system:
        return {**body, "system": [{"type": "text", "text": system, "cache_control": dict(EPHEMERAL)}]}
    if isinstance(system, list) and system and isinstance(system[-1], dict):
        return {**body, "system": [*system[:-1], {**system[-1], "cache_control": dict(EPHEMERAL)}]}
    tools = body.get("tools")
    if isinstance(tools, list) and tools and isinstance(tools[-1], dict):
        return {**body, "tools": [*tools[:-1], {**tools[-1], "cache_control": dict(EPHEMERAL)}]}
    return body


# ---------------------------------------------------------------------------- what is cached

Tokens = Callable[[str], int]


def _mark(value: Any) -> str | None:
    control = value.get("cache_control") if isinstance(value, dict) else None
    if not isinstance(control, dict):
        return None
    ttl = control.get("ttl", FIVE_MINUTES)
    return ttl if isinstance(ttl, str) else FIVE_MINUTES


def _canonical(value: Any) -> str:
    """The block as cached: its JSON without its `cache_control` (nested ones too)."""

    def plain(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items() if k != "cache_control"}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v

    return json.dumps(plain(value), ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def cache_blocks(body: JsonObject, tokens: Tokens) -> tuple[Block, ...]:
    """The request's prefix as Anthropic caches it: each tool, each system block (a string
    system one), then each message's content blocks (a string content one), with its role."""
    out: list[Block] = []

    def add(kind: str, value: Any, mark: str | None) -> None:
        text = _canonical(value)
        out.append(Block(content_key(kind, text), tokens(text), mark))

    tools, messages = body.get("tools"), body.get("messages")
    for tool in tools if isinstance(tools, list) else ():
        add("tool", tool, _mark(tool))
    system = body.get("system")
    if isinstance(system, str) and system:
        add("system", {"type": "text", "text": system}, None)
    for block in system if isinstance(system, list) else ():
        add("system", block, _mark(block))
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict):
            continue
        role, content = str(message.get("role")), message.get("content")
        if isinstance(content, str):
            add(role, {"type": "text", "text": content}, None)
        for block in content if isinstance(content, list) else ():
            add(role, block, _mark(block))
    return tuple(out)


def cached_request(body: JsonObject, at: float, tokens: Tokens) -> Request:
    """What Anthropic's cache sees of `body` sent at `at` (`proxy.core.prompt_cache.Request`)."""
    return Request(at, cache_blocks(body, tokens), automatic=_mark(body))
