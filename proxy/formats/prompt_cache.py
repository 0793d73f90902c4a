"""The providers' prompt caches as the formats meet them: OpenAI's (what it caches of a chat
completions or Responses request, `cached_request`, and the `prompt_cache_key` the proxy adds,
`with_cache_key`, `session_cache_key`) and the keep-alive ping that keeps a cached prefix warm,
per wire format (`ping`, `output_tokens`, `profile_name`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from hashlib import blake2b
from typing import Any

from proxy.core.jsonio import JsonObject
from proxy.core.prompt_cache import Block, Request, content_key

# --- openai_cache ---
# OpenAI's prompt cache on a chat completions or Responses request: what it caches
# (`cached_request`) and the `prompt_cache_key` the proxy adds (`with_cache_key`).
#
# OpenAI caches every request's prefix automatically (no markers); which machine holds a prefix
# is chosen by a hash of its start and of `prompt_cache_key`. Many sessions sharing one system
# prompt and no key land on the same machines and overflow them (OpenAI: about 15 requests a
# minute per prefix and key), so a session of its own key keeps its hits. The proxy gives a
# request without one the session's (`--cache-control auto`, OpenAI's own API only: other
# upstreams may refuse a field they do not know).

KEY_PREFIX = "offload-"


def session_cache_key(namespace: str, session: str) -> str:
    """The `prompt_cache_key` of a session: a digest of the tenant's namespace and the session
    name, so it names neither (nor a tenant's secret) and two tenants' sessions never share one."""
    digest = blake2b(digest_size=12, person=b"prompt-cache-key")
    for part in (namespace, session):
        raw = part.encode("utf-8", "surrogatepass")
        digest.update(len(raw).to_bytes(8, "big") + raw)
    return KEY_PREFIX + digest.hexdigest()


def with_cache_key(body: JsonObject, key: str | None) -> JsonObject:
    """`body` with `prompt_cache_key` = `key`, unless the client set one (any value: the upstream
    judges it) or there is no key."""
    if key is None or "prompt_cache_key" in body:
        return body
    return {**body, "prompt_cache_key": key}


Tokens = Callable[[str], int]


def _canonical(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def cache_blocks(body: JsonObject, tokens: Tokens) -> tuple[Block, ...]:
    """The request's prefix as OpenAI caches it: the tools, the Responses `instructions`, then
    each message (chat `messages`) or input item (Responses `input`, a string one item)."""
    out: list[Block] = []

    def add(kind: str, value: Any) -> None:
        text = _canonical(value)
        out.append(Block(content_key(kind, text), tokens(text)))

    if body.get("tools"):
        add("tools", body["tools"])
    if isinstance(body.get("instructions"), str) and body["instructions"]:
        add("instructions", body["instructions"])
    items = body.get("messages") if "messages" in body else body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    for item in items if isinstance(items, list) else ():
        add("item", item)
    return tuple(out)


def cached_request(body: JsonObject, at: float, tokens: Tokens) -> Request:
    return Request(at, cache_blocks(body, tokens))


# --- keepalive_pings ---
# A keep-alive ping's body, per wire format: the turn's forwarded body with its prompt exactly as
# sent (tools, system, messages or input: the prefix a provider caches) and the least output the
# API accepts, not streamed, not stored upstream.
#
# - chat completions: `max_completion_tokens` 1 (`max_tokens` left out: reasoning models refuse it),
#   `n` 1, no stream, `store` false;
# - Responses: `max_output_tokens` 16 (the API refuses less), no stream, `store` false, not in
#   the background; none for a request naming a `conversation` (the upstream adds every response's
#   input and output to it: a ping would write into the client's conversation);
# - Anthropic Messages: `max_tokens` 1, no stream; none for a request that asks for no caching (no
#   `cache_control` anywhere: Anthropic caches only where asked) or thinks (`max_tokens` must
#   exceed the thinking budget, and changing the thinking budget misses the cache anyway).
#
# `ping(endpoint, body)` is None where no ping keeps anything warm, or for an endpoint with no ping.

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
