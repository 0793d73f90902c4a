"""Anthropic Messages API history items, and how the core sees them (`MessagesView`).

The history is `messages`; `system` lies outside it and is never summarised (nor is a message
of role `system`, which Claude Code sends inside `messages`). A message's
`content` is a string or a list of blocks: `text`, `image`, `document`, `search_result`,
`tool_use` / `tool_result`, `thinking` (with its `signature`), `redacted_thinking`,
`server_tool_use` and the server tools' results (`web_search_tool_result`, …, any type ending
in `_tool_result`), and blocks of types this module does not know, which are kept verbatim.

One item is one message, except a user message holding several `tool_result` blocks: the
core's view sees at most one tool result per item, so that message is split into parts, a new
part at each `tool_result` block. A part is a tool_result followed by the blocks after it up
to the next tool_result (a text a client adds after the results, such as Claude Code's
`<system-reminder>`, stays with the last one, so the newest result is the last item, as in
chat, and compaction's recent tail keeps it); blocks before
the first tool_result are a part of their own. The first part is the message itself with only
its first blocks (every other key kept); each later part is `{"role", "content": [...], PART: k}`
(k ≥ 1, its place in the message). `attached` binds a part to what precedes it, so no cut falls
inside a message, and `proxy.formats.messages._request.with_history` regroups the parts into
exactly the original message and drops the private keys, which never reach the upstream. The
first part carries no private key, so a message of one tool result and the first part of a
longer one are the same item, and the items of a prefix of the messages are a prefix of their
items.

The summary item (`MessagesView.summary_item`) is a user message with one text block and the
private key SUMMARY; `with_history` merges it into the user message that follows it (see there).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from proxy.core.jsonio import JsonObject, string_or
from proxy.core.tokens import split_data_url
from proxy.core.view import ItemView, MediaPart, Role

PART = "x-offload-part"  # on a later part of a split user message: its place (1, 2, …) in the message
SUMMARY = "x-offload-summary"  # on the item standing for a summarised part of the history
PRIVATE_KEYS = (PART, SUMMARY)


def blocks_of(content: Any) -> list[Any]:
    """A content as a list of blocks: a list as it is, a string as one text block, else []."""
    if isinstance(content, list):
        return content
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return []


def block_type(block: Any) -> str | None:
    kind = block.get("type") if isinstance(block, dict) else None
    return kind if isinstance(kind, str) else None


def is_tool_use(block: Any) -> bool:
    return block_type(block) == "tool_use"


def is_injected(block: Any, names: Collection[str]) -> bool:
    """Is `block` a call to one of the proxy's injected tools (a client `tool_use` of that name)?"""
    return is_tool_use(block) and block.get("name") in names


def is_part(item: Any) -> bool:
    """A later part of a split user message (it belongs to the item before it)."""
    return isinstance(item, dict) and PART in item


def is_summary(item: Any) -> bool:
    return isinstance(item, dict) and item.get(SUMMARY) is True


def has_tool_result(content: Any) -> bool:
    return isinstance(content, list) and any(block_type(b) == "tool_result" for b in content)


def split_message(message: Any) -> list[Any]:
    """The history items of one message (see the module docstring)."""
    if not isinstance(message, dict) or message.get("role") != "user" or not has_tool_result(message.get("content")):
        return [message]
    parts: list[list[Any]] = []
    for block in message["content"]:
        if block_type(block) == "tool_result" or not parts:
            parts.append([block])
        else:
            parts[-1].append(block)
    if len(parts) == 1:
        return [message]
    return [
        {**message, "content": parts[0]},
        *({"role": "user", "content": blocks, PART: k} for k, blocks in enumerate(parts[1:], 1)),
    ]


def text_blocks_text(blocks: Any) -> str | None:
    """The `text` of the text blocks of `blocks` joined by newlines (None: no text block)."""
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        return None
    texts = [b["text"] for b in blocks if block_type(b) == "text" and isinstance(b.get("text"), str)]
    return "\n".join(texts) if texts else None


def tool_result_block(item: Any) -> JsonObject | None:
    """The tool_result of an item that is one (a user message, or a part, opening with its only
    tool_result block), else None. (Asked several times of every item on every turn: no slice,
    no generator.)"""
    if not isinstance(item, dict) or item.get("role") != "user":
        return None
    content = item.get("content")
    if not isinstance(content, list) or not content:
        return None
    first = content[0]
    if not isinstance(first, dict) or first.get("type") != "tool_result":
        return None
    for k in range(1, len(content)):
        block = content[k]
        if isinstance(block, dict) and block.get("type") == "tool_result":
            return None
    return first


