"""Messages request bodies, parsed and checked where the proxy relies on their shape.

The rule is chat's (`proxy.formats.chat.body`): every field the proxy reads anywhere (this
format's modules, the core, `proxy.core.tokens`, the reload tools' collision check, the summary
request) must, when present and not null, have the JSON type the code reading it relies on,
else a 400 `invalid_type` naming the field; the rest goes upstream as sent. What the proxy
reads, and so checks:

- the body: an object; `model` a string; `stream` a boolean; `system` a string or a list of
  blocks; `tools` a list of objects (`type`, `name` strings, `function` an object with a string
  `name`); `tool_choice`, `thinking` objects (their `type`, the tool choice's `name` strings);
  `output_config` an object (`max_tokens` and a thinking `budget_tokens` are used only when
  they are positive integers);
- `messages`: a list of objects; in each, `role` a string, `content` a string or a list of
  blocks, and what the token counter reads of any item (`json_body.item_fields`: `tool_calls`
  a list of calls, `type`, `name` strings, …);
- a block: an object; `type`, `text`, `id`, `name`, `tool_use_id` strings; a `tool_result`'s
  `content` and a `document`'s `source.content` a string or a list of blocks.

A message may not carry the proxy's private keys (`proxy.formats.messages.items.PRIVATE_KEYS`):
a 400 `invalid_value` (the API would refuse the key anyway; here it would be dropped silently).
"""

from __future__ import annotations

from typing import Any

from proxy.core.jsonio import JsonObject
from proxy.errors import Kind, ProxyError
from proxy.formats.json_body import (
    BOOLEAN,
    STRING,
    TOOL,
    Shape,
    an_object,
    check_body,
    item_fields,
    objects,
    parse_body,
    part_shape,
    text_or_objects,
)
from proxy.formats.messages.items import PRIVATE_KEYS

BLOCK = part_shape(id=STRING, name=STRING, tool_use_id=STRING)
MESSAGE = Shape(item_fields(BLOCK))


def _messages(messages: Any, level: int) -> None:
    """`objects(MESSAGE)`, and no message carries a private key."""
    if type(messages) is list:
        for i, message in enumerate(messages):
            for key in PRIVATE_KEYS:
                if type(message) is dict and key in message:
                    raise ProxyError(
                        Kind.BAD_REQUEST,
                        f"Unexpected key '{key}' in 'messages[{i}]': the proxy reserves it.",
                        code="invalid_value",
                        param=f"messages[{i}].{key}",
                    )
    _message_list(messages, level)


_message_list = objects(MESSAGE)


BODY = Shape(
    {
        "messages": _messages,
        "system": text_or_objects(BLOCK),
        "tools": objects(TOOL),
        "model": STRING,
        "stream": BOOLEAN,
        "tool_choice": an_object(Shape({"type": STRING, "name": STRING})),
        "thinking": an_object(Shape({"type": STRING})),
        "output_config": an_object(),
    }
)


def parse_messages_body(raw: bytes, *, max_items: int | None = None) -> JsonObject:
    """The request body as a dict, or ProxyError 400 (see the module docstring)."""
    return parse_body(raw, check_messages_body, items="messages", noun="messages", limit=max_items)


def check_messages_body(body: JsonObject) -> None:
    check_body(body, BODY)
