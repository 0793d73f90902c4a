"""Responses requests: the history they carry, and the tools the proxy adds."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from proxy.core.compaction import NONE, ProviderContext
from proxy.core.jsonio import JsonObject, object_or
from proxy.core.tokens import NOTE_KEY
from proxy.core.view import ItemView

# ---------------------------------------------------------------------------------------------
# Requests


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
