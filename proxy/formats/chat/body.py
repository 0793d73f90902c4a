"""Chat request bodies, parsed and checked where the proxy relies on their shape.

The rule: every field the proxy reads anywhere (this format's modules, the format-neutral core,
`proxy.core.tokens` above all, the reload tools' collision check) must, when it is present and
not null, have the JSON type the code reading it relies on; otherwise the answer is a 400
`invalid_request_error` with code `invalid_type` whose `param` names the field (e.g.
`messages[3].tool_calls[0].id`). Absent or null fields are not checked (whether a field is
required is the upstream's call), and fields the proxy never reads (sampling parameters,
`response_format`, …) go upstream as sent. A field read somewhere new gets its type in the
shapes below (`proxy.formats.json_body.Shape`): that is the one place.

What the proxy reads, and so checks:

- the body: an object; `model` a string; `stream` a boolean;
- `messages`: a list of objects; in each, `role`, `name`, `tool_call_id` strings, `content` a
  string or a list of parts, `tool_calls` a list of objects (`id`, `type` strings, `function`
  an object with `name` and `arguments` strings, `custom` one with `name` and `input` strings),
  and what the token counter reads of any item (`json_body.item_fields`);
- a part: an object; `type`, `text` strings (a `tool_result` part's `content` and a `document`
  part's `source.content`: a string or a list of parts);
- `tools`: a list of objects (`type`, `name` strings; `function`, `custom` objects with a string
  `name`); `functions` (legacy): a list of objects with a string `name`.

JSON nested deeper than MAX_DEPTH levels is a 400 with code `invalid_json`: the proxy
re-serialises bodies it changes, and its serialisers refuse much deeper nesting than that.
"""

from __future__ import annotations

from proxy.core.jsonio import JsonObject
from proxy.formats.json_body import (
    BOOLEAN,
    MAX_DEPTH,
    STRING,
    TOOL,
    Shape,
    an_object,
    check_body,
    item_fields,
    objects,
    parse_body,
    part_shape,
)

__all__ = ["MAX_DEPTH", "parse_chat_body", "check_chat_body"]

NAMED = Shape({"name": STRING})
MESSAGE = Shape({**item_fields(part_shape()), "tool_call_id": STRING})
BODY = Shape(
    {
        "messages": objects(MESSAGE),
        "model": STRING,
        "stream": BOOLEAN,
        "tools": objects(Shape({**TOOL.fields, "custom": an_object(NAMED)})),
        "functions": objects(NAMED),
    }
)


def parse_chat_body(raw: bytes, *, max_messages: int | None = None) -> JsonObject:
    """The request body as a dict, or ProxyError 400 (see the module docstring for the rule)."""
    return parse_body(raw, check_chat_body, items="messages", noun="messages", limit=max_messages)


def check_chat_body(body: JsonObject) -> None:
    """Raise ProxyError 400 for the first field the proxy reads that has the wrong type, or for
    nesting deeper than MAX_DEPTH. One pass; a plain string value costs one type check."""
    check_body(body, BODY)
