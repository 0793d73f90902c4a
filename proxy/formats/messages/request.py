"""Messages requests: the history they carry (`history`, `with_history`), and the tools the
proxy adds (`inject_tools`, `colliding_tool_names`)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from proxy.core.compaction import DEFAULT_KEEP_TOOL_USES, NONE, ProviderContext
from proxy.core.jsonio import JsonObject, object_or
from proxy.formats.messages.items import PRIVATE_KEYS, blocks_of, has_tool_result, is_part, is_summary, split_message


def history(body: JsonObject) -> list[Any]:
    """The history items of the request's `messages` (a split user message gives several, see
    `proxy.formats.messages.items`); [] when `messages` is not a list (the upstream refuses it)."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        return []
    return [item for message in messages for item in split_message(message)]


def messages_of(items: list[Any]) -> list[Any]:
    """The messages `items` stand for: parts regrouped into their message, a summary item merged
    into the user message after it, the private keys dropped (see `with_history`)."""
    groups: list[list[Any]] = []
    for item in items:
        if is_part(item) and groups and not is_summary(groups[-1][0]):
            groups[-1].append(item)
        else:
            groups.append([item])
    out: list[Any] = []
    i = 0
    while i < len(groups):
        group = groups[i]
        if is_summary(group[0]) and i > 0 and _mergeable(groups[i - 1]):
            # after the task (a user message kept before it): one user message of the task, the
            # summary and the plain user messages kept after it, so roles still alternate
            out[-1] = _merged(out[-1], group[0], after=True)
            i += 1
            while i < len(groups) and _mergeable(groups[i]):
                out[-1] = _merged(out[-1], _message(groups[i]), after=True)
                i += 1
            continue
        if is_summary(group[0]) and i + 1 < len(groups) and _mergeable(groups[i + 1]):
            # no task before it (e.g. after a provider compaction block): the summary opens the
            # next user message, and the plain user messages kept after that join it too
            out.append(_merged(group[0], _message(groups[i + 1])))
            i += 2
            while i < len(groups) and _mergeable(groups[i]):
                out[-1] = _merged(out[-1], _message(groups[i]), after=True)
                i += 1
            continue
        out.append(_message(group))
        i += 1
    return out


def with_history(body: JsonObject, items: list[Any]) -> JsonObject:
    """A new body whose `messages` are those `items` stand for (`messages_of`); every other key
    stays, in its order. `with_history(body, history(body))` is `body`, byte for byte.

    The summary item is merged into the user message right after it (its text block first), so
    roles still alternate and the messages are those the client sent, less the summarised
    ones; after the task (a plain user message right before it), into the task instead, with the
    plain user messages kept after it. It stays a user message of its own before an assistant message, at the end, and
    before a user message holding `tool_result` blocks (those must open their message, right
    after the `tool_use` they answer; the core never leaves one whose call was summarised)."""
    return {**body, "messages": messages_of(items)}


def _clean(item: Any) -> Any:
    if isinstance(item, dict) and any(key in item for key in PRIVATE_KEYS):
        return {k: v for k, v in item.items() if k not in PRIVATE_KEYS}
    return item


def _message(group: list[Any]) -> Any:
    """One message from its parts (a single item is itself, private keys dropped)."""
    head = _clean(group[0])
    if len(group) == 1:
        return head
    content = list(blocks_of(head.get("content")))
    for part in group[1:]:
        content += blocks_of(part.get("content"))
    return {**head, "content": content}


def _mergeable(group: list[Any]) -> bool:
    head = group[0]
    if not isinstance(head, dict) or head.get("role") != "user" or is_summary(head) or is_part(head):
        return False
    content = head.get("content")
    return isinstance(content, (str, list)) and not any(
        has_tool_result(item.get("content")) for item in group if isinstance(item, dict)
    )


