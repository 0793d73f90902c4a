"""Chat request bodies, parsed and checked where the proxy relies on their shape.

The rule: every field the proxy itself reads must, when it is present and not null, have the
shape the proxy relies on; otherwise the answer is a 400 `invalid_request_error` with code
`invalid_type` whose `param` names the field (e.g. `messages[3].tool_calls[0].id`). Absent or
null fields are not checked (whether a field is required is the upstream's call), and fields
the proxy never reads (sampling parameters, `response_format`, …) go upstream as sent.

What the proxy reads, and so checks:

- the body: an object;
- `messages`: a list of objects; in each, `role` a string, `content` a string or a list of
  objects (a part's `text` a string), `tool_calls` a list of objects with a string `id` and a
  `function` object (its `name` and `arguments` strings), `tool_call_id` a string;
- `tools`: a list of objects; `stream`: a boolean.

JSON nested deeper than MAX_DEPTH levels is a 400 with code `invalid_json`: the proxy
re-serialises bodies it changes, and its serialisers refuse much deeper nesting than that.
"""

from __future__ import annotations

from typing import Any

from proxy.formats.json_body import MAX_DEPTH, invalid, nested, objects, parse_body, strings

__all__ = ["MAX_DEPTH", "parse_chat_body", "check_chat_body"]

def parse_chat_body(raw: bytes, *, max_messages: int | None = None) -> dict:
    """The request body as a dict, or ProxyError 400 (see the module docstring for the rule)."""
    return parse_body(raw, check_chat_body, items="messages", noun="messages", limit=max_messages)


def check_chat_body(body: dict) -> None:
    """Raise ProxyError 400 for the first field the proxy reads that has the wrong shape, or
    for nesting deeper than MAX_DEPTH. One pass; a plain string value costs one type check."""
    for name, value in body.items():
        if value is None:
            continue
        if name == "messages":
            _check_messages(value)
        elif name == "tools":
            for tool in objects(value, "tools"):
                nested(tool, 3)
        elif name == "stream" and type(value) is not bool:
            raise invalid("stream", "a boolean", value)
        else:
            nested(value, 2)


def _check_messages(messages: Any) -> None:
    """Inlined loops on purpose: this runs over every message of every request (0.6 MB bodies)."""
    if type(messages) is not list:
        raise invalid("messages", "an array of objects", messages)
    for i, message in enumerate(messages):
        if type(message) is not dict:
            raise invalid(f"messages[{i}]", "an object", message)
        for name, value in message.items():
            if type(value) is str:
                if name != "tool_calls":
                    continue
            elif value is None:
                continue
            if name == "tool_calls":
                _check_tool_calls(value, f"messages[{i}].tool_calls")
            elif name == "content":
                _check_content(value, f"messages[{i}].content")
            elif name == "role" or name == "tool_call_id":
                raise invalid(f"messages[{i}].{name}", "a string", value)
            else:
                nested(value, 4)


def _check_content(content: Any, param: str) -> None:
    if type(content) is not list:
        raise invalid(param, "a string or an array of objects", content)
    for j, part in enumerate(content):
        if type(part) is not dict:
            raise invalid(f"{param}[{j}]", "an object", part)
        strings(part, ("text",), f"{param}[{j}]", 5)


def _check_tool_calls(calls: Any, param: str) -> None:
    if type(calls) is not list:
        raise invalid(param, "an array of objects", calls)
    for j, call in enumerate(calls):
        if type(call) is not dict:
            raise invalid(f"{param}[{j}]", "an object", call)
        for name, value in call.items():
            if type(value) is str:
                if name != "function":
                    continue
            elif value is None:
                continue
            if name == "function" and type(value) is dict:
                for key, inner in value.items():
                    if type(inner) is not str and inner is not None:
                        if key == "name" or key == "arguments":
                            raise invalid(f"{param}[{j}].function.{key}", "a string", inner)
                        nested(inner, 7)
            elif name == "function":
                raise invalid(f"{param}[{j}].function", "an object", value)
            elif name == "id":
                raise invalid(f"{param}[{j}].id", "a string", value)
            else:
                nested(value, 6)
