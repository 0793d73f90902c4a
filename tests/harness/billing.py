"""The fake upstream's prompt cache: usage reported as a provider bills it, on a clock the test holds.

`FakeUpstream.caches = ProviderCaches()` turns it on (off by default: the fixed usage the other
tests read stays). Every model request (chat completions, Responses, Anthropic Messages, the
proxy's summary calls included) is then billed by `proxy.core.prompt_cache` — Anthropic's
profile for Messages (caching only where the request asks: `cache_control`), OpenAI's for the
others (automatic) — with one cache per credential, and the answer's usage says so:
`cache_read_input_tokens` / `cache_creation_input_tokens` (and `cache_creation`'s 5-minute /
1-hour split) with `input_tokens` the uncached rest on Messages; `prompt_tokens` with
`prompt_tokens_details.cached_tokens` on chat, `input_tokens` with
`input_tokens_details.cached_tokens` on Responses; streamed or not. A request Anthropic would
refuse (5 breakpoints) gets its 400. Tokens are estimated (a quarter of each block's JSON).

Each `Bill` keeps its request and the output tokens its answer reported (the handler's), so a
test sums what the upstream billed (`tokens`) and compares it with what the proxy measured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

from proxy.core import prompt_cache as pc
from proxy.formats import messages as messages_cache
from proxy.formats import prompt_cache as openai_cache


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
    rec: Any = None  # the request billed (`tests.harness.servers.Recorded`)
    output: int | None = None  # the output tokens its answer reported (None: no usage, or not answered yet)

    @property
    def credential(self) -> str:
        return (self.rec.headers.get("x-api-key") or self.rec.headers.get("authorization") or "") if self.rec else ""

    def tokens(self) -> dict[str, int]:
        """As the proxy's statistics split a bill (`totals.bill.tokens`, without `input`)."""
        return {
            "uncached": self.billed.uncached,
            "cache_read": self.billed.read,
            "cache_write_5m": self.billed.write_5m,
            "cache_write_1h": self.billed.write_1h,
            "output": self.output or 0,
        }


def tokens(bills: list[Bill]) -> dict[str, int]:
    """The parts of some bills, summed."""
    out = dict.fromkeys(("uncached", "cache_read", "cache_write_5m", "cache_write_1h", "output"), 0)
    for bill in bills:
        for part, n in bill.tokens().items():
            out[part] += n
    return out


@dataclass
class ProviderCaches:
    clock: Clock = field(default_factory=Clock)
    caches: dict[tuple[str, str], pc.Cache] = field(default_factory=dict)
    bills: list[Bill] = field(default_factory=list)

    def bill(self, rec: Any) -> Bill | None:
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
        bill = Bill(rec.path, billed, profile, rec)
        self.bills.append(bill)
        return bill

    def of(self, credential: str) -> list[Bill]:
        """The bills of one credential (its key as sent: `x-api-key`, or `Bearer …`)."""
        return [b for b in self.bills if b.credential in (credential, f"Bearer {credential}")]


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
    return JSONResponse(
        {"type": "error", "error": {"type": "invalid_request_error", "message": str(error)}}, status_code=400
    )


# ------------------------------------------------------------------------------ the answer


def messages_usage(usage: dict, billed: pc.Billed) -> dict:
    return {
        **usage,
        "input_tokens": billed.uncached,
        "cache_read_input_tokens": billed.read,
        "cache_creation_input_tokens": billed.written,
        "cache_creation": {"ephemeral_5m_input_tokens": billed.write_5m, "ephemeral_1h_input_tokens": billed.write_1h},
    }


def chat_usage(usage: dict, billed: pc.Billed) -> dict:
    completion = usage.get("completion_tokens", 0)
    return {
        **usage,
        "prompt_tokens": billed.total,
        "total_tokens": billed.total + completion,
        "prompt_tokens_details": {**(usage.get("prompt_tokens_details") or {}), "cached_tokens": billed.read},
    }


def responses_usage(usage: dict, billed: pc.Billed) -> dict:
    output = usage.get("output_tokens", 0)
    return {
        **usage,
        "input_tokens": billed.total,
        "total_tokens": billed.total + output,
        "input_tokens_details": {**(usage.get("input_tokens_details") or {}), "cached_tokens": billed.read},
    }


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


def _output(obj: Any, kind: str) -> int | None:
    """The output tokens an answer or one SSE event's data reports (None: it reports none)."""
    if not isinstance(obj, dict):
        return None
    if kind == "messages":
        usage = (
            obj.get("usage")
            if obj.get("type") in ("message", "message_delta")
            else ((obj.get("message") or {}).get("usage") if obj.get("type") == "message_start" else None)
        )
        return usage.get("output_tokens") if isinstance(usage, dict) else None
    if kind == "chat":
        return obj["usage"].get("completion_tokens") if isinstance(obj.get("usage"), dict) else None
    response = obj.get("response") if isinstance(obj.get("response"), dict) else obj
    usage = response.get("usage")
    return usage.get("output_tokens") if isinstance(usage, dict) else None


def _event(chunk: bytes, kind: str, bill: Bill) -> bytes:
    out = []
    for line in chunk.decode().split("\n"):
        if line.startswith("data: ") and line[6:].strip() not in ("", "[DONE]"):
            try:
                obj = json.loads(line[6:])
            except ValueError:
                pass
            else:
                line = "data: " + json.dumps(_patched(obj, kind, bill.billed))
                bill.output = output if (output := _output(obj, kind)) is not None else bill.output  # the last one
        out.append(line)
    return "\n".join(out).encode()


async def billed_response(response: Response, rec: Any, bill: Bill) -> Response:
    """`response` with its usage as billed (a 200 only: a refused request is billed nothing);
    the output it reports kept in `bill`."""
    kind = _kind(rec)
    if response.status_code != 200 or kind is None:
        return response
    if isinstance(response, StreamingResponse):
        chunks = [chunk if isinstance(chunk, bytes) else chunk.encode() async for chunk in response.body_iterator]
        return StreamingResponse(
            iter([_event(c, kind, bill) for c in chunks]), status_code=200, media_type=response.media_type
        )
    try:
        obj = json.loads(response.body)
    except ValueError:
        return response
    bill.output = _output(obj, kind)
    return JSONResponse(_patched(obj, kind, bill.billed), status_code=response.status_code)
