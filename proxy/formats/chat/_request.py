"""Chat Completions requests: their bodies parsed and checked (`parse_chat_body`), the client's
tools that collide with the injected ones (`colliding_tool_names`), and a summary asked for the
way the conversation is sent (`summary_request`, `summary_answer`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.core.jsonio import JsonObject, object_or
from proxy.core.texts import INJECTED_TOOLS
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
)

# --- body ---
# Chat request bodies, parsed and checked where the proxy relies on their shape.
#
# The rule: every field the proxy reads anywhere (this format's modules, the format-neutral core,
# `proxy.core.tokens` above all, the reload tools' collision check) must, when it is present and
# not null, have the JSON type the code reading it relies on; otherwise the answer is a 400
# `invalid_request_error` with code `invalid_type` whose `param` names the field (e.g.
# `messages[3].tool_calls[0].id`). Absent or null fields are not checked (whether a field is
# required is the upstream's call), and fields the proxy never reads (sampling parameters,
# `response_format`, …) go upstream as sent. A field read somewhere new gets its type in the
# shapes below (`proxy.formats.json_body.Shape`): that is the one place.
#
# What the proxy reads, and so checks:
#
# - the body: an object; `model` a string; `stream` a boolean;
# - `messages`: a list of objects; in each, `role`, `name`, `tool_call_id` strings, `content` a
#   string or a list of parts, `tool_calls` a list of objects (`id`, `type` strings, `function`
#   an object with `name` and `arguments` strings, `custom` one with `name` and `input` strings),
#   and what the token counter reads of any item (`json_body.item_fields`);
# - a part: an object; `type`, `text` strings (a `tool_result` part's `content` and a `document`
#   part's `source.content`: a string or a list of parts);
# - `tools`: a list of objects (`type`, `name` strings; `function`, `custom` objects with a string
#   `name`); `functions` (legacy): a list of objects with a string `name`.
#
# JSON nested deeper than MAX_DEPTH levels is a 400 with code `invalid_json`: the proxy
# re-serialises bodies it changes, and its serialisers refuse much deeper nesting than that.


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


# --- request ---
# Chat requests: the tools a client declares that collide with the injected ones.


def colliding_tool_names(body: Any) -> list[str]:
    """The injected tool names the client declares itself, in `tools` or legacy `functions`.

    The proxy then neither offloads nor injects for the request: two tools of one name must
    not go upstream, and a call to the client's own tool must reach the client.
    """
    if not isinstance(body, dict):
        return []
    declared: list[Any] = []
    for entry in _list(body.get("tools")):
        if isinstance(entry, dict):
            declared.append(entry.get("name"))  # flat form
            for kind in ("function", "custom"):
                if isinstance(entry.get(kind), dict):
                    declared.append(entry[kind].get("name"))
    declared += [entry.get("name") for entry in _list(body.get("functions")) if isinstance(entry, dict)]
    return sorted({name for name in declared if isinstance(name, str) and name in INJECTED_TOOLS})


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


# --- summary ---
# A summary asked for the way a chat conversation is sent (`--summary-request prefix`).
#
# The request is the turn's own: the client's body with the messages a turn forwarded first and
# the tools it carried (the client's, then the injected ones, as `ChatRounds.request` adds them),
# so the provider's prompt cache serves all of it; one user message asks for the snapshot. Keys
# that would stream, store, shape, bound or bias the answer are left out; the rest (sampling,
# reasoning effort, `prompt_cache_key`, `user`, …) stays as the turns send it.

# Left out of a summary request: streaming, several choices, a forced format or length, stop
# sequences and biases, token probabilities, predicted outputs, audio, stored completions, and
# the client's own choice of tools (replaced by "none").
DROPPED = frozenset(
    {
        "stream",
        "stream_options",
        "n",
        "response_format",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "prediction",
        "audio",
        "modalities",
        "store",
        "metadata",
        "tool_choice",
        "function_call",
    }
)


def summary_request(
    body: JsonObject, prefix: list[Any], instruction: str, *, tools: Sequence[JsonObject], model: str
) -> tuple[str, JsonObject]:
    out = {k: v for k, v in body.items() if k not in DROPPED}
    out["model"] = model
    out["messages"] = [*prefix, {"role": "user", "content": instruction}]
    if tools:
        out["tools"] = [*(body.get("tools") or []), *tools]
    if isinstance(out.get("tools"), list) and out["tools"]:  # (a tool_choice without tools is refused)
        out["tool_choice"] = "none"
    if isinstance(out.get("functions"), list) and out["functions"]:  # the legacy form, kept as the turns send it
        out["function_call"] = "none"
    out["stream"] = False
    return "chat/completions", out


def summary_answer(answer: Any) -> tuple[str, int, int]:
    """The first choice's text (a string, or its text parts) and the usage."""
    if not isinstance(answer, dict):
        raise ValueError("not a JSON object")
    choices = answer.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict):
        raise ValueError("no choices[0].message")
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    elif not isinstance(content, str):
        content = ""
    usage = object_or(answer.get("usage"), {})
    return content, _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