def result_text(block: JsonObject) -> str | None:
    """A tool_result's offloadable text: its string content, or its content of text blocks only
    (joined by newlines). None when it holds anything else (an image, a document, …) or nothing."""
    content = block.get("content")
    if isinstance(content, str):
        return content
    if (
        isinstance(content, list)
        and content
        and all(block_type(b) == "text" and isinstance(b.get("text"), str) for b in content)
    ):
        return "\n".join(b["text"] for b in content)
    return None


def with_result_text(block: JsonObject, text: str) -> JsonObject:
    """`block` (a tool_result) whose content is `text`, every other key kept. A list of text
    blocks becomes one text block (the first one's keys, with the last `cache_control` any of
    them carried: a client's breakpoint inside the result stays on it)."""
    content = block.get("content")
    if not isinstance(content, list):
        return {**block, "content": text}
    merged = {**content[0], "text": text}
    marks = [b["cache_control"] for b in content if isinstance(b, dict) and "cache_control" in b]
    if marks:
        merged["cache_control"] = marks[-1]
    return {**block, "content": [merged]}


def media_block(block: Any) -> MediaPart | None:
    """An `image` or `document` block as the media planner sees it (its base64 source inline)."""
    kind = block_type(block)
    if kind not in ("image", "document"):
        return None
    source = block.get("source")
    if not isinstance(source, dict) or source.get("type") == "text" or source.get("type") == "content":
        return None  # a text document is text: counted as such
    data, media_type = source.get("data"), source.get("media_type")
    inline = (
        f"data:{media_type};base64,{data}"
        if source.get("type") == "base64"
        and isinstance(data, str)
        and isinstance(media_type, str)
        and "," not in media_type
        and ";" not in media_type
        else None
    )
    return MediaPart(kind, inline, "anthropic")


def reloaded_block(kind: str, data_url: str) -> JsonObject:
    """The block showing reloaded media again (an image or a document, base64)."""
    media_type, data = split_data_url(data_url) or ("application/octet-stream", "")
    return {
        "type": "image" if kind == "image" else "document",
        "source": {"type": "base64", "media_type": media_type, "data": data},
    }


def _marker_block(block: JsonObject, text: str) -> JsonObject:
    out: dict[str, Any] = {"type": "text", "text": text}
    if "cache_control" in block:
        out["cache_control"] = block["cache_control"]  # a client's breakpoint stays where it was
    return out


def _blocks_media(blocks: Any) -> list[MediaPart]:
    found: list[MediaPart] = []
    for block in blocks if isinstance(blocks, list) else ():
        part = media_block(block)
        if part is not None:
            found.append(part)
        elif block_type(block) == "tool_result":
            found += _blocks_media(block.get("content"))
    return found


def _replace_media(blocks: list[Any], markers: Mapping[int, str], start: int) -> tuple[list[Any], int]:
    """`blocks` with media block k (counted from `start`) replaced by markers[k]; the next k."""
    out: list[Any] = []
    k = start
    for block in blocks:
        if media_block(block) is not None:
            if k in markers:
                block = _marker_block(block, markers[k])
            k += 1
        elif block_type(block) == "tool_result" and isinstance(block.get("content"), list):
            inner, k = _replace_media(block["content"], markers, k)
            block = {**block, "content": inner}
        out.append(block)
    return out, k


def input_text(value: Any) -> str:
    """A tool_use `input` as JSON text: the same input always gives the same text."""
    return "" if value is None else json.dumps(value, ensure_ascii=False)


def _label(block: Any) -> str:
    """A block as the summariser reads it."""
    kind = block_type(block)
    if kind == "text":
        return string_or(block.get("text"), "")
    if kind == "thinking":
        return f"[thinking] {block.get('thinking') or ''}".rstrip()
    if kind == "redacted_thinking":
        return ""
    if kind == "tool_use":
        return ""  # in the header
    if kind in ("image", "document"):
        title = string_or(block.get("title"), "")
        return f"[{kind} {title}]".replace(" ]", "]")
    if kind in ("server_tool_use", "mcp_tool_use"):
        return f"[{kind.replace('_', ' ')}] {block.get('name') or '?'}({input_text(block.get('input'))})"
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, list):  # its blocks as themselves: an image as "[image]", not its base64
            inner = [_label(b) for b in content if block_type(b) != "tool_result"]  # no deeper: bounded
            return result_text(block) or "\n".join(filter(None, inner))
        return result_text(block) or json.dumps(content, ensure_ascii=False)
    rest = {k: v for k, v in block.items() if k not in ("type", "cache_control")} if isinstance(block, dict) else block
    return f"[{kind or '?'}] {json.dumps(rest, ensure_ascii=False)}"


