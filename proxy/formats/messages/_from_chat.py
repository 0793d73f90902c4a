"""Chat Completions traces as the Anthropic Messages requests a client would send for them, and
Anthropic messages back as chat messages.

Used by `replay --format anthropic` to run the chat traces through the Messages view. Pure and
deterministic: the same messages always give the same items, and the items of a prefix of the
messages are a prefix of the items (`items_with_offsets`), so turn k of a replayed conversation
is a prefix of turn k+1 exactly as in chat.

Chat → Anthropic (`items_with_offsets`, `messages_from_chat`, `system_from_chat`, `body_from_chat`):

- the leading system / developer messages → `system` (their texts joined by a blank line; not
  history items); a later one → a user message with its content (the API has no system turn);
- user → a user message: a string content stays a string; text parts → text blocks, an
  `image_url` part → an image block (a `data:` URL as base64, another as a URL source);
- assistant → its text (a refusal too) as a text block, then one `tool_use` block per tool
  call, `input` its arguments parsed; arguments that are not a JSON object are kept as text
  under `{"_raw": arguments}`, empty ones are `{}`; a custom tool call's free-form input is
  `{"input": text}`; with neither text nor calls, an empty string content;
- tool → a `tool_result` block (`tool_use_id`, `content`: a string stays a string, parts become
  blocks); consecutive tool messages make one user message, as an Anthropic client sends the
  results of parallel calls (split into parts in the items, see `proxy.formats.messages._items`);
- anything else (a legacy `function` message, a non-object) → kept as it is;
- tool schemas (`tools_from_chat`) → `{"name", "description", "input_schema"}`.

Anthropic → chat (`chat_from_message`, `chat_from_items`, `chat_from_answer`): text blocks
joined, `tool_use` blocks as `tool_calls` (arguments the JSON text of the input), each
`tool_result` as a `tool` message; `message_answer` makes the Anthropic answer of a given text
(what a fake upstream answers).
"""

from __future__ import annotations

import json
from typing import Any

from proxy.core.jsonio import JsonObject, array_or, object_or, string_or
from proxy.formats.messages._items import PART, block_type, blocks_of, input_text, text_blocks_text
from proxy.formats.messages._request import anthropic_tool, messages_of

_SYSTEM_ROLES = frozenset({"system", "developer"})
DEFAULT_MAX_TOKENS = 4096


