"""OpenAI's prompt cache on a chat completions or Responses request: what it caches
(`cached_request`) and the `prompt_cache_key` the proxy adds (`with_cache_key`).

OpenAI caches every request's prefix automatically (no markers); which machine holds a prefix
is chosen by a hash of its start and of `prompt_cache_key`. Many sessions sharing one system
prompt and no key land on the same machines and overflow them (OpenAI: about 15 requests a
minute per prefix and key), so a session of its own key keeps its hits. The proxy gives a
request without one the session's (`--cache-control auto`, OpenAI's own API only: other
upstreams may refuse a field they do not know).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from hashlib import blake2b
from typing import Any

from proxy.core.jsonio import JsonObject
from proxy.core.prompt_cache import Block, Request, content_key

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
