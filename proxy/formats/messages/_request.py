"""Messages requests: the history they carry (`history`, `with_history`, `messages_of`) and the
tools the proxy adds (`inject_tools`, `anthropic_tool`, `colliding_tool_names`), their bodies
parsed and checked (`parse_messages_body`), a summary asked for the way the conversation is
sent (`summary_request`, `summary_answer`, `instruction_message`), and Anthropic's prompt cache
on them (what it caches, `cached_request`; the caching the proxy adds, `with_caching`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from typing import Any, Literal

from proxy.core.compaction import DEFAULT_KEEP_TOOL_USES, NONE, ProviderContext
from proxy.core.jsonio import JsonObject, object_or
from proxy.core.prompt_cache import FIVE_MINUTES, Block, Request, content_key
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
from proxy.formats.messages._items import (
    PRIVATE_KEYS,
    block_type,
    blocks_of,
    has_tool_result,
    is_part,
    is_summary,
    is_tool_use,
    split_message,
)

# --- request ---
# Messages requests: the history they carry (`history`, `with_history`), and the tools the
# proxy adds (`inject_tools`, `colliding_tool_names`).


def history(body: JsonObject) -> list[Any]:
    """The history items of the request's `messages` (a split user message gives several, see
    `proxy.formats.messages._items`); [] when `messages` is not a list (the upstream refuses it)."""
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


# --- body ---
# Messages request bodies, parsed and checked where the proxy relies on their shape.
#
# The rule is chat's (`proxy.formats.chat._request`): every field the proxy reads anywhere (this
# format's modules, the core, `proxy.core.tokens`, the reload tools' collision check, the summary
# request) must, when present and not null, have the JSON type the code reading it relies on,
# else a 400 `invalid_type` naming the field; the rest goes upstream as sent. What the proxy
# reads, and so checks:
#
# - the body: an object; `model` a string; `stream` a boolean; `system` a string or a list of
#   blocks; `tools` a list of objects (`type`, `name` strings, `function` an object with a string
#   `name`); `tool_choice`, `thinking` objects (their `type`, the tool choice's `name` strings);
#   `output_config` an object (`max_tokens` and a thinking `budget_tokens` are used only when
#   they are positive integers);
# - `messages`: a list of objects; in each, `role` a string, `content` a string or a list of
#   blocks, and what the token counter reads of any item (`json_body.item_fields`: `tool_calls`
#   a list of calls, `type`, `name` strings, …);
# - a block: an object; `type`, `text`, `id`, `name`, `tool_use_id` strings; a `tool_result`'s
#   `content` and a `document`'s `source.content` a string or a list of blocks.
#
# A message may not carry the proxy's private keys (`proxy.formats.messages._items.PRIVATE_KEYS`):
# a 400 `invalid_value` (the API would refuse the key anyway; here it would be dropped silently).

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


# --- summary ---
# A summary asked for the way a Messages conversation is sent (`--summary-request prefix`).
#
# The request is the turn's own, so Anthropic's prompt cache (tools → system → messages, each
# level valid only while everything before it is unchanged) serves it: the client's body, its
# `system`, the tools the turn carried (the client's, then the injected ones as the rounds add
# them), the messages a turn forwarded first exactly as it forwarded them (`with_history` of the
# same items), then one user message of one text block asking for the snapshot (consecutive user
# messages are allowed: the API joins them).
#
# What changes, and why:
#
# - `stream` is dropped, and `stop_sequences` and a structured output format (`output_format`,
#   `output_config.format`), which would shape or cut the snapshot;
# - `max_tokens` (required) is SUMMARY_MAX_TOKENS, an output every Claude model accepts and room
#   for a snapshot; with extended thinking on, the client's own `max_tokens` (valid with its
#   thinking budget, the turn was accepted with it), else the budget plus SUMMARY_MAX_TOKENS;
# - `model` is the summary model.
#
# Kept as the turns send them, because changing them invalidates the cached messages: `thinking`
# and `tool_choice`. The instruction says not to call a tool; only a `tool_choice` that forces a
# tool (`any`, `tool`) is replaced by `{"type": "none"}` (a snapshot could not come otherwise).
# An answer that calls a tool anyway has no snapshot: the summariser refuses it, and the next
# turn asks again.
#
# Should the forwarded prefix end with an assistant message whose `tool_use` blocks have no result
# (the core never cuts between a call and its result, so only a client history that was invalid
# already), the instruction message first answers them with `tool_result` blocks marked
# `is_error` and without content, so the request stays valid and adds no text of its own.

SUMMARY_MAX_TOKENS = 4096
DROPPED = frozenset({"stream", "stop_sequences", "output_format", "max_tokens"})
_FORCING = frozenset({"any", "tool"})  # tool_choice types that make the model call a tool


def instruction_message(text: str) -> JsonObject:
    """The user message a summary request ends with."""
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def _thinking_on(body: JsonObject) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") not in (None, "disabled")


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def summary_max_tokens(body: JsonObject) -> int:
    """`max_tokens` of the summary request (see the module docstring)."""
    if not _thinking_on(body):
        return SUMMARY_MAX_TOKENS
    budget = _count(body["thinking"].get("budget_tokens"))
    client = _count(body.get("max_tokens"))
    return client if client > budget else budget + SUMMARY_MAX_TOKENS


def _unanswered(messages: list[Any]) -> list[str]:
    """The tool_use ids of a last assistant message (no message after it can answer them)."""
    last = messages[-1] if messages else None
    if not isinstance(last, dict) or last.get("role") != "assistant" or not isinstance(last.get("content"), list):
        return []
    return [b["id"] for b in last["content"] if is_tool_use(b) and isinstance(b.get("id"), str)]


def summary_request(
    body: JsonObject, prefix: list[Any], instruction: str, *, tools: Sequence[JsonObject], model: str
) -> tuple[str, JsonObject]:
    messages = messages_of(prefix)  # the prefix alone: the instruction is never merged into it
    ask = instruction_message(instruction)
    dangling = _unanswered(messages)
    if dangling:
        ask = {
            "role": "user",
            "content": [
                *({"type": "tool_result", "tool_use_id": call_id, "is_error": True} for call_id in dangling),
                *ask["content"],
            ],
        }
    out = {k: v for k, v in {**body, "messages": [*messages, ask]}.items() if k not in DROPPED}
    if tools:
        out = inject_tools(out, tools)
    choice = out.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in _FORCING:
        out["tool_choice"] = {"type": "none"}
    config = out.get("output_config")
    if isinstance(config, dict) and "format" in config:  # effort stays: the turns send it
        out["output_config"] = {k: v for k, v in config.items() if k != "format"}
    out["model"] = model
    out["max_tokens"] = summary_max_tokens(body)
    return "messages", out


def summary_answer(answer: Any) -> tuple[str, int, int]:
    """The text of the answer's text blocks, and its usage: input tokens are everything the
    request sent (`input_tokens` + `cache_read_input_tokens` + `cache_creation_input_tokens`:
    Anthropic counts the cached part apart), output tokens `output_tokens`."""
    if not isinstance(answer, dict) or not isinstance(answer.get("content"), list):
        raise ValueError("no content list")
    text = "".join(b["text"] for b in answer["content"] if block_type(b) == "text" and isinstance(b.get("text"), str))
    usage = object_or(answer.get("usage"), {})
    sent = sum(_count(usage.get(k)) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
    return text, sent, _count(usage.get("output_tokens"))


# --- cache_control ---
# Anthropic's prompt cache on a Messages request: what the provider caches of it
# (`cached_request`, for `proxy.core.prompt_cache`) and the caching the proxy adds for a client
# that asked for none (`with_caching`, `--cache-control auto`).
#
# Anthropic caches only where a request asks: `cache_control` on a tool, a system block or a
# message's content block (a breakpoint), or at the top level (request-level automatic caching: a
# breakpoint on the last block, moving forward as the conversation grows). The cache order is
# tools, then system, then messages; a breakpoint's `cache_control` is not part of what is cached,
# so a breakpoint moved to a later block still finds the earlier prefix (20 boundaries back).
#
# `with_caching` adds, to a request carrying no `cache_control` anywhere, the top-level
# `{"type": "ephemeral"}` and a breakpoint on the last system block (the last tool when there is
# no system): the automatic breakpoint caches the conversation turn by turn, the other keeps the
# tools and system cached when the proxy's summary rewrites what follows them (measured on the
# traces: bench/cache_control.py, docs/caching.md). Both stay where they are across turns, the
# bytes before them unchanged, and the proxy's summary calls, made from the same body, carry them
# too. A client's own `cache_control`, wherever it is, leaves the request as it is.

EPHEMERAL = {"type": "ephemeral"}
Strategy = Literal["automatic", "system+automatic", "none"]
STRATEGY: Strategy = "system+automatic"  # chosen by measurement (bench/cache_control.py)
# Where a client's `cache_control` can sit without being a breakpoint of its own: inside a
# tool's schema (a property may be named so) or a tool call's arguments.
_OPAQUE = frozenset({"input_schema", "input"})


def _carries(value: Any) -> bool:
    """Does a `cache_control` key sit in `value` (outside _OPAQUE)? A walk over its lists and
    objects only, without recursion."""
    pending = [value]
    while pending:
        current = pending.pop()
        if isinstance(current, dict):
            if "cache_control" in current:
                return True
            pending.extend(v for k, v in current.items() if isinstance(v, (dict, list)) and k not in _OPAQUE)
        elif isinstance(current, list):
            pending.extend(v for v in current if isinstance(v, (dict, list)))
    return False


def _messages_carry(messages: Any) -> bool:
    """`_carries` for the messages list, its two outer levels (messages, their content blocks)
    in plain loops: it is asked of the whole history on every turn."""
    if not isinstance(messages, list):
        return _carries(messages)
    for message in messages:
        if not isinstance(message, dict):
            if _carries(message):
                return True
            continue
        if "cache_control" in message:
            return True
        for key, value in message.items():
            if key == "content" and isinstance(value, list):
                for block in value:
                    if isinstance(block, dict):
                        if "cache_control" in block:
                            return True
                        for inner_key, inner in block.items():
                            if isinstance(inner, (dict, list)) and inner_key not in _OPAQUE and _carries(inner):
                                return True
                    elif isinstance(block, list) and _carries(block):
                        return True
            elif isinstance(value, (dict, list)) and key not in _OPAQUE and _carries(value):
                return True
    return False


def has_cache_control(body: JsonObject) -> bool:
    """Does the request ask for caching anywhere: at the top level, on a tool, a system block, a
    content block (nested ones too, e.g. in a tool_result)?"""
    return (
        "cache_control" in body
        or _carries(body.get("tools"))
        or _carries(body.get("system"))
        or _messages_carry(body.get("messages"))
    )


def with_caching(
    body: JsonObject, strategy: Strategy = STRATEGY, *, mentions: Callable[[bytes], bool] | None = None
) -> JsonObject:
    """`body` with the proxy's caching (see the module docstring), or `body` itself when it
    carries `cache_control` already, has no messages list, or `strategy` is "none".
    `mentions`: the body's bytes searched for the key (`RawJson.may_hold`): none there, no walk
    of every block for it (a long history's tool inputs included)."""
    if strategy == "none" or not isinstance(body.get("messages"), list):
        return body
    if (mentions is None or mentions(b'"cache_control"')) and has_cache_control(body):
        return body
    out = {**body, "cache_control": dict(EPHEMERAL)}
    if strategy == "system+automatic":
        out = _mark_head(out)
    return out


def _mark_head(body: JsonObject) -> JsonObject:
    """The last system block marked (a string system becomes one text block), else the last tool."""
    system = body.get("system")
    if isinstance(system, str) and system:
        return {**body, "system": [{"type": "text", "text": system, "cache_control": dict(EPHEMERAL)}]}
    if isinstance(system, list) and system and isinstance(system[-1], dict):
        return {**body, "system": [*system[:-1], {**system[-1], "cache_control": dict(EPHEMERAL)}]}
    tools = body.get("tools")
    if isinstance(tools, list) and tools and isinstance(tools[-1], dict):
        return {**body, "tools": [*tools[:-1], {**tools[-1], "cache_control": dict(EPHEMERAL)}]}
    return body


# ---------------------------------------------------------------------------- what is cached

Tokens = Callable[[str], int]


def _mark(value: Any) -> str | None:
    control = value.get("cache_control") if isinstance(value, dict) else None
    if not isinstance(control, dict):
        return None
    ttl = control.get("ttl", FIVE_MINUTES)
    return ttl if isinstance(ttl, str) else FIVE_MINUTES


def _canonical(value: Any) -> str:
    """The block as cached: its JSON without its `cache_control` (nested ones too)."""

    def plain(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items() if k != "cache_control"}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v

    return json.dumps(plain(value), ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def cache_blocks(body: JsonObject, tokens: Tokens) -> tuple[Block, ...]:
    """The request's prefix as Anthropic caches it: each tool, each system block (a string
    system one), then each message's content blocks (a string content one), with its role."""
    out: list[Block] = []

    def add(kind: str, value: Any, mark: str | None) -> None:
        text = _canonical(value)
        out.append(Block(content_key(kind, text), tokens(text), mark))

    tools, messages = body.get("tools"), body.get("messages")
    for tool in tools if isinstance(tools, list) else ():
        add("tool", tool, _mark(tool))
    system = body.get("system")
    if isinstance(system, str) and system:
        add("system", {"type": "text", "text": system}, None)
    for block in system if isinstance(system, list) else ():
        add("system", block, _mark(block))
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict):
            continue
        role, content = str(message.get("role")), message.get("content")
        if isinstance(content, str):
            add(role, {"type": "text", "text": content}, None)
        for block in content if isinstance(content, list) else ():
            add(role, block, _mark(block))
    return tuple(out)


def cached_request(body: JsonObject, at: float, tokens: Tokens) -> Request:
    """What Anthropic's cache sees of `body` sent at `at` (`proxy.core.prompt_cache.Request`)."""
    return Request(at, cache_blocks(body, tokens), automatic=_mark(body))
