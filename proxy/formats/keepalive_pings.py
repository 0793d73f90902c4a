"""A keep-alive ping's body, per wire format: the turn's forwarded body with its prompt exactly as
sent (tools, system, messages or input: the prefix a provider caches) and the least output the
API accepts, not streamed, not stored upstream.

- chat completions: `max_completion_tokens` 1 (`max_tokens` left out: reasoning models refuse it),
  `n` 1, no stream, `store` false;
- Responses: `max_output_tokens` 16 (the API refuses less), no stream, `store` false, not in
  the background; none for a request naming a `conversation` (the upstream adds every response's
  input and output to it: a ping would write into the client's conversation);
- Anthropic Messages: `max_tokens` 1, no stream; none for a request that asks for no caching (no
  `cache_control` anywhere: Anthropic caches only where asked) or thinks (`max_tokens` must
  exceed the thinking budget, and changing the thinking budget misses the cache anyway).

`ping(endpoint, body)` is None where no ping keeps anything warm, or for an endpoint with no ping.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proxy.core.jsonio import JsonObject

DROP = ("stream", "stream_options")
# the least output each API accepts, which a ping asks for: what one ping may generate
LEAST_OUTPUT = {"chat/completions": 1, "responses": 16, "messages": 1}


def _chat(body: JsonObject) -> JsonObject | None:
    out = {k: v for k, v in body.items() if k not in (*DROP, "max_tokens")}
    return {**out, "max_completion_tokens": LEAST_OUTPUT["chat/completions"], "n": 1, "store": False}


def _responses(body: JsonObject) -> JsonObject | None:
    if body.get("conversation") is not None:
        return None
    out = {k: v for k, v in body.items() if k not in DROP}
    return {**out, "max_output_tokens": LEAST_OUTPUT["responses"], "store": False, "background": False}


def _asks_caching(value: Any, depth: int = 0) -> bool:
    """Does a `cache_control` appear anywhere (the request's own, its blocks', its tools')?"""
    if depth > 8:
        return False
    if isinstance(value, dict):
        return "cache_control" in value or any(_asks_caching(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(_asks_caching(v, depth + 1) for v in value)
    return False


def _messages(body: JsonObject) -> JsonObject | None:
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") not in (None, "disabled"):
        return None
    if not _asks_caching({k: body[k] for k in ("cache_control", "system", "tools", "messages") if k in body}):
        return None
    out = {k: v for k, v in body.items() if k not in DROP}
    return {**out, "max_tokens": LEAST_OUTPUT["messages"]}


PINGS: dict[str, Callable[[JsonObject], JsonObject | None]] = {
    "chat/completions": _chat,
    "responses": _responses,
    "messages": _messages,
}
# whose cache a ping keeps warm: the provider profile of `proxy.core.prompt_cache`
PROFILES = {"chat/completions": "openai", "responses": "openai", "messages": "anthropic"}


def ping(endpoint: str, body: Any) -> JsonObject | None:
    make = PINGS.get(endpoint.strip("/"))
    if make is None or not isinstance(body, dict):
        return None
    return make(body)


def output_tokens(endpoint: str) -> int:
    """What one ping to `endpoint` may generate (never a value of the client's body)."""
    return LEAST_OUTPUT.get(endpoint.strip("/"), 1)


def profile_name(endpoint: str) -> str | None:
    return PROFILES.get(endpoint.strip("/"))