class MessagesView:
    """`ItemView` over Anthropic history items (see the module docstring)."""

    def __init__(self, injected_names: Iterable[str]) -> None:
        self.injected_names = frozenset(injected_names)

    def role(self, item: Any) -> Role:
        """ "tool" for an item that is one tool_result, "user"/"assistant" for the rest of those
        messages, "system" for a message of role `system` (Claude Code sends its environment so,
        per turn, beside the top-level `system`, which is not in the history): never summarised,
        kept verbatim; "other" for anything else."""
        role = item.get("role") if isinstance(item, dict) else None
        if role == "user":
            return "tool" if tool_result_block(item) is not None else "user"
        return role if role in ("assistant", "system") else "other"

    def tool_text(self, item: Any) -> str | None:
        block = tool_result_block(item)
        return None if block is None else result_text(block)

    def with_tool_text(self, item: Any, text: str) -> Any:
        """A copy of the tool result `item` whose result is `text`: `tool_use_id`, `is_error`,
        `cache_control`, every other key and the blocks after it kept. ValueError for an item
        without offloadable text."""
        block = tool_result_block(item)
        if block is None or result_text(block) is None:
            raise ValueError("not a tool result with text")
        return {**item, "content": [with_result_text(block, text), *item["content"][1:]]}

    def text(self, item: Any) -> str | None:
        """A tool result's text (only: a marker is the whole text), or a message's text blocks:
        where markers and refs are looked for."""
        block = tool_result_block(item)
        if block is not None:
            return result_text(block)
        return text_blocks_text(item.get("content")) if isinstance(item, dict) else None

    def _tool_uses(self, item: Any) -> list[JsonObject]:
        if not isinstance(item, dict) or item.get("role") != "assistant" or not isinstance(item.get("content"), list):
            return []
        return [b for b in item["content"] if is_tool_use(b)]

    def calls(self, item: Any) -> tuple[str, ...]:
        """The ids of an assistant message's `tool_use` blocks (server tools are not calls the
        core pairs: their results are in the same message)."""
        return tuple(b["id"] for b in self._tool_uses(item) if isinstance(b.get("id"), str))

    def call_details(self, item: Any) -> tuple[tuple[str, str], ...]:
        return tuple((string_or(b.get("name"), ""), input_text(b.get("input"))) for b in self._tool_uses(item))

    def answers(self, item: Any) -> str | None:
        block = tool_result_block(item)
        call_id = block.get("tool_use_id") if block is not None else None
        return call_id if isinstance(call_id, str) else None

    def attached(self, previous: Any, item: Any) -> bool:
        """A later part of a message belongs to the part before it (no cut inside a message); a
        tool result stays with the assistant message that made calls right before it."""
        if is_part(item):
            return True
        return self.answers(item) is not None and bool(self.calls(previous))

    def injected_calls(self, item: Any) -> tuple[str, ...]:
        return tuple(
            b["id"]
            for b in self._tool_uses(item)
            if b.get("name") in self.injected_names and isinstance(b.get("id"), str)
        )

    def is_provider_compaction(self, item: Any) -> bool:
        """A message holding a `compaction` block (`compact_20260112`): opaque as a whole."""
        if not isinstance(item, dict) or item.get("role") != "assistant":
            return False
        content = item.get("content")
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "compaction":
                    return True
        return False

    def is_compaction_trigger(self, item: Any) -> bool:
        return False  # Messages has none: compaction follows the edit's trigger

    def media(self, item: Any) -> tuple[MediaPart, ...]:
        """Image and document blocks of a message, inside its tool_result blocks too."""
        if not isinstance(item, dict) or item.get("role") != "user":
            return ()
        return tuple(_blocks_media(item.get("content")))

    def with_media(self, item: Any, markers: Mapping[int, str]) -> Any:
        return {**item, "content": _replace_media(item["content"], markers, 0)[0]}

    def summary_item(self, text: str) -> JsonObject:
        return {"role": "user", "content": [{"type": "text", "text": text}], SUMMARY: True}

    def transcript(self, item: Any) -> tuple[str, str]:
        if not isinstance(item, dict):
            return "[?]", json.dumps(item, ensure_ascii=False)
        block = tool_result_block(item)
        if block is not None:
            error = " error" if block.get("is_error") is True else ""
            labels = [_label(b) for b in item["content"]]
            return f"[tool result{error} ({self.answers(item) or '?'})]", "\n".join(label for label in labels if label)
        calls = [f"{b.get('name') or '?'}({input_text(b.get('input'))})" for b in self._tool_uses(item)]
        role = string_or(item.get("role"), "?")
        header = f"[{role}]" + (f" calls {'; '.join(calls)}" if calls else "")
        labels = [_label(b) for b in blocks_of(item.get("content"))]
        return header, "\n".join(label for label in labels if label)


_VIEW_CHECK: ItemView = MessagesView(())  # the protocol is satisfied (checked by type checkers)
