"""Responses request bodies, parsed and checked where the proxy relies on their shape.

The rule is chat's (`proxy.formats.chat.body`): every field the proxy reads anywhere (this
format's modules, the core, `proxy.core.tokens`, the reload tools' collision check and
injection) must, when present and not null, have the JSON type the code reading it relies on,
else a 400 `invalid_type` naming the field; the rest goes upstream as sent. What the proxy
reads, and so checks:

- the body: an object; `model`, `instructions`, `previous_response_id` strings; `stream`,
  `store`, `background` booleans; `include` a list; `conversation` a string or an object (its
  `id` a string); `text` an object;
- `input`: a string or a list of objects; in each item, `type`, `role`, `id`, `call_id`, `name`,
  `namespace`, `arguments`, `server_label`, `approval_request_id` strings; `content` a string
  or a list of parts; `output` (a tool result's) a string, a list of parts or an object (its
  `type` a string); `input` (a custom tool call's) a string, a list of parts or an object;
  `summary` (a reasoning item's) a list of parts; `tool_calls` a list of calls
  (`json_body.item_fields`: what the token counter reads of any item);
- a part: an object; `type`, `text` strings (a `tool_result` part's `content`, a `document`
  part's `source.content`: a string or a list of parts);
- `tools`: a list of objects (`type`, `name` strings, `function` an object with a string `name`,
  a `namespace` tool's `tools` the same); `tool_choice`: a string or an object (`type`, `name`
  strings, `tools` a list of objects with `type` and `name` strings).
"""

from __future__ import annotations

from proxy.core.jsonio import JsonObject
from proxy.formats.json_body import (
    ARRAY,
    BOOLEAN,
    STRING,
    TOOL,
    Shape,
    an_object,
    check_body,
    check_count,
    item_fields,
    objects,
    of,
    parse_body,
    part_shape,
)

ITEM = Shape(
    {
        **item_fields(part_shape()),
        **{name: STRING for name in ("id", "call_id", "namespace", "server_label", "approval_request_id")},
    }
)
RESPONSES_TOOL = Shape(TOOL.fields)
RESPONSES_TOOL.variant("namespace", tools=objects(RESPONSES_TOOL))
CHOICE = Shape({"type": STRING, "name": STRING, "tools": objects(Shape({"type": STRING, "name": STRING}))})
BODY = Shape(
    {
        "input": of("a string or an array of objects", text=True, objs=ITEM),
        "tools": objects(RESPONSES_TOOL),
        "tool_choice": of("a string or an object", text=True, obj=CHOICE),
        "model": STRING,
        "instructions": STRING,
        "previous_response_id": STRING,
        "stream": BOOLEAN,
        "store": BOOLEAN,
        "background": BOOLEAN,
        "include": ARRAY,
        "conversation": of("a string or an object", text=True, obj=Shape({"id": STRING})),
        "text": an_object(),
    }
)


def parse_responses_body(raw: bytes, *, max_items: int | None = None) -> JsonObject:
    """The request body as a dict, or ProxyError 400 (see the module docstring)."""
    return parse_body(raw, check_responses_body, items="input", noun="input items", limit=max_items)


def check_responses_body(body: JsonObject) -> None:
    check_body(body, BODY)


def check_responses_input(body: JsonObject, *, max_items: int | None) -> None:
    """A parsed body checked as `parse_responses_body` checks one (ProxyError 400)."""
    check_responses_body(body)
    check_count(body, items="input", noun="input items", limit=max_items)
