"""The Chat Completions wire format: how its messages look to the format-neutral core.

Requests carry `messages`; a tool result is a `role: "tool"` message answering the
`tool_call_id` of an earlier assistant message's `tool_calls`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from proxy.core.jsonio import JsonObject, object_or
from proxy.core.texts import INJECTED_TOOLS
from proxy.core.tokens import split_data_url
from proxy.core.view import MediaPart, Role

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


def text_of(content: Any) -> str | None:
    """The offloadable text of a content: a string, or the text parts of a list joined by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            p["text"]
            for p in content
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        ]
        return "\n".join(texts) if texts else None
    return None


def with_text(content: Any, text: str) -> Any:
    """`content` with its text replaced by `text`; non-text parts stay where they were."""
    if isinstance(content, str):
        return text
    out: list[Any] = []
    placed = False
    for part in content:
        if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
            if not placed:
                out.append({**part, "text": text})
                placed = True
        else:
            out.append(part)
    return out


def media_part(part: Any) -> MediaPart | None:
    """An `image_url`, `file` or `input_audio` part as the media planner sees it, else None."""
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "image_url":
        image = part.get("image_url")
        url, detail = (image.get("url"), image.get("detail")) if isinstance(image, dict) else (image, None)
        inline = url if isinstance(url, str) and url.startswith("data:") else None
        return MediaPart("image", inline, "openai", detail if isinstance(detail, str) else None)
    if kind == "file" and isinstance(part.get("file"), dict):
        data = part["file"].get("file_data")
        return MediaPart("document", data if isinstance(data, str) and data.startswith("data:") else None)
    if kind == "input_audio" and isinstance(part.get("input_audio"), dict):
        audio = part["input_audio"]
        data, fmt = audio.get("data"), audio.get("format")
        ok = isinstance(data, str) and isinstance(fmt, str) and fmt.isalnum()
        return MediaPart("audio", f"data:audio/{fmt};base64,{data}" if ok else None)
    return None


def reloaded_part(kind: str, data_url: str, ref: str) -> JsonObject:
    """The content part showing reloaded media again (a chat user message's)."""
    if kind == "image":
        return {"type": "image_url", "image_url": {"url": data_url}}
    if kind == "audio":
        media_type, payload = split_data_url(data_url) or ("audio/wav", "")
        return {"type": "input_audio", "input_audio": {"data": payload, "format": media_type.partition("/")[2]}}
    return {"type": "file", "file": {"file_data": data_url, "filename": ref}}


def _calls(message: Any) -> list[JsonObject]:
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return []
    calls = message.get("tool_calls")
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


class ChatView:
    """`ItemView` over chat messages."""

    def __init__(self, injected_names: frozenset[str]) -> None:
        self.injected_names = injected_names

    def role(self, item: Any) -> Role:
        role = item.get("role") if isinstance(item, dict) else None
        if role in ("system", "developer"):
            return "system"
        return role if role in ROLES else "other"

    def tool_text(self, item: Any) -> str | None:
        if not isinstance(item, dict) or item.get("role") != "tool":
            return None
        return text_of(item.get("content"))

    def with_tool_text(self, item: Any, text: str) -> Any:
        return {**item, "content": with_text(item["content"], text)}

    def text(self, item: Any) -> str | None:
        return text_of(item.get("content")) if isinstance(item, dict) else None

    def calls(self, item: Any) -> tuple[str, ...]:
        return tuple(c["id"] for c in _calls(item) if isinstance(c.get("id"), str))

    def call_details(self, item: Any) -> tuple[tuple[str, str], ...]:
        """(name, arguments) of each function call; a custom tool call's input as its arguments."""
        out: list[tuple[str, str]] = []
        for call in _calls(item):
            kind = "custom" if call.get("type") == "custom" else "function"
            body = object_or(call.get(kind), {})
            arguments = body.get("input" if kind == "custom" else "arguments")
            if not isinstance(arguments, str):
                arguments = "" if arguments is None else json.dumps(arguments, ensure_ascii=False)
            name = body.get("name")
            out.append((name if isinstance(name, str) else "", arguments))
        return tuple(out)

    def answers(self, item: Any) -> str | None:
        if isinstance(item, dict) and item.get("role") == "tool":
            call_id = item.get("tool_call_id")
            return call_id if isinstance(call_id, str) else None
        return None

    def attached(self, previous: Any, item: Any) -> bool:
        """Tool results follow the assistant message that made the calls."""
        return isinstance(item, dict) and item.get("role") == "tool"

    def injected_calls(self, item: Any) -> tuple[str, ...]:
        return tuple(
            c["id"]
            for c in _calls(item)
            if (c.get("function") or {}).get("name") in self.injected_names and isinstance(c.get("id"), str)
        )

    def is_provider_compaction(self, item: Any) -> bool:
        return False  # chat completions has no server-side compaction

    def is_compaction_trigger(self, item: Any) -> bool:
        return False

    def media(self, item: Any) -> tuple[MediaPart, ...]:
        content = item.get("content") if isinstance(item, dict) else None
        if not isinstance(content, list):
            return ()
        return tuple(part for part in map(media_part, content) if part is not None)

    def with_media(self, item: Any, markers: Mapping[int, str]) -> Any:
        out: list[Any] = []
        k = 0
        for part in item["content"]:
            if media_part(part) is not None:
                if k in markers:
                    part = {"type": "text", "text": markers[k]}
                k += 1
            out.append(part)
        return {**item, "content": out}

    def summary_item(self, text: str) -> JsonObject:
        return {"role": "user", "content": text}

    def transcript(self, item: Any) -> tuple[str, str]:
        if not isinstance(item, dict):
            return "[?]", json.dumps(item, ensure_ascii=False)
        content = item.get("content")
        if isinstance(content, list):
            content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
        calls = [
            f"{(c.get('function') or {}).get('name')}({(c.get('function') or {}).get('arguments', '')})"
            for c in _calls(item)
        ]
        header = f"[{item.get('role', '?')}]" + (f" calls {'; '.join(calls)}" if calls else "")
        return header, content if isinstance(content, str) else ""


VIEW = ChatView(INJECTED_TOOLS)
