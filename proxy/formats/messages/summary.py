"""A summary asked for the way a Messages conversation is sent (`--summary-request prefix`).

The request is the turn's own, so Anthropic's prompt cache (tools → system → messages, each
level valid only while everything before it is unchanged) serves it: the client's body, its
`system`, the tools the turn carried (the client's, then the injected ones as the rounds add
them), the messages a turn forwarded first exactly as it forwarded them (`with_history` of the
same items), then one user message of one text block asking for the snapshot (consecutive user
messages are allowed: the API joins them).

What changes, and why:

- `stream` is dropped, and `stop_sequences` and a structured output format (`output_format`,
  `output_config.format`), which would shape or cut the snapshot;
- `max_tokens` (required) is SUMMARY_MAX_TOKENS, an output every Claude model accepts and room
  for a snapshot; with extended thinking on, the client's own `max_tokens` (valid with its
  thinking budget, the turn was accepted with it), else the budget plus SUMMARY_MAX_TOKENS;
- `model` is the summary model.

Kept as the turns send them, because changing them invalidates the cached messages: `thinking`
and `tool_choice`. The instruction says not to call a tool; only a `tool_choice` that forces a
tool (`any`, `tool`) is replaced by `{"type": "none"}` (a snapshot could not come otherwise).
An answer that calls a tool anyway has no snapshot: the summariser refuses it, and the next
turn asks again.

Should the forwarded prefix end with an assistant message whose `tool_use` blocks have no result
(the core never cuts between a call and its result, so only a client history that was invalid
already), the instruction message first answers them with `tool_result` blocks marked
`is_error` and without content, so the request stays valid and adds no text of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.core.jsonio import JsonObject, object_or
from proxy.formats.messages.items import block_type, is_tool_use
from proxy.formats.messages.request import inject_tools, messages_of

SUMMARY_MAX_TOKENS = 4096
DROPPED = frozenset({"stream", "stop_sequences", "output_format", "max_tokens"})
_FORCING = frozenset({"any", "tool"})  # tool_choice types that make the model call a tool


def instruction_message(text: str) -> JsonObject:
    """The user message a summary request ends with."""
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def _thinking_on(body: JsonObject) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") not in (None, "disabled")


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def summary_max_tokens(body: JsonObject) -> int:
    """`max_tokens` of the summary request (see the module docstring)."""
    if not _thinking_on(body):
        return SUMMARY_MAX_TOKENS
    budget = _count(body["thinking"].get("budget_tokens"))
    client = _count(body.get("max_tokens"))
    return client if client > budget else budget + SUMMARY_MAX_TOKENS


def _unanswered(messages: list[Any]) -> list[str]:
    """The tool_use ids of a last assistant message (no message after it can answer them)."""
    last = messages[-1] if messages else None
    if not isinstance(last, dict) or last.get("role") != "assistant" or not isinstance(last.get("content"), list):
        return []
    return [b["id"] for b in last["content"] if is_tool_use(b) and isinstance(b.get("id"), str)]


def summary_request(
    body: JsonObject, prefix: list[Any], instruction: str, *, tools: Sequence[JsonObject], model: str
) -> tuple[str, JsonObject]:
    messages = messages_of(prefix)  # the prefix alone: the instruction is never merged into it
    ask = instruction_message(instruction)
    dangling = _unanswered(messages)
    if dangling:
        ask = {
            "role": "user",
            "content": [
                *({"type": "tool_result", "tool_use_id": call_id, "is_error": True} for call_id in dangling),
                *ask["content"],
            ],
        }
    out = {k: v for k, v in {**body, "messages": [*messages, ask]}.items() if k not in DROPPED}
    if tools:
        out = inject_tools(out, tools)
    choice = out.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in _FORCING:
        out["tool_choice"] = {"type": "none"}
    config = out.get("output_config")
    if isinstance(config, dict) and "format" in config:  # effort stays: the turns send it
        out["output_config"] = {k: v for k, v in config.items() if k != "format"}
    out["model"] = model
    out["max_tokens"] = summary_max_tokens(body)
    return "messages", out


def summary_answer(answer: Any) -> tuple[str, int, int]:
    """The text of the answer's text blocks, and its usage: input tokens are everything the
    request sent (`input_tokens` + `cache_read_input_tokens` + `cache_creation_input_tokens`:
    Anthropic counts the cached part apart), output tokens `output_tokens`."""
    if not isinstance(answer, dict) or not isinstance(answer.get("content"), list):
        raise ValueError("no content list")
    text = "".join(b["text"] for b in answer["content"] if block_type(b) == "text" and isinstance(b.get("text"), str))
    usage = object_or(answer.get("usage"), {})
    sent = sum(_count(usage.get(k)) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
    return text, sent, _count(usage.get("output_tokens"))
