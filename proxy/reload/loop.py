"""The reload loop: run the model's calls to the injected tools and query upstream again.

The client sees one ordinary completion: injected tool calls never reach it, `usage` is summed
over every round, and a stream continues across rounds as one stream (one id, one model, one
final finish_reason, one [DONE]).

Several choices (`n` > 1): choice 0 drives the loop, as the only one whose tool calls are run.
Choices 1… are the first round's answers, independent samples of the client's own prompt: in
a stream they are relayed as they come in the first round and left out of later rounds; in a
non-streamed completion they are taken from the first round too. In every choice, calls to
the injected tools are removed, and a `tool_calls` finish_reason left with no call becomes
`stop` (choice 0: once the loop ends).
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from proxy.core import jsonio

from proxy.http import observe

from proxy.upstream import sse
from proxy.upstream.errors import stream_broke
from proxy.errors import ProxyError, error_body
from proxy.core.markers import INJECTED_TOOLS
from proxy.reload.tools import ReloadTools

log = logging.getLogger("proxy.reload.loop")

# send(messages, with_injected_tools) → the upstream response (headers received, body unread)
SendRound = Callable[[list[Any], bool], Awaitable[httpx.Response]]


@dataclass
class Budget:
    """How many more reload rounds a request may run: bounded by count and by total time."""

    max_rounds: int
    seconds: float
    started: float = field(default_factory=time.monotonic)

    def more(self, rounds_done: int) -> bool:
        """May the next upstream call still offer the injected tools?"""
        return rounds_done < self.max_rounds and time.monotonic() < self.deadline

    @property
    def deadline(self) -> float:
        """When the budget ends (time.monotonic): a tool call may not run past it either."""
        return self.started + self.seconds


def add_usage(total: dict | None, usage: dict | None) -> dict | None:
    """Sum two usage objects field by field (nested details included)."""
    if not usage:
        return total
    if not total:
        return copy.deepcopy(usage)
    out = dict(total)
    for k, v in usage.items():
        if isinstance(v, bool) or v is None:
            out.setdefault(k, v)
        elif isinstance(v, (int, float)):
            out[k] = (out.get(k) or 0) + v
        elif isinstance(v, dict):
            out[k] = add_usage(out.get(k) if isinstance(out.get(k), dict) else None, v)
    return out


def _count_round() -> None:
    if (rec := observe.current.get()) is not None:
        rec.reload_rounds += 1


def is_injected(call: Any) -> bool:
    return isinstance(call, dict) and (call.get("function") or {}).get("name") in INJECTED_TOOLS


async def run_calls(tools: ReloadTools, calls: list[dict], deadline: float) -> list[dict]:
    """Tool messages answering the injected calls."""
    results = []
    for call in calls:
        function = call.get("function") or {}
        content = await tools.run(function.get("name", ""), function.get("arguments", ""), deadline)
        results.append({"role": "tool", "tool_call_id": call.get("id"), "content": content})
    return results


def strip_injected(completion: dict) -> None:
    """Remove injected tool calls from every choice of a final (non-stream) completion."""
    for choice in completion.get("choices") or ():
        message = choice.get("message") if isinstance(choice, dict) else None
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        if not calls or not isinstance(calls, list):
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


async def complete(messages: list[Any], send: SendRound, tools: ReloadTools, budget: Budget, *,
                   extra_usage: dict | None = None) -> LoopResult:
    """Non-streaming: loop while the model calls only injected tools, within the budget.

    `extra_usage` (the proxy's own summarisation calls) is added to the usage the upstream reports.
    A 200 answer that is not a JSON object raises ProxyError 502 (`upstream_error`).
    """
    messages = list(messages)
    usage: dict | None = None
    reported = False
    others: list[Any] | None = None  # choices 1…, kept from the first round
    round_ = 0
    while True:
        offered = budget.more(round_)
        response = await send(messages, offered)
        raw = await response.aread()
        await response.aclose()
        if response.status_code != 200:
            return LoopResult(response.status_code, raw, response)
        completion = _completion(raw, response)
        if isinstance(completion.get("usage"), dict):
            usage, reported = add_usage(usage or add_usage(None, extra_usage), completion["usage"]), True
        choices = completion.get("choices") if isinstance(completion.get("choices"), list) else []
        if others is None:
            others = choices[1:]
        first = choices[0] if choices and isinstance(choices[0], dict) else {}
        message = first.get("message") if isinstance(first.get("message"), dict) else {}
        calls = message.get("tool_calls") or []
        if calls and offered and isinstance(calls, list) and all(is_injected(c) for c in calls):
            messages.append({k: v for k, v in message.items() if k in ("role", "content", "tool_calls")})
            messages.extend(await run_calls(tools, calls, budget.deadline))
            round_ += 1
            _count_round()
            continue
        if round_ and choices:
            completion["choices"] = [choices[0], *others]
        strip_injected(completion)
        if reported:
            completion["usage"] = usage
        body = jsonio.dumps(completion)
        return LoopResult(200, body, response)


def not_a_completion(detail: str, *, stream: bool = False) -> ProxyError:
    """The 502 for a 200 answer the loop cannot read: an HTML page from a gateway, a JSON body
    where a stream was asked for, a truncated body…"""
    what = "chat completion stream" if stream else "chat completion"
    return ProxyError(502, f"The upstream answered 200 with a body that is not a {what} ({detail}).",
                      type_="server_error", code="upstream_error")


def _describe(response: httpx.Response, size: int | None = None) -> str:
    """What a body was, without its content: its media type (and size)."""
    kind = response.headers.get("content-type") or "no content-type"
    return kind if size is None else f"{kind}, {size} bytes"


def _completion(raw: bytes, response: httpx.Response) -> dict:
    """A 200 answer read as a chat completion (a JSON object), else ProxyError 502."""
    try:
        completion = jsonio.loads(raw)
    except ValueError:
        completion = None
    if not isinstance(completion, dict):
        raise not_a_completion(_describe(response, len(raw)))
    return completion


@dataclass
class _Choice:
    """What one choice announced in one streamed round."""

    injected: dict[int, dict] = field(default_factory=dict)  # tool index → accumulated call
    client_index: dict[int, int] = field(default_factory=dict)  # upstream index → client index
    content: str = ""

    def injected_only(self) -> bool:
        return bool(self.injected) and not self.client_index


@dataclass
class _Round:
    choices: dict[int, _Choice] = field(default_factory=dict)  # choice index → its state

    def choice(self, index: int) -> _Choice:
        return self.choices.setdefault(index, _Choice())

    def continues(self, offered: bool) -> bool:
        """Does the loop run another round? Only choice 0's calls are run."""
        return offered and 0 in self.choices and self.choices[0].injected_only()


def _filter_tool_deltas(delta: dict, state: _Choice) -> None:
    kept = []
    for tc in delta.get("tool_calls") or ():
        if not isinstance(tc, dict):
            continue
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


class _Rounds:
    """The state of a streamed completion across its rounds."""

    def __init__(self, first: httpx.Response, messages: list[Any], send: SendRound, tools: ReloadTools,
                 budget: Budget, extra_usage: dict | None) -> None:
        self.response, self.messages, self.send, self.tools, self.budget = first, list(messages), send, tools, budget
        self.identity: dict[str, Any] = {}
        self.usage: dict | None = add_usage(None, extra_usage)  # sent only if the upstream reports usage
        self.usage_template: dict | None = None

    def _rewrite(self, chunk: dict, state: _Round, round_: int, last_round: bool) -> bool:
        """Adapt one chunk for the client in place; False when nothing is left to send."""
        if not self.identity:
            self.identity = {k: chunk[k] for k in ("id", "created", "model") if k in chunk}
        else:
            chunk.update(self.identity)
        choices = chunk.get("choices")
        if not choices:
            return True
        kept = []
        for choice in choices:
            index = choice.get("index", 0)
            if round_ > 0 and index != 0:
                continue  # choices 1… were answered by the first round
            delta = choice.get("delta") or {}
            if round_ > 0:
                delta.pop("role", None)
            state_ = state.choice(index)
            if index == 0:
                state_.content += delta.get("content") or ""
            _filter_tool_deltas(delta, state_)
            finish = choice.get("finish_reason")
            if finish == "tool_calls" and state_.injected_only():
                # choice 0 goes on in the next round unless this is the last; the others end here
                choice["finish_reason"] = finish = None if index == 0 and not last_round else "stop"
            if delta or finish is not None or choice.get("logprobs") is not None:
                kept.append(choice)
        chunk["choices"] = kept
        return bool(kept) or chunk.get("usage") is not None

    async def events(self, offered: bool) -> AsyncIterator[bytes]:
        round_ = 0
        while True:
            state = _Round()
            chunks = 0
            async for data in sse.iter_data(self.response.aiter_bytes()):
                if data == sse.DONE:
                    break
                try:
                    chunk = jsonio.loads(data)
                except ValueError:
                    chunk = None
                if not isinstance(chunk, dict):
                    yield sse.encode(not_a_completion(f"{_describe(self.response)}: an event that is not a JSON "
                                                      f"object", stream=True).body())
                    return
                chunks += 1
                if "error" in chunk and "choices" not in chunk:
                    yield sse.encode(chunk)
                elif chunk.get("usage") and not chunk.get("choices"):
                    self.usage = add_usage(self.usage, chunk["usage"])  # summed, sent once at the end
                    self.usage_template = chunk
                elif self._rewrite(chunk, state, round_, not offered):
                    yield sse.encode(chunk)
            await self.response.aclose()
            if not chunks:  # an HTML page, a JSON body, nothing at all: no chunk of a completion
                yield sse.encode(not_a_completion(f"{_describe(self.response)}: no chunk", stream=True).body())
                return
            if not state.continues(offered):
                break
            zero = state.choices[0]
            calls = list(zero.injected.values())
            self.messages.append({"role": "assistant", "content": zero.content or None, "tool_calls": calls})
            self.messages.extend(await run_calls(self.tools, calls, self.budget.deadline))
            round_ += 1
            _count_round()
            offered = self.budget.more(round_)
            try:
                self.response = await self.send(self.messages, offered)
            except ProxyError as exc:
                yield sse.encode(exc.body())
                return
            if self.response.status_code != 200:
                raw = await self.response.aread()
                yield sse.encode(_error_payload(raw, self.response.status_code))
                return
        if self.usage_template is not None:
            yield sse.encode({**self.usage_template, **self.identity, "usage": self.usage})


async def stream(
    first: httpx.Response,
    offered: bool,
    messages: list[Any],
    send: SendRound,
    tools: ReloadTools,
    budget: Budget,
    *,
    extra_usage: dict | None = None,
) -> AsyncIterator[bytes]:
    """Streaming: relay content deltas as they come, hide injected calls, chain the rounds.

    `offered`: whether the first response was asked for with the injected tools. Whatever goes
    wrong midway (the upstream breaks off or times out, sends something that is not a chunk or
    a 200 answer with no chunk at all, or a round fails in the proxy) ends the stream with an
    SSE error event and [DONE], never a cut connection.
    """
    rounds = _Rounds(first, messages, send, tools, budget, extra_usage)
    try:
        try:
            async for event in rounds.events(offered):
                yield event
        except (httpx.HTTPError, ValueError) as exc:
            yield sse.encode(stream_broke(exc))
        except Exception as exc:  # noqa: BLE001 - the stream must still end properly
            log.exception("streamed reload round failed")
            yield sse.encode(error_body(f"The proxy failed during a reload round ({type(exc).__name__}).",
                                        "server_error", "proxy_error"))
        yield sse.DONE_EVENT
    finally:
        await rounds.response.aclose()


def _error_payload(raw: bytes, status: int) -> dict:
    try:
        payload = jsonio.loads(raw)
        if isinstance(payload, dict) and "error" in payload:
            return payload
    except ValueError:
        pass
    return error_body(f"Upstream answered {status} during a reload round.", "server_error", "upstream_error")