def _merged(summary: JsonObject, message: JsonObject, *, after: bool = False) -> JsonObject:
    """`summary`'s blocks first, then `message`'s, in `message`; `after`: the second's blocks
    appended to the first (private keys dropped)."""
    if after:
        return {**_clean(summary), "content": [*blocks_of(summary.get("content")), *blocks_of(message.get("content"))]}
    return {**message, "content": [*blocks_of(summary.get("content")), *blocks_of(message.get("content"))]}


# ---------------------------------------------------------------------------------------------
# Tools


def anthropic_tool(schema: JsonObject) -> JsonObject:
    """An Anthropic client tool from a chat-style schema (`{"type": "function", "function": {...}}`)."""
    function = object_or(schema.get("function"), schema)
    tool: dict[str, Any] = {"name": function["name"]}
    if "description" in function:
        tool["description"] = function["description"]
    tool["input_schema"] = function.get("parameters") or {"type": "object", "properties": {}}
    return tool


def _tool_names(tools: Any) -> set[str]:
    names: set[str] = set()
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, dict):
            continue
        if isinstance(tool.get("name"), str):
            names.add(tool["name"])
        if isinstance(tool.get("function"), dict) and isinstance(tool["function"].get("name"), str):
            names.add(tool["function"]["name"])  # a chat-style entry sent by mistake
    return names


def inject_tools(body: JsonObject, schemas: Sequence[JsonObject]) -> JsonObject:
    """A new body with the injected tools (`schemas`, chat-style, e.g.
    `proxy.core.texts.RELOAD_TOOL_SCHEMAS`) appended after the client's own tools as
    `{"name", "description", "input_schema"}`: the same schemas always give the same bytes.
    Client tools (server tools too) stay untouched and in order; a name already declared is not
    added twice; `tool_choice` is left as the client sent it (`none` keeps the model from calling
    any tool, the injected ones too; `{"type": "tool", "name": X}` forces the client's X). No
    schemas, or a `tools` value that is not a list (the upstream refuses it): the body unchanged."""
    tools = body.get("tools")
    if tools is None:
        tools = []
    if not schemas or not isinstance(tools, list):
        return dict(body)
    declared = _tool_names(tools)
    added = [tool for tool in map(anthropic_tool, schemas) if tool["name"] not in declared]
    return {**body, "tools": [*tools, *added]}


def colliding_tool_names(body: Any, names: Collection[str]) -> set[str]:
    """The injected names the client declares itself in `tools`: the caller then neither
    offloads nor injects (two tools of one name must not go upstream, and a call to the
    client's own tool must reach the client)."""
    if not isinstance(body, dict):
        return set()
    return _tool_names(body.get("tools")) & set(names)


# ---------------------------------------------------------------------------------------------
# The provider's own context management


def provider_context(body: Any) -> ProviderContext:
    """`context_management.edits` (beta `context-management-2025-06-27` / `compact-2026-01-12`):
    `compact_20260112` has Anthropic summarise the history itself; `clear_tool_uses_20250919`
    clears older tool results (all but the `keep` most recent tool uses, `exclude_tools`
    spared); `clear_thinking_20251015` touches only thinking blocks, which the proxy never
    alters (see `proxy.core.compaction`)."""
    config = body.get("context_management") if isinstance(body, dict) else None
    edits = config.get("edits") if isinstance(config, dict) else None
    if not isinstance(edits, list):
        return NONE
    compacts = clears = False
    keep, exclude = DEFAULT_KEEP_TOOL_USES, frozenset[str]()
    for edit in edits:
        kind = edit.get("type") if isinstance(edit, dict) else None
        if kind == "compact_20260112":
            compacts = True
        elif kind == "clear_tool_uses_20250919":
            clears = True
            value = edit.get("keep")
            if isinstance(value, dict) and value.get("type") == "tool_uses" and type(value.get("value")) is int:
                keep = max(0, value["value"])
            names = edit.get("exclude_tools")
            if isinstance(names, list):
                exclude = frozenset(n for n in names if isinstance(n, str))
    if not (compacts or clears):
        return NONE
    return ProviderContext(compacts=compacts, clears_tool_results=clears, keep_tool_uses=keep, exclude_tools=exclude)