def _text(content: Any) -> str:
    """A chat content's text (a string, or its text parts joined by newlines)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _block(part: Any) -> Any:
    """One chat content part as an Anthropic content block."""
    if not isinstance(part, dict):
        return part
    kind = part.get("type")
    if kind == "text" and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return {"type": "text", "text": part["refusal"]}
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
            media, _, data = url[5:].partition(";base64,")
            return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
        return {"type": "image", "source": {"type": "url", "url": url}}
    return part


def _content(content: Any) -> Any:
    """A chat content as an Anthropic one: a string stays a string, parts become blocks."""
    if isinstance(content, list):
        return [_block(p) for p in content]
    return content if isinstance(content, str) else ""


def _input(arguments: Any) -> JsonObject:
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str) or not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"_raw": arguments}


def _tool_use(call: Any) -> Any:
    if not isinstance(call, dict):
        return call
    if call.get("type") == "custom" and isinstance(call.get("custom"), dict):
        custom = call["custom"]
        return {
            "type": "tool_use",
            "id": call.get("id"),
            "name": custom.get("name"),
            "input": {"input": custom.get("input", "")},
        }
    function = object_or(call.get("function"), {})
    return {
        "type": "tool_use",
        "id": call.get("id"),
        "name": function.get("name"),
        "input": _input(function.get("arguments")),
    }


def _assistant(message: JsonObject) -> JsonObject:
    blocks: list[Any] = []
    text = _text(message.get("content"))
    if text:
        blocks.append({"type": "text", "text": text})
    if isinstance(message.get("refusal"), str) and message["refusal"]:
        blocks.append({"type": "text", "text": message["refusal"]})
    calls = array_or(message.get("tool_calls"), [])
    blocks += [_tool_use(c) for c in calls]
    return {"role": "assistant", "content": blocks or ""}


def _leading_system(messages: list[Any]) -> int:
    n = 0
    while n < len(messages) and isinstance(messages[n], dict) and messages[n].get("role") in _SYSTEM_ROLES:
        n += 1
    return n


def system_from_chat(messages: list[Any]) -> str | None:
    """The `system` of the leading system / developer messages (None: there is none)."""
    texts = [_text(m.get("content")) for m in messages[: _leading_system(messages)]]
    return "\n\n".join(texts) if texts else None


def items_with_offsets(messages: list[Any]) -> tuple[list[Any], list[int]]:
    """(the history items of `messages`, offsets) where items[:offsets[k]] are the items of
    messages[:k] (len(messages) + 1 offsets): each turn of a replay is a slice."""
    items: list[Any] = []
    offsets = [0]
    lead = _leading_system(messages)
    run = 0  # tool messages so far in the current run (one user message)
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if index < lead:
            pass
        elif role == "tool":
            result = {
                "type": "tool_result",
                "tool_use_id": message.get("tool_call_id"),
                "content": _content(message.get("content")),
            }
            items.append(
                {"role": "user", "content": [result], PART: run} if run else {"role": "user", "content": [result]}
            )
        elif role == "assistant":
            items.append(_assistant(message))
        elif role == "user" or role in _SYSTEM_ROLES:
            items.append({"role": "user", "content": _content(message.get("content"))})
        else:
            items.append(message)
        run = run + 1 if role == "tool" else 0
        offsets.append(len(items))
    return items, offsets


def items_from_chat(messages: list[Any]) -> list[Any]:
    """The history items of a chat history, in order."""
    return items_with_offsets(messages)[0]


def messages_from_chat(messages: list[Any]) -> list[Any]:
    """The Anthropic `messages` of a chat history (system messages left out: `system_from_chat`)."""
    return messages_of(items_from_chat(messages))


def tools_from_chat(tools: Any) -> Any:
    """Chat tool schemas (`{"type": "function", "function": {...}}`) as Anthropic client tools; others kept."""
    if not isinstance(tools, list):
        return tools
    return [
        anthropic_tool(t)
        if isinstance(t, dict)
        and t.get("type") == "function"
        and isinstance(t.get("function"), dict)
        and isinstance(t["function"].get("name"), str)
        else t
        for t in tools
    ]


def body_from_chat(
    messages: list[Any], *, model: str, tools: Any = None, max_tokens: int = DEFAULT_MAX_TOKENS
) -> JsonObject:
    """The Messages request body a client would send for a chat history."""
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens}
    system = system_from_chat(messages)
    if system is not None:
        body["system"] = system
    body["messages"] = messages_from_chat(messages)
    if tools:
        body["tools"] = tools_from_chat(tools)
    return body


# ---------------------------------------------------------------------------------------------
# Anthropic → chat


def _chat_part(block: Any) -> Any:
    kind = block_type(block)
    if kind == "text":
        return {"type": "text", "text": string_or(block.get("text"), "")}
    if kind == "image" and isinstance(block.get("source"), dict):
        source = block["source"]
        url = (
            f"data:{source.get('media_type')};base64,{source.get('data')}"
            if source.get("type") == "base64"
            else source.get("url")
        )
        return {"type": "image_url", "image_url": {"url": url}}
    return {"type": "text", "text": json.dumps(block, ensure_ascii=False)}


def _chat_content(content: Any) -> Any:
    if isinstance(content, str) or content is None:
        return content
    parts = [_chat_part(b) for b in content] if isinstance(content, list) else []
    if all(p.get("type") == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def chat_from_message(message: Any) -> list[Any]:
    """The chat messages one Anthropic message stands for: an assistant message with its
    `tool_calls`; a user message's tool results as `tool` messages, then its other blocks."""
    if not isinstance(message, dict):
        return [message]
    role = message.get("role")
    content = message.get("content")
    if role == "assistant":
        blocks = blocks_of(content)
        calls = [
            {
                "id": b.get("id"),
                "type": "function",
                "function": {"name": b.get("name"), "arguments": input_text(b.get("input"))},
            }
            for b in blocks
            if block_type(b) == "tool_use"
        ]
        out: dict[str, Any] = {"role": "assistant", "content": text_blocks_text(blocks)}
        if calls:
            out["tool_calls"] = calls
        return [out]
    if role == "user" and isinstance(content, list):
        results = [
            {"role": "tool", "tool_call_id": b.get("tool_use_id"), "content": _chat_content(b.get("content"))}
            for b in content
            if block_type(b) == "tool_result"
        ]
        rest = [b for b in content if block_type(b) != "tool_result"]
        return [*results, *([{"role": "user", "content": _chat_content(rest)}] if rest or not results else [])]
    return [{"role": role, "content": _chat_content(content)}]


def chat_from_items(items: list[Any]) -> list[Any]:
    """The chat messages of history items (parts regrouped, a summary item as a user message)."""
    return [m for message in messages_of(items) for m in chat_from_message(message)]


def chat_from_answer(answer: Any) -> JsonObject:
    """An Anthropic answer (a Messages API response) as the chat assistant message it stands for."""
    if not isinstance(answer, dict):
        raise ValueError("not a message")
    message: JsonObject = chat_from_message({"role": "assistant", "content": answer.get("content") or []})[0]
    return message


def message_answer(
    text: str, *, model: str, input_tokens: int = 0, output_tokens: int = 0, message_id: str = "msg_replay"
) -> JsonObject:
    """The Messages API response answering `text` (what a fake upstream sends)."""
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }
