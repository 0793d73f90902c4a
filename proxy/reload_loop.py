"""The reload loop: run the model's calls to the injected tools and query upstream again.

The client sees one ordinary completion: injected tool calls never reach it, `usage` is summed
over every round, and a stream continues across rounds as one stream (one id, one model, one
final finish_reason, one [DONE]).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from proxy import jsonio, sse
from proxy.errors import ProxyError, error_body
from proxy.markers import INJECTED_TOOLS
from proxy.reload_tools import ReloadTools

# send(messages, with_injected_tools) → the upstream response (headers received, body unread)
SendRound = Callable[[list[Any], bool], Awaitable[httpx.Response]]


def add_usage(total: dict | None, usage: dict | None) -> dict | None:
    """Sum two usage objects field by field (nested details included)."""
    if not usage:
        return total
    if not total:
        return json.loads(json.dumps(usage))
    out = dict(total)
    for k, v in usage.items():
        if isinstance(v, bool) or v is None:
            out.setdefault(k, v)
        elif isinstance(v, (int, float)):
            out[k] = (out.get(k) or 0) + v
        elif isinstance(v, dict):
            out[k] = add_usage(out.get(k) if isinstance(out.get(k), dict) else None, v)
    return out


def is_injected(call: dict) -> bool:
    return (call.get("function") or {}).get("name") in INJECTED_TOOLS


async def run_calls(tools: ReloadTools, calls: list[dict]) -> list[dict]:
    """Tool messages answering the injected calls."""
    results = []
    for call in calls:
        function = call.get("function") or {}
        content = await tools.run(function.get("name", ""), function.get("arguments", ""))
        results.append({"role": "tool", "tool_call_id": call.get("id"), "content": content})
    return results


def strip_injected(completion: dict) -> None:
    """Remove injected tool calls from every choice of a final (non-stream) completion."""
    for choice in completion.get("choices") or ():
        message = choice.get("message") or {}
        calls = message.get("tool_calls")
        if not calls:
            continue
        kept = [c for c in calls if not is_injected(c)]
        if kept:
            message["tool_calls"] = kept
        else:
            message.pop("tool_calls", None)
            if choice.get("finish_reason") == "tool_calls":
                choice["finish_reason"] = "stop"


@dataclass
class LoopResult:
    status: int
    body: bytes
    response: httpx.Response  # the last upstream response (for its headers)
    rounds: int


async def complete(messages: list[Any], send: SendRound, tools: ReloadTools, max_rounds: int) -> LoopResult:
    """Non-streaming: loop while the model calls only injected tools, at most `max_rounds` times."""
    messages = list(messages)
    usage: dict | None = None
    round_ = 0
    while True:
        response = await send(messages, round_ < max_rounds)
        raw = await response.aread()
        await response.aclose()
        if response.status_code != 200:
            return LoopResult(response.status_code, raw, response, round_)
        completion = jsonio.loads(raw)
        usage = add_usage(usage, completion.get("usage"))
        choices = completion.get("choices") or [{}]
        message = choices[0].get("message") or {}
        calls = message.get("tool_calls") or []
        if calls and round_ < max_rounds and all(is_injected(c) for c in calls):
            messages.append({k: v for k, v in message.items() if k in ("role", "content", "tool_calls")})
            messages.extend(await run_calls(tools, calls))
            round_ += 1
            continue
        strip_injected(completion)
        if usage is not None:
            completion["usage"] = usage
        body = jsonio.dumps(completion)
        return LoopResult(200, body, response, round_)


@dataclass
class _Round:
    """What one streamed round announced, per (choice, tool-call index)."""

    injected: dict[int, dict] = field(default_factory=dict)  # tool index → accumulated call
    client_index: dict[int, int] = field(default_factory=dict)  # upstream index → client index
    content: str = ""

    def injected_only(self) -> bool:
        return bool(self.injected) and not self.client_index


def _filter_tool_deltas(delta: dict, state: _Round) -> None:
    kept = []
    for tc in delta.get("tool_calls") or ():
        index = tc.get("index", 0)
        if index not in state.injected and index not in state.client_index:
            name = (tc.get("function") or {}).get("name")
            if name in INJECTED_TOOLS:
                state.injected[index] = {"id": tc.get("id"), "type": "function",
                                         "function": {"name": name, "arguments": ""}}
            else:
                state.client_index[index] = len(state.client_index)
        if index in state.injected:
            state.injected[index]["function"]["arguments"] += (tc.get("function") or {}).get("arguments") or ""
        else:
            kept.append({**tc, "index": state.client_index[index]})
    if "tool_calls" in delta:
        if kept:
            delta["tool_calls"] = kept
        else:
            del delta["tool_calls"]


async def stream(
    first: httpx.Response, messages: list[Any], send: SendRound, tools: ReloadTools, max_rounds: int
) -> AsyncIterator[bytes]:
    """Streaming: relay content deltas as they come, hide injected calls, chain the rounds."""
    messages = list(messages)
    response = first
    identity: dict[str, Any] = {}
    usage: dict | None = None
    usage_template: dict | None = None
    round_ = 0
    try:
        while True:
            state = _Round()
            last_round = round_ >= max_rounds
            async for data in sse.iter_data(response.aiter_bytes()):
                if data == sse.DONE:
                    break
                chunk = jsonio.loads(data)
                if "error" in chunk and "choices" not in chunk:
                    yield sse.encode(chunk)
                    continue
                if not identity:
                    identity = {k: chunk[k] for k in ("id", "created", "model") if k in chunk}
                else:
                    chunk.update(identity)
                if chunk.get("usage") and not chunk.get("choices"):
                    usage = add_usage(usage, chunk["usage"])
                    usage_template = chunk
                    continue
                keep = False
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") or {}
                    if round_ > 0:
                        delta.pop("role", None)
                    if choice.get("index", 0) == 0:
                        state.content += delta.get("content") or ""
                        _filter_tool_deltas(delta, state)
                    finish = choice.get("finish_reason")
                    if finish == "tool_calls" and state.injected_only():
                        if not last_round:
                            choice["finish_reason"] = finish = None
                        else:
                            choice["finish_reason"] = finish = "stop"
                    keep = keep or bool(delta) or finish is not None or choice.get("logprobs") is not None
                if keep or not chunk.get("choices"):
                    yield sse.encode(chunk)
            await response.aclose()
            if state.injected_only() and not last_round:
                calls = list(state.injected.values())
                messages.append({"role": "assistant", "content": state.content or None, "tool_calls": calls})
                messages.extend(await run_calls(tools, calls))
                round_ += 1
                try:
                    response = await send(messages, round_ < max_rounds)
                except ProxyError as exc:
                    yield sse.encode(exc.body())
                    break
                if response.status_code != 200:
                    raw = await response.aread()
                    await response.aclose()
                    yield sse.encode(_error_payload(raw, response.status_code))
                    break
                continue
            if usage_template is not None:
                yield sse.encode({**usage_template, **identity, "usage": usage})
            break
        yield sse.DONE_EVENT
    finally:
        await response.aclose()


def _error_payload(raw: bytes, status: int) -> dict:
    try:
        payload = jsonio.loads(raw)
        if isinstance(payload, dict) and "error" in payload:
            return payload
    except ValueError:
        pass
    return error_body(f"Upstream answered {status} during a reload round.", "server_error", "upstream_error")
