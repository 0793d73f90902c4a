"""Chat Completions messages as the Responses API input items a client would send for them.

Used by `replay --format responses` to run the chat traces through the Responses view. Pure and
deterministic: the same messages always give the same items, and the items of a prefix of the
messages are a prefix of the items (`items_from_chat(m[:k]) == items_from_chat(m)[:n]`), so
turn k of a replayed conversation is a prefix of turn k+1 exactly as in chat.

The shapes are those of the Codex CLI, which sends the whole history as typed items:

- system / developer → `{"type": "message", "role": ..., "content": [input_text parts]}` (the
  first input item; the core never compresses leading system items);
- user → a message with `input_text` parts (an `image_url` part becomes `input_image`);
- assistant → a message with `output_text` parts (a `refusal` becomes a refusal part), left out
  when it has no text but makes calls; then one `function_call` item per tool call
  `{"type", "call_id", "name", "arguments"}` (a `custom` tool call: `custom_tool_call` with
  `input`);
- tool → `{"type": "function_call_output", "call_id", "output"}` (text parts joined into a string);
- anything else (a legacy `function` message, a non-object) → kept as it is;
- tool schemas (`tools_from_chat`) → flat Responses function tools.

Chat's `name` on a message has no Responses counterpart and is dropped.
"""

from __future__ import annotations

from typing import Any

from proxy.core.jsonio import array_or, object_or

_INPUT_ROLES = frozenset({"system", "developer", "user"})


def _part(part: Any, text_type: str) -> Any:
    """One chat content part as a Responses content part."""
    if not isinstance(part, dict):
        return part
    kind = part.get("type")
    if kind == "text" and isinstance(part.get("text"), str):
        return {"type": text_type, "text": part["text"]}
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return {"type": "refusal", "refusal": part["refusal"]}
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        detail = image.get("detail") if isinstance(image, dict) else None
        return {"type": "input_image", "image_url": url, "detail": detail or "auto"}
    if kind == "file" and isinstance(part.get("file"), dict):
        return {"type": "input_file", **part["file"]}
    return part


def _parts(content: Any, text_type: str) -> list[Any]:
    """A chat content (a string, a list of parts, or None) as a list of Responses parts."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": text_type, "text": content}]
    if isinstance(content, list):
        return [_part(p, text_type) for p in content]
    return [{"type": text_type, "text": str(content)}]


def _output(content: Any) -> Any:
    """A tool message's content as a function_call_output's `output`: a string stays a string,
    text-only parts are joined into one, other parts become input parts."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):
        if all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
            return "\n".join(p["text"] for p in content)
        return _parts(content, "input_text")
    return str(content)


def _call(call: Any) -> Any:
    """One of an assistant message's `tool_calls` as a call item."""
    if not isinstance(call, dict):
        return call
    if call.get("type") == "custom" and isinstance(call.get("custom"), dict):
        custom = call["custom"]
        return {
            "type": "custom_tool_call",
            "call_id": call.get("id"),
            "name": custom.get("name"),
            "input": custom.get("input", ""),
        }
    function = object_or(call.get("function"), {})
    return {
        "type": "function_call",
        "call_id": call.get("id"),
        "name": function.get("name"),
        "arguments": function.get("arguments", ""),
    }


def items_from_message(message: Any) -> list[Any]:
    """The Responses input items one chat message becomes (one, or an assistant's text plus
    one item per tool call)."""
    if not isinstance(message, dict):
        return [message]
    role = message.get("role")
    if role in _INPUT_ROLES:
        return [{"type": "message", "role": role, "content": _parts(message.get("content"), "input_text")}]
    if role == "tool":
        return [
            {
                "type": "function_call_output",
                "call_id": message.get("tool_call_id"),
                "output": _output(message.get("content")),
            }
        ]
    if role == "assistant":
        parts = _parts(message.get("content"), "output_text")
        if isinstance(message.get("refusal"), str) and message["refusal"]:
            parts.append({"type": "refusal", "refusal": message["refusal"]})
        calls = array_or(message.get("tool_calls"), [])
        text = [p for p in parts if not (isinstance(p, dict) and p.get("type") == "output_text" and not p["text"])]
        items: list[Any] = []
        if text or not calls:  # an assistant message with nothing but calls is just its calls
            items.append({"type": "message", "role": "assistant", "content": parts})
        items += [_call(c) for c in calls]
        return items
    return [message]


def items_from_chat(messages: list[Any]) -> list[Any]:
    """The Responses input items of a chat history, in order."""
    return [item for message in messages for item in items_from_message(message)]


def items_with_offsets(messages: list[Any]) -> tuple[list[Any], list[int]]:
    """(the items of `messages`, offsets) where items[:offsets[k]] are the items of messages[:k]
    (len(messages) + 1 offsets): each turn of a replay is a slice, the items shared between turns."""
    items: list[Any] = []
    offsets = [0]
    for message in messages:
        items += items_from_message(message)
        offsets.append(len(items))
    return items, offsets


def tools_from_chat(tools: Any) -> Any:
    """Chat tool schemas (`{"type": "function", "function": {...}}`) as Responses function tools
    (`{"type": "function", "name", "description", "parameters", ...}`, flat); others kept."""
    if not isinstance(tools, list):
        return tools
    out = []
    for tool in tools:
        if isinstance(tool, dict) and tool.get("type") == "function" and isinstance(tool.get("function"), dict):
            out.append({"type": "function", **tool["function"]})
        else:
            out.append(tool)
    return out
