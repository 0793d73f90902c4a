"""What a replay simulates around the pipeline: the summariser, and the requests it receives.

- `fake_summarizer(delay_ms)`: a deterministic stand-in for the summarisation model (a snapshot
  built from its input), answering after `delay_ms` (an `asyncio.sleep`, so the event loop runs
  other work meanwhile, as while a real model thinks).
- `SummaryRecorder`: a transport wrapper that records every summary request (its history items
  and tools) for the turn that triggered it. The replayer names the turn with `recording(sink, k)`
  before the turn's pipeline runs; the name is a context variable, so a summary made by a task
  the pipeline starts is still attributed to that turn.
- `TurnScheduler`: the server's scheduler of background summaries, whose jobs (run in a context
  of their own) keep the turn that started them.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2

from proxy.core.texts import INJECTED_TOOLS, SUMMARY_INSTRUCTION
from proxy.formats import chat
from proxy.formats.messages import MESSAGES, instruction_message, message_answer
from proxy.formats.responses import ResponsesView, instruction_item, items_from_message
from proxy.offload.background import SummaryScheduler

Sink = list[
    tuple[int, dict[str, Any], str]
]  # (turn, body, URL path): the summary requests of one replayed conversation
_UNSET: Any = object()
_TURN: contextvars.ContextVar[tuple[Sink, int] | None] = contextvars.ContextVar("replay_turn", default=_UNSET)
_current: list[tuple[Sink, int] | None] = [None]  # for a task started outside any turn's context


def recording(sink: Sink | None, turn: int = 0) -> None:
    """Attribute the summary requests made from now on (in this task and those it starts) to
    `turn`, appended to `sink`; None: record nothing (e.g. the steady pass)."""
    value = None if sink is None else (sink, turn)
    _TURN.set(value)
    _current[0] = value


def _target() -> tuple[Sink, int] | None:
    target = _TURN.get()
    return _current[0] if target is _UNSET else target


def keep_turn(run: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    """`run`, attributing what it sends to the turn current now, whatever context it runs in."""
    target = _target()

    async def attributed() -> None:
        _TURN.set(target)
        await run()

    return attributed


class TurnScheduler(SummaryScheduler):
    """The server's scheduler of background summaries; each job records for the turn that started it."""

    def submit(self, key: str, run: Callable[[], Awaitable[None]], **kwargs: Any) -> bool:
        return super().submit(key, keep_turn(run), **kwargs)


def request_items(body: dict[str, Any], path: str = "") -> tuple[list[Any], Any]:
    """The history a summary request carries (chat `messages`, Anthropic `messages` as the
    Messages view's items when `path` is `…/messages`, or Responses `instructions` and `input`),
    and its tools."""
    if is_anthropic(path):
        return MESSAGES.history(body), body.get("tools")
    if "messages" in body:
        items = body["messages"] if isinstance(body["messages"], list) else []
    else:
        value = body.get("input")
        items = [{"role": "user", "content": value}] if isinstance(value, str) else list(value or [])
        if isinstance(body.get("instructions"), str):
            items = [*items_from_message({"role": "system", "content": body["instructions"]}), *items]
    return items, body.get("tools")


class SummaryRecorder(httpx2.AsyncBaseTransport):
    """Wraps the summariser's transport; records each request's body for the current turn."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self.inner = inner
        self.in_flight = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        target = _target()
        if target is not None:
            body = json.loads(await request.aread())
            target[0].append((target[1], body, request.url.path))
        self.in_flight += 1
        try:
            return await self.inner.handle_async_request(request)
        finally:
            self.in_flight -= 1

    async def idle(self, poll: float = 0.002) -> None:
        """Return once no summary request is under way (one the pipeline left running)."""
        while self.in_flight:
            await asyncio.sleep(poll)

    async def aclose(self) -> None:
        await self.inner.aclose()


def is_anthropic(path: str) -> bool:
    return path.rstrip("/").endswith("/messages")


def _transcript(body: dict[str, Any], path: str = "") -> str:
    """What the fake summarises: in the prefix shape (its last message or item is the instruction,
    exactly), the items before the instruction, rendered as the transcript shape renders them; in
    the transcript shape, the transcript (its last message, after the system prompt)."""
    items, _ = request_items(body, path)
    if items and items[-1] in (
        {"role": "user", "content": SUMMARY_INSTRUCTION},
        instruction_item(SUMMARY_INSTRUCTION),
        instruction_message(SUMMARY_INSTRUCTION),
    ):
        items = items[:-1]
    elif len(items) == 2 and isinstance(items[-1], dict) and isinstance(items[-1].get("content"), str):
        text: str = items[-1]["content"]
        return text
    view = MESSAGES.view if is_anthropic(path) else chat.VIEW if "messages" in body else ResponsesView(INJECTED_TOOLS)
    lines = [view.transcript(item) for item in items if view.role(item) != "system"]
    return "\n\n".join(f"{header}\n{text}".rstrip() for header, text in lines)


def fake_summarizer(delay_ms: float = 0) -> httpx2.MockTransport:
    """A deterministic stand-in for the summarisation model: a snapshot built from its input,
    answered after `delay_ms` (chat completions, or a Responses answer on .../responses)."""

    async def handler(request: httpx2.Request) -> httpx2.Response:
        if delay_ms:
            await asyncio.sleep(delay_ms / 1e3)
        transcript = _transcript(json.loads(request.content), request.url.path)
        lines = [line for line in transcript.splitlines() if line.strip()]
        errors = [line[:200] for line in lines if re.search(r"error|fail|exception", line, re.I)][:8]
        recent = [line[:200] for line in lines if line.startswith("[")][-6:]
        snapshot = (
            "<state_snapshot>\n<task_overview>" + " ".join(lines[:6])[:800] + "</task_overview>\n"
            "<current_state>" + "\n".join(recent) + "</current_state>\n"
            "<important_discoveries>" + "\n".join(errors) + "</important_discoveries>\n"
            "<next_steps>Continue from the current state.</next_steps>\n"
            "<context_to_preserve></context_to_preserve>\n</state_snapshot>"
        )
        tokens_in, tokens_out = len(transcript) // 4, len(snapshot) // 4
        if is_anthropic(request.url.path):
            return httpx2.Response(
                200, json=message_answer(snapshot, model="replay", input_tokens=tokens_in, output_tokens=tokens_out)
            )
        if request.url.path.rstrip("/").endswith("/responses"):
            return httpx2.Response(
                200,
                json={
                    "object": "response",
                    "status": "completed",
                    "output": [
                        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": snapshot}]}
                    ],
                    "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out},
                },
            )
        return httpx2.Response(
            200,
            json={
                "choices": [{"message": {"role": "assistant", "content": snapshot}}],
                "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out},
            },
        )

    return httpx2.MockTransport(handler)
