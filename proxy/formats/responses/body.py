"""Responses request bodies, parsed and checked where the proxy relies on their shape.

The rule is chat's (`proxy.formats.json_body`): every field the proxy reads must, when present
and not null, have the shape the proxy relies on, else a 400 `invalid_type` naming the field;
the rest goes upstream as sent. What the proxy reads, and so checks:

- the body: an object; `input`: a string or a list of objects; in each item, `type`, `role`,
  `call_id`, `name`, `arguments` strings; `content`, and a tool result's `output`: a string or a
  list of objects (a part's `text` a string);
- `instructions`, `previous_response_id`: strings; `tools`: a list of objects; `stream`, `store`:
  booleans; `include`: a list.
"""

from __future__ import annotations

from typing import Any

from proxy.formats.json_body import invalid, nested, objects, parse_body, strings

_ITEM_STRINGS = ("type", "role", "call_id", "name", "arguments", "id")
_BOOLEANS = ("stream", "store")
_STRINGS = ("instructions", "previous_response_id", "model")


def parse_responses_body(raw: bytes, *, max_items: int | None = None) -> dict:
    """The request body as a dict, or ProxyError 400 (see the module docstring)."""
    return parse_body(raw, check_responses_body, items="input", noun="input items", limit=max_items)


def check_responses_body(body: dict) -> None:
    for name, value in body.items():
        if value is None:
            continue
        if name == "input":
            if type(value) is not str:
                _check_items(value)
        elif name == "tools":
            for tool in objects(value, "tools"):
                nested(tool, 3)
        elif name in _BOOLEANS:
            if type(value) is not bool:
                raise invalid(name, "a boolean", value)
        elif name in _STRINGS:
            if type(value) is not str:
                raise invalid(name, "a string", value)
        elif name == "include":
            if type(value) is not list:
                raise invalid(name, "an array", value)
            nested(value, 2)
        else:
            nested(value, 2)


def _check_items(items: Any) -> None:
    if type(items) is not list:
        raise invalid("input", "a string or an array of objects", items)
    for i, item in enumerate(items):
        if type(item) is not dict:
            raise invalid(f"input[{i}]", "an object", item)
        for name, value in item.items():
            if value is None or (type(value) is str and name not in ("content", "output")):
                continue
            if type(value) is str:
                continue
            if name in _ITEM_STRINGS:
                raise invalid(f"input[{i}].{name}", "a string", value)
            if name == "content" and item.get("type") not in (None, "message"):
                nested(value, 4)  # another item's content: not read by the proxy
            elif name in ("content", "output") and item.get("type") != "computer_call_output":
                _check_parts(value, f"input[{i}].{name}", name == "output")
            else:
                nested(value, 4)


def _check_parts(parts: Any, param: str, output: bool) -> None:
    if type(parts) is not list:
        if output:  # some tool results carry an object (a screenshot, a shell result): not read here
            nested(parts, 4)
            return
        raise invalid(param, "a string or an array of objects", parts)
    for j, part in enumerate(parts):
        if type(part) is not dict:
            raise invalid(f"{param}[{j}]", "an object", part)
        strings(part, ("text",), f"{param}[{j}]", 5)
