"""Messages request bodies, parsed and checked where the proxy relies on their shape.

The rule is chat's (`proxy.formats.json_body`): every field the proxy reads must, when present
and not null, have the shape the proxy relies on, else a 400 `invalid_type` naming the field;
the rest goes upstream as sent. What the proxy reads, and so checks:

- the body: an object; `messages`: a list of objects; in each, `role` a string, `content` a
  string or a list of objects; in a block, `type`, `text`, `id`, `name`, `tool_use_id` strings,
  a tool_result's `content` a string or a list of objects (their `type` and `text` strings);
- `system`: a string or a list of objects (their `text` strings); `tools`: a list of objects;
  `stream`: a boolean; `model`: a string.

A message may not carry the proxy's private keys (`proxy.formats.messages.items.PRIVATE_KEYS`):
a 400 `invalid_value` (the API would refuse the key anyway; here it would be dropped silently).
"""

from __future__ import annotations

from typing import Any

from proxy.errors import ProxyError
from proxy.formats.json_body import invalid, nested, objects, parse_body, strings
from proxy.formats.messages.items import PRIVATE_KEYS

_BLOCK_STRINGS = ("type", "text", "id", "name", "tool_use_id")


def parse_messages_body(raw: bytes, *, max_items: int | None = None) -> dict:
    """The request body as a dict, or ProxyError 400 (see the module docstring)."""
    return parse_body(raw, check_messages_body, items="messages", noun="messages", limit=max_items)


def check_messages_body(body: dict) -> None:
    for name, value in body.items():
        if value is None:
            continue
        if name == "messages":
            _check_messages(value)
        elif name == "system":
            if type(value) is not str:
                _check_blocks(value, "system", 2, ("type", "text"))
        elif name == "tools":
            for tool in objects(value, "tools"):
                nested(tool, 3)
        elif name == "stream":
            if type(value) is not bool:
                raise invalid(name, "a boolean", value)
        elif name == "model":
            if type(value) is not str:
                raise invalid(name, "a string", value)
        else:
            nested(value, 2)


def _check_blocks(blocks: Any, param: str, level: int, names: tuple[str, ...]) -> None:
    """`blocks` (at `level`) a list of objects whose fields `names` are strings."""
    if type(blocks) is not list:
        raise invalid(param, "a string or an array of objects", blocks)
    for j, block in enumerate(blocks):
        if type(block) is not dict:
            raise invalid(f"{param}[{j}]", "an object", block)
        strings(block, names, f"{param}[{j}]", level + 1)


def _check_messages(messages: Any) -> None:
    if type(messages) is not list:
        raise invalid("messages", "an array of objects", messages)
    for i, message in enumerate(messages):
        if type(message) is not dict:
            raise invalid(f"messages[{i}]", "an object", message)
        for key in PRIVATE_KEYS:
            if key in message:
                raise ProxyError(400, f"Unexpected key '{key}' in 'messages[{i}]': the proxy reserves it.",
                                 code="invalid_value", param=f"messages[{i}].{key}")
        for name, value in message.items():
            if value is None or (type(value) is str and name != "content"):
                continue
            if name == "content":
                if type(value) is not str:
                    _check_content(value, f"messages[{i}].content")
            elif name == "role":
                raise invalid(f"messages[{i}].role", "a string", value)
            else:
                nested(value, 4)


def _check_content(content: Any, param: str) -> None:
    """A message's blocks (level 4; a block is level 5)."""
    if type(content) is not list:
        raise invalid(param, "a string or an array of objects", content)
    for j, block in enumerate(content):
        where = f"{param}[{j}]"
        if type(block) is not dict:
            raise invalid(where, "an object", block)
        for name, value in block.items():
            if value is None or type(value) is str:
                continue
            if name in _BLOCK_STRINGS:
                raise invalid(f"{where}.{name}", "a string", value)
            if name == "content" and block.get("type") == "tool_result":
                _check_blocks(value, f"{where}.content", 6, ("type", "text"))
            else:
                nested(value, 6)
