"""Fields of a request body that name state kept in the upstream account.

On a shared upstream key (the operator's, used by every tenant) such a field would let one
tenant read what another stored, or what the operator keeps: a stored response or
conversation, an item of one, an uploaded file, a vector store, a code-execution container, a
stored prompt. `stored_state` names the first one a body holds (its `param`), whatever the
API; the caller refuses the request with 403 `endpoint_not_shared`.

One walk for every format (chat completions, Responses, Messages, and the relayed
`responses/input_tokens`): the fields cannot collide across APIs, and a body of any other
shape simply has none of them. Bounded: items and parts are walked, never arbitrary depth.
"""

from __future__ import annotations

import re
from typing import Any

from proxy.core.jsonio import JsonObject

# Top-level fields that name stored state when set (not null, not empty, not false).
_TOP = ("previous_response_id", "conversation")
# A part's field (or its `file`/`source`/`image_url` object's) that names an uploaded file.
_FILE_HOLDERS = ("file", "source", "image_url", "input_image")
_ITEM_LISTS = ("input", "messages")


def _named(value: Any) -> bool:
    return value is not None and value is not False and value != "" and value != {} and value != []


def _is_reference(item: JsonObject) -> bool:
    """A Responses input item that points at a stored item: `type: item_reference`, or an item
    with no type (or a null one) that is no message (no role, or a null one: the API reads
    `{"id": …}` as a reference)."""
    kind = item.get("type")
    if kind == "item_reference":
        return True
    return kind is None and item.get("role") is None and "id" in item


def _file_of(part: JsonObject) -> bool:
    if _named(part.get("file_id")):
        return True
    source = part.get("source")
    if type(source) is dict and source.get("type") == "file":
        return True
    return any(type(part.get(h)) is dict and _named(part[h].get("file_id")) for h in _FILE_HOLDERS)


def _parts(item: JsonObject) -> list[Any]:
    """The content parts of an item, and of the tool results it holds (one level down)."""
    out: list[Any] = []
    for name in ("content", "output"):
        value = item.get(name)
        if type(value) is list:
            out.extend(value)
        elif type(value) is dict:
            out.append(value)
    nested: list[list[Any]] = [p["content"] for p in out if type(p) is dict and type(p.get("content")) is list]
    for content in nested:
        out.extend(content)
    return out


def _tool_state(tool: JsonObject) -> str | None:
    kind = tool.get("type")
    if kind == "file_search" or _named(tool.get("vector_store_ids")):
        return "vector_store_ids"
    container = tool.get("container")
    if type(container) is str and container:  # an existing container; {"type": "auto"} makes a new one
        return "container"
    if type(container) is dict and _named(container.get("file_ids")):
        return "container.file_ids"
    return None


def stored_state(body: Any) -> str | None:
    """The param of the first field of `body` that names state stored upstream, else None."""
    if type(body) is not dict:
        return None
    for name in _TOP:
        if _named(body.get(name)):
            return name
    prompt = body.get("prompt")  # Responses: a stored prompt (a legacy completion's prompt is text)
    if type(prompt) is dict and _named(prompt.get("id")):
        return "prompt"
    container = body.get("container")  # Anthropic code execution: an existing one, or custom skills
    if (type(container) is str and container) or (type(container) is dict and _named(container.get("id"))):
        return "container"
    if (
        type(container) is dict
        and type(container.get("skills")) is list
        and any(type(skill) is dict and skill.get("type") != "anthropic" for skill in container["skills"])
    ):
        return "container.skills"
    for list_name in _ITEM_LISTS:
        items = body.get(list_name)
        if type(items) is not list:
            continue
        for i, item in enumerate(items):
            if type(item) is not dict:
                continue
            if list_name == "input" and _is_reference(item):
                return f"input[{i}]"
            if _file_of(item):
                return f"{list_name}[{i}]"
            if type(item.get("audio")) is dict and _named(item["audio"].get("id")):  # chat: an earlier audio answer
                return f"{list_name}[{i}].audio"
            for part in _parts(item):
                if type(part) is dict and _file_of(part):
                    return f"{list_name}[{i}].content"
    images = body.get("images")  # images/edits: images and a mask named by file id
    if type(images) is list:
        for i, image in enumerate(images):
            if type(image) is dict and _file_of(image):
                return f"images[{i}]"
    if type(body.get("mask")) is dict and _file_of(body["mask"]):
        return "mask"
    tools = body.get("tools")
    if type(tools) is list:
        for i, tool in enumerate(tools):
            if type(tool) is dict and (field := _tool_state(tool)):
                return f"tools[{i}].{field}"
    return None


# Relayed endpoints that take an upload (multipart/form-data); every other takes JSON only.
_UPLOADS = re.compile(r"(audio/+(transcriptions|translations)|images/+(edits|variations))/*")


def takes_uploads(path: str) -> bool:
    """Does the relayed endpoint `path` (under /v1, as sent) take a multipart upload? On a shared
    key another is sent JSON only: one read as form fields upstream would carry a
    `previous_response_id` the proxy never read."""
    return bool(_UPLOADS.fullmatch(path))
