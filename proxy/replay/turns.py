"""The requests a replay sends: a chat trace's turns, in the wire format replayed.

Turn k is the request the agent sent before its k-th assistant message. With format
"responses" (or "anthropic") the chat trace is first converted to the Responses API input items
(or the Anthropic Messages history) a client would send for it. Shared by the in-process replay
(`proxy.replay.runner`) and the one that sends the turns to a running proxy (`proxy.replay.target`);
`load_conversations` reads them from a JSONL file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from proxy.errors import Failure, Kind
from proxy.formats import messages as anthropic
from proxy.formats.messages import from_chat as anthropic_from_chat
from proxy.formats.responses import from_chat as _responses

FORMATS = ("chat", "responses", "anthropic")  # the wire format conversations are replayed in
ANTHROPIC_MAX_TOKENS = 4096  # `max_tokens` of a replayed Messages request (the API requires one)


def answer_positions(messages: list[Any]) -> list[int]:
    """Where the assistant messages the turns are replayed for stand (never the first message)."""
    return [k for k, m in enumerate(messages) if k > 0 and isinstance(m, dict) and m.get("role") == "assistant"]


def turns_of(messages: list[Any]) -> list[list[Any]]:
    return [messages[:k] for k in answer_positions(messages)]


def requests_of(conv: dict, format: str) -> tuple[list[list[Any]], Any]:
    """The requests replayed for a conversation, one per turn (`turns_of` its messages), and its
    tools, both in the wire format. Responses turns are slices of one conversion of the whole
    conversation, so consecutive turns share their items as chat turns share their messages."""
    requests = turns_of(conv["messages"])
    if format == "chat":
        return requests, conv.get("tools")
    convert = anthropic_from_chat if format == "anthropic" else None
    items, offsets = (convert or _responses).items_with_offsets(conv["messages"])
    tools = (convert or _responses).tools_from_chat(conv.get("tools"))
    return [items[: offsets[len(request)]] for request in requests], tools


def answers_of(conv: dict, format: str) -> tuple[list[Any], list[tuple[int, int]]]:
    """The whole conversation in the wire format, and where each turn's assistant answer stands in
    it (start, end): the request of turn k is history[:start] (`requests_of`)."""
    positions = answer_positions(conv["messages"])
    if format == "chat":
        return conv["messages"], [(k, k + 1) for k in positions]
    items, offsets = (anthropic_from_chat if format == "anthropic" else _responses).items_with_offsets(conv["messages"])
    return items, [(offsets[k], offsets[k + 1]) for k in positions]


def system_of(conv: dict, format: str) -> str | None:
    """An Anthropic request's `system` (the conversation's leading system messages); None in
    the other formats, whose system prompt is a history item."""
    return anthropic_from_chat.system_from_chat(conv["messages"]) if format == "anthropic" else None


def request_body(request: list[Any], *, format: str, model: str, tools: Any = None, system: str | None = None) -> dict:
    """The body a client sends for one turn (`requests_of`): chat `messages`, Responses `input`,
    or an Anthropic Messages request with `system` and `max_tokens`; the tools when there are any."""
    body: dict[str, Any] = {"model": model, ("input" if format == "responses" else "messages"): request}
    if format == "anthropic":
        head = {"system": system} if system else {}
        body = anthropic.MESSAGES.with_history({**head, **body, "max_tokens": ANTHROPIC_MAX_TOKENS}, request)
    if tools:
        body["tools"] = tools
    return body


class ReplayInputError(Failure, ValueError):
    """The conversations file cannot be replayed; the message names the file and line."""

    kind = Kind.BAD_REQUEST


def _kind(value: Any) -> str:
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        type(None): "null",
        int: "a number",
        float: "a number",
    }.get(type(value), type(value).__name__)


def load_conversations(path: Path) -> list[dict]:
    """One conversation per non-blank line: a JSON object with a "messages" list (optional "id", "tools")."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ReplayInputError(f"{path}: cannot read it ({exc})") from None
    conversations = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            conv = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ReplayInputError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(conv, dict):
            raise ReplayInputError(f'{where}: expected a JSON object with a "messages" list, got {_kind(conv)}')
        if "messages" not in conv:
            raise ReplayInputError(f'{where}: the object has no "messages" (expected a list of chat messages)')
        if not isinstance(conv["messages"], list):
            raise ReplayInputError(f'{where}: "messages" is {_kind(conv["messages"])}, expected a list')
        if conv.get("tools") is not None and not isinstance(conv["tools"], list):
            raise ReplayInputError(f'{where}: "tools" is {_kind(conv["tools"])}, expected a list')
        conversations.append(conv if "id" in conv else {**conv, "id": f"line-{number}"})
    if not conversations:
        raise ReplayInputError(f"{path}: no conversations in it (expected one JSON object per line)")
    return conversations
