"""The fake upstream's prompt cache: usage reported as a provider bills it, on a clock the test holds.

`FakeUpstream.caches = ProviderCaches()` turns it on (off by default: the fixed usage the other
tests read stays). Every model request (chat completions, Responses, Anthropic Messages, the
proxy's summary calls included) is then billed by `proxy.core.provider_cache` — Anthropic's
profile for Messages (caching only where the request asks: `cache_control`), OpenAI's for the
others (automatic) — with one cache per credential, and the answer's usage says so:
`cache_read_input_tokens` / `cache_creation_input_tokens` (and `cache_creation`'s 5-minute /
1-hour split) with `input_tokens` the uncached rest on Messages; `prompt_tokens` with
`prompt_tokens_details.cached_tokens` on chat, `input_tokens` with
`input_tokens_details.cached_tokens` on Responses; streamed or not. A request Anthropic would
refuse (5 breakpoints) gets its 400. Tokens are estimated (a quarter of each block's JSON).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

from proxy.core import provider_cache as pc
from proxy.formats import openai_cache
from proxy.formats.messages import cache_control as messages_cache


def estimate(text: str) -> int:
    return max(1, len(text) // 4)


@dataclass
class Clock:
    """The time the fake's cache sees, in seconds: moved by the test only."""

    now: float = 0.0

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Bill:
    path: str
    billed: pc.Billed
    profile: pc.Profile


@dataclass
class ProviderCaches:
    clock: Clock = field(default_factory=Clock)
    caches: dict[tuple[str, str], pc.Cache] = field(default_factory=dict)
    bills: list[Bill] = field(default_factory=list)

    def bill(self, rec: Any) -> pc.Billed | None:
        """Bill a recorded model request (None: not one); raises CacheRequestError as the provider refuses."""
        kind = _kind(rec)
        if kind is None or (body := rec.json_object()) is None:
            return None
        model = body.get("model") if isinstance(body.get("model"), str) else None
        if kind == "messages":
            profile = pc.profile_for("anthropic", model)
            request = messages_cache.cached_request(body, self.clock.now, estimate)
        else:
            profile = pc.profile_for("openai", model)
            request = openai_cache.cached_request(body, self.clock.now, estimate)
        credential = rec.headers.get("x-api-key") or rec.headers.get("authorization") or ""
        scope = (profile.name, credential)
        billed, self.caches[scope] = self.caches.get(scope, pc.Cache(profile)).bill(request)
        self.bills.append(Bill(rec.path, billed, profile))
        return billed


def _kind(rec: Any) -> str | None:
    if rec.method != "POST":
        return None
    if rec.path.endswith("/v1/messages"):
        return "messages"
    if rec.path.endswith("/chat/completions"):
        return "chat"
    if rec.path.endswith("/responses"):
        return "responses"
    return None


def refused(error: pc.CacheRequestError) -> Response:
    return JSONResponse({"type": "error", "error": {"type": "invalid_request_error", "message": str(error)}},
                        status_code=400)


# ------------------------------------------------------------------------------ the answer

def messages_usage(usage: dict, billed: pc.Billed) -> dict:
    return {**usage, "input_tokens": billed.uncached, "cache_read_input_tokens": billed.read,
            "cache_creation_input_tokens": billed.written,
            "cache_creation": {"ephemeral_5m_input_tokens": billed.write_5m,
                               "ephemeral_1h_input_tokens": billed.write_1h}}


def chat_usage(usage: dict, billed: pc.Billed) -> dict:
    completion = usage.get("completion_tokens", 0)
    return {**usage, "prompt_tokens": billed.total, "total_tokens": billed.total + completion,
            "prompt_tokens_details": {**(usage.get("prompt_tokens_details") or {}), "cached_tokens": billed.read}}


def responses_usage(usage: dict, billed: pc.Billed) -> dict:
    output = usage.get("output_tokens", 0)
    return {**usage, "input_tokens": billed.total, "total_tokens": billed.total + output,
            "input_tokens_details": {**(usage.get("input_tokens_details") or {}), "cached_tokens": billed.read}}


def _patched(obj: Any, kind: str, billed: pc.Billed) -> Any:
    """A JSON answer or one SSE event's data with its usage billed (others unchanged)."""
    if not isinstance(obj, dict):
        return obj
    if kind == "messages":
        if obj.get("type") == "message" and isinstance(obj.get("usage"), dict):
            return {**obj, "usage": messages_usage(obj["usage"], billed)}
        message = obj.get("message")
        if obj.get("type") == "message_start" and isinstance(message, dict) and isinstance(message.get("usage"), dict):
            return {**obj, "message": {**message, "usage": messages_usage(message["usage"], billed)}}
        return obj
    if kind == "chat":
        return {**obj, "usage": chat_usage(obj["usage"], billed)} if isinstance(obj.get("usage"), dict) else obj
    response = obj.get("response")
    if isinstance(response, dict) and isinstance(response.get("usage"), dict):  # response.completed and the like
        return {**obj, "response": {**response, "usage": responses_usage(response["usage"], billed)}}
    if obj.get("object") == "response" and isinstance(obj.get("usage"), dict):
        return {**obj, "usage": responses_usage(obj["usage"], billed)}
    return obj


def _event(chunk: bytes, kind: str, billed: pc.Billed) -> bytes:
    out = []
    for line in chunk.decode().split("\n"):
        if line.startswith("data: ") and line[6:].strip() not in ("", "[DONE]"):
            try:
                line = "data: " + json.dumps(_patched(json.loads(line[6:]), kind, billed))
            except ValueError:
                pass
        out.append(line)
    return "\n".join(out).encode()


async def billed_response(response: Response, rec: Any, billed: pc.Billed) -> Response:
    """`response` with its usage as billed (a 200 only: a refused request is billed nothing)."""
    kind = _kind(rec)
    if response.status_code != 200 or kind is None:
        return response
    if isinstance(response, StreamingResponse):
        chunks = [chunk if isinstance(chunk, bytes) else chunk.encode() async for chunk in response.body_iterator]
        return StreamingResponse(iter([_event(c, kind, billed) for c in chunks]), status_code=200,
                                 media_type=response.media_type)
    try:
        obj = json.loads(response.body)
    except ValueError:
        return response
    return JSONResponse(_patched(obj, kind, billed), status_code=response.status_code)
