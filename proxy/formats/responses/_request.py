"""Responses requests: the history they carry (`history`, `with_history`) and the tools the proxy
adds (`inject_tools`, `colliding_tool_names`), their bodies parsed and checked
(`parse_responses_body`), and a summary asked for the way the conversation is sent
(`summary_request`, `summary_answer`, `instruction_item`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from proxy.core.compaction import NONE, ProviderContext
from proxy.core.jsonio import JsonObject, object_or
from proxy.core.tokens import NOTE_KEY
from proxy.core.view import ItemView
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

# --- request ---
# Responses requests: the history they carry, and the tools the proxy adds.


def history(body: JsonObject) -> list[Any]:
    """The request's `input` as a list of items (a new list; the items themselves are shared).

    A string input becomes one user message `{"role": "user", "content": s}`. `with_history`
    always writes a list, so a string input is turned into a list only when the caller rewrites
    the history, i.e. only when something was offloaded (a single user message never is: a body
    left alone keeps its string). Anything else (absent, null, malformed) is `[]`.
    """
    value = body.get("input") if isinstance(body, dict) else None
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, list):
        return list(value)
    return []


def with_history(body: JsonObject, items: list[Any]) -> JsonObject:
    """A new body whose `input` is `items`; every other key stays, in its order. A string input
    left as it was (the one user message `history` made of it) stays a string. An item whose
    screenshot was offloaded (its marker under NOTE_KEY) goes out without the key, followed by a
    user message holding the marker."""
    value = body.get("input")
    if isinstance(value, str) and len(items) == 1 and items[0] == {"role": "user", "content": value}:
        return dict(body)
    return {**body, "input": [out for item in items for out in _expanded(item)]}


def _expanded(item: Any) -> tuple[Any, ...]:
    if not (isinstance(item, dict) and NOTE_KEY in item):
        return (item,)
    note = item[NOTE_KEY]
    rest = {k: v for k, v in item.items() if k != NOTE_KEY}
    if not isinstance(note, str):
        return (rest,)
    return rest, {"type": "message", "role": "user", "content": [{"type": "input_text", "text": note}]}


def responses_tool(schema: JsonObject) -> JsonObject:
    """A Responses function tool from a chat-style schema (`{"type": "function", "function": {...}}`)."""
    function = object_or(schema.get("function"), schema)
    tool: dict[str, Any] = {"type": "function", "name": function["name"]}
    if "description" in function:
        tool["description"] = function["description"]
    tool["parameters"] = function.get("parameters") or {"type": "object", "properties": {}}
    tool["strict"] = False
    return tool


def _tool_names(tools: Any) -> set[str]:
    """Names of the function/custom tools declared (nested ones in `namespace` tools included)."""
    names: set[str] = set()
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace":
            names |= _tool_names(tool.get("tools"))
        elif isinstance(tool.get("name"), str):
            names.add(tool["name"])
        if isinstance(tool.get("function"), dict) and isinstance(tool["function"].get("name"), str):
            names.add(tool["function"]["name"])  # a chat-style entry sent by mistake
    return names


def inject_tools(body: JsonObject, schemas: Sequence[JsonObject]) -> JsonObject:
    """A new body with the injected tools appended after the client's own tools.

    `schemas` are chat-style (`proxy.core.texts.RELOAD_TOOL_SCHEMAS`); each becomes
    `{"type": "function", "name", "description", "parameters", "strict": False}`. Client tools,
    hosted ones included (`web_search`, `file_search`, `mcp`, `namespace`, `custom`, …), stay
    untouched and in order; a name already declared at the top level is not added twice. When
    `tool_choice` is `allowed_tools`, the injected tools are added to its list too (otherwise the
    model could not call them). A `tools` value that is not a list is left for the upstream to
    refuse: the body is returned unchanged (copied).
    """
    tools = body.get("tools")
    if tools is None:
        tools = []
    if not isinstance(tools, list):
        return dict(body)
    declared = {t.get("name") for t in tools if isinstance(t, dict) and t.get("type") == "function"}
    added = [tool for tool in map(responses_tool, schemas) if tool["name"] not in declared]
    out = {**body, "tools": [*tools, *added]}
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools" and isinstance(choice.get("tools"), list):
        allowed = {t.get("name") for t in choice["tools"] if isinstance(t, dict) and t.get("type") == "function"}
        out["tool_choice"] = {
            **choice,
            "tools": [
                *choice["tools"],
                *({"type": "function", "name": t["name"]} for t in added if t["name"] not in allowed),
            ],
        }
    return out


def colliding_tool_names(body: JsonObject, names: Collection[str]) -> set[str]:
    """The injected names the client declares itself in `tools` (inside `namespace` tools too).

    The caller then neither offloads nor injects: two tools of one name must not go upstream,
    and a call to the client's own tool must reach the client.
    """
    if not isinstance(body, dict):
        return set()
    return _tool_names(body.get("tools")) & set(names)


def _hide_tools(response: JsonObject, names: Collection[str]) -> JsonObject:
    """`response` with the injected tools removed from its echo of `tools` and `tool_choice`."""
    out = dict(response)
    if isinstance(out.get("tools"), list):
        out["tools"] = [
            t
            for t in out["tools"]
            if not (isinstance(t, dict) and t.get("type") == "function" and t.get("name") in names)
        ]
    choice = out.get("tool_choice")
    if isinstance(choice, dict) and isinstance(choice.get("tools"), list):
        out["tool_choice"] = {
            **choice,
            "tools": [
                t
                for t in choice["tools"]
                if not (isinstance(t, dict) and t.get("type") == "function" and t.get("name") in names)
            ],
        }
    return out


# ---------------------------------------------------------------------------------------------
# The provider's own context management


def provider_context(body: JsonObject, view: ItemView) -> ProviderContext:
    """`context_management: [{"type": "compaction", ...}]` has OpenAI compact the input once it
    crosses `compact_threshold`, and a `compaction_trigger` input item compacts it now: either
    way the provider summarises this history (see `proxy.core.compaction`)."""
    entries = body.get("context_management") if isinstance(body, dict) else None
    compacts = isinstance(entries, list) and any(isinstance(e, dict) and e.get("type") == "compaction" for e in entries)
    items = body.get("input") if isinstance(body, dict) else None
    trigger = isinstance(items, list) and bool(items) and view.is_compaction_trigger(items[-1])
    if not (compacts or trigger):
        return NONE
    return ProviderContext(compacts=True, trigger=trigger)


# --- body ---
# Responses request bodies, parsed and checked where the proxy relies on their shape.
#
# The rule is chat's (`proxy.formats.chat._request`): every field the proxy reads anywhere (this
# format's modules, the core, `proxy.core.tokens`, the reload tools' collision check and
# injection) must, when present and not null, have the JSON type the code reading it relies on,
# else a 400 `invalid_type` naming the field; the rest goes upstream as sent. What the proxy
# reads, and so checks:
#
# - the body: an object; `model`, `instructions`, `previous_response_id` strings; `stream`,
#   `store`, `background` booleans; `include` a list; `conversation` a string or an object (its
#   `id` a string); `text` an object;
# - `input`: a string or a list of objects; in each item, `type`, `role`, `id`, `call_id`, `name`,
#   `namespace`, `arguments`, `server_label`, `approval_request_id` strings; `content` a string
#   or a list of parts; `output` (a tool result's) a string, a list of parts or an object (its
#   `type` a string); `input` (a custom tool call's) a string, a list of parts or an object;
#   `summary` (a reasoning item's) a list of parts; `tool_calls` a list of calls
#   (`json_body.item_fields`: what the token counter reads of any item);
# - a part: an object; `type`, `text` strings (a `tool_result` part's `content`, a `document`
#   part's `source.content`: a string or a list of parts);
# - `tools`: a list of objects (`type`, `name` strings, `function` an object with a string `name`,
#   a `namespace` tool's `tools` the same); `tool_choice`: a string or an object (`type`, `name`
#   strings, `tools` a list of objects with `type` and `name` strings).

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


# --- summary ---
# A summary asked for the way a Responses conversation is sent (`--summary-request prefix`).
#
# The request is the turn's own: the client's body (its `instructions`, tools, reasoning, …) with
# the input items a turn forwarded first and the tools it carried (injected the way the reload
# rounds inject them), so the provider's prompt cache serves all of it; one user message asks for
# the snapshot. Nothing is streamed, stored, run in the background or continued from state kept
# upstream (`previous_response_id`, `conversation`); no output format or length is forced.

DROPPED = frozenset(
    {
        "stream",
        "stream_options",
        "previous_response_id",
        "conversation",
        "max_output_tokens",
        "top_logprobs",
        "background",
        "store",
        "tool_choice",
    }
)


def instruction_item(text: str) -> JsonObject:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def summary_request(
    body: JsonObject, prefix: list[Any], instruction: str, *, tools: Sequence[JsonObject], model: str
) -> tuple[str, JsonObject]:
    out = with_history(body, [*prefix, instruction_item(instruction)])
    if tools:
        out = inject_tools(out, tools)
    out = {k: v for k, v in out.items() if k not in DROPPED}
    out["model"] = model
    text = out.get("text")
    if isinstance(text, dict) and "format" in text:  # verbosity stays: the turns send it
        out["text"] = {k: v for k, v in text.items() if k != "format"}
    if isinstance(out.get("tools"), list) and out["tools"]:
        out["tool_choice"] = "none"
    out.update(stream=False, store=False, background=False)
    return "responses", out


def summary_answer(answer: Any) -> tuple[str, int, int]:
    """The `output_text` parts of the answer's message items, and its usage."""
    if not isinstance(answer, dict) or not isinstance(answer.get("output"), list):
        raise ValueError("no output list")
    parts: list[str] = []
    for item in answer["output"]:
        if isinstance(item, dict) and item.get("type") == "message" and isinstance(item.get("content"), list):
            parts += [
                p["text"]
                for p in item["content"]
                if isinstance(p, dict) and p.get("type") == "output_text" and isinstance(p.get("text"), str)
            ]
    usage = object_or(answer.get("usage"), {})
    return "".join(parts), _count(usage.get("input_tokens")), _count(usage.get("output_tokens"))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
