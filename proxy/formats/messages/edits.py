"""Anthropic's clearing edits applied by the proxy itself, on Messages history items. Pure.

`clear_thinking_20251015` removes the `thinking` and `redacted_thinking` blocks of all but the
`keep` most recent assistant turns that have some. An assistant *turn* is everything the
assistant says between two user messages that are not only tool results: the assistant
messages of one tool loop are one turn (its thinking goes back with the results, as the API
requires). An assistant message that would be left with no block keeps its thinking.

`clear_tool_uses_20250919` applies once the request is over its `trigger` (more input tokens,
or more tool uses, than its value): the results of all but the `keep` most recent tool uses
(`exclude_tools` spared; `keep` counts every tool use, as the provider does) become the proxy's
tool-result markers (`proxy.core.texts`: a preview, and a `ref=` that `context_reload` returns
byte for byte), and with `clear_tool_inputs` their `tool_use` inputs become
`{"offloaded_input": <a note with its ref>}` (the input's JSON text stored). A result or input
that its replacement would not make smaller, one that is no text (an image), a marker already,
or a call to the proxy's own tools is left as it is; a tool use counts as cleared when its result
or its input was replaced. When all of it frees fewer tokens than `clear_at_least`, nothing is
cleared (as Anthropic documents).

Both are pure functions of (items, edit, counter, namespace): the same history always gives the
same bytes, so a prefix cleared on one turn is cleared the same way on the next. The edits run
in the order given (thinking first); each reports what the provider would in
`context_management.applied_edits` (None when it cleared nothing).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from proxy.core import texts
from proxy.core.compaction import Edited, Offload
from proxy.core.jsonio import JsonObject, string_or
from proxy.core.texts import is_marker, make_ref, tool_result_marker
from proxy.core.tokens import TokenCounter
from proxy.formats.messages.edits_config import ClearThinking, ClearToolUses, Edit
from proxy.formats.messages.items import (
    MessagesView,
    block_type,
    input_text,
    is_part,
    is_summary,
    is_tool_use,
    tool_result_block,
)

THINKING_BLOCKS = ("thinking", "redacted_thinking")


def _opens_turn(item: Any, view: MessagesView) -> bool:
    """A user message that is not only tool results starts the next exchange."""
    return view.role(item) == "user" and not is_part(item) and not is_summary(item)


def clear_thinking(
    items: list[Any], edit: ClearThinking, view: MessagesView, *, counter: TokenCounter
) -> tuple[list[Any], JsonObject | None]:
    """(items, applied edit or None): see the module docstring."""
    if edit.keep is None:
        return items, None
    turns: list[list[int]] = []  # per assistant turn with thinking: its messages that have some
    open_turn = False
    for i, item in enumerate(items):
        if _opens_turn(item, view):
            open_turn = False
        elif view.role(item) == "assistant" and isinstance(item.get("content"), list):
            if any(block_type(b) in THINKING_BLOCKS for b in item["content"]):
                if not open_turn:
                    turns.append([])
                    open_turn = True
                turns[-1].append(i)
    older = turns[: max(0, len(turns) - edit.keep)]
    out = list(items)
    cleared_turns = cleared_tokens = 0
    for turn in older:
        cleared = False
        for i in turn:
            rest = [b for b in items[i]["content"] if block_type(b) not in THINKING_BLOCKS]
            if not rest:
                continue  # an assistant message may not be empty
            out[i] = {**items[i], "content": rest}
            cleared_tokens += counter.message(items[i]) - counter.message(out[i])
            cleared = True
        cleared_turns += cleared
    if not cleared_turns:
        return items, None
    return out, {"type": edit.type, "cleared_thinking_turns": cleared_turns, "cleared_input_tokens": cleared_tokens}


@dataclass(frozen=True)
class _Use:
    item: int  # the assistant item holding the tool_use block
    block: int  # its index in that item's content
    id: str
    name: str


def tool_uses(items: list[Any], view: MessagesView) -> list[_Use]:
    """Every client `tool_use` block of the history, in order (the proxy's own tools left out)."""
    uses = []
    for i, item in enumerate(items):
        if view.role(item) != "assistant" or not isinstance(item.get("content"), list):
            continue
        for k, block in enumerate(item["content"]):
            if is_tool_use(block) and isinstance(block.get("id"), str):
                name = string_or(block.get("name"), "")
                if name not in view.injected_names:
                    uses.append(_Use(i, k, block["id"], name))
    return uses


def _triggered(edit: ClearToolUses, input_tokens: int, uses: int) -> bool:
    measured = input_tokens if edit.trigger_kind == "input_tokens" else uses
    return measured > edit.trigger_value


def clear_tool_uses(
    items: list[Any],
    edit: ClearToolUses,
    view: MessagesView,
    *,
    counter: TokenCounter,
    namespace: str,
    input_tokens: int,
) -> tuple[list[Any], JsonObject | None, list[Offload]]:
    """(items, applied edit or None, what to store): see the module docstring. `input_tokens`:
    the request's, as the trigger measures them (system and tools included)."""
    uses = tool_uses(items, view)
    if not _triggered(edit, input_tokens, len(uses)):
        return items, None, []
    candidates = [u for u in uses[: max(0, len(uses) - edit.keep)] if u.name not in edit.exclude_tools]
    if not candidates:
        return items, None, []
    results: dict[str, int] = {}
    for i, item in enumerate(items):
        call = view.answers(item)
        if call is not None:
            results.setdefault(call, i)
    out = list(items)
    offloads: list[Offload] = []
    cleared: set[str] = set()
    for use in candidates:
        at = results.get(use.id)
        if at is not None and _clear_result(out, at, view, counter=counter, namespace=namespace, offloads=offloads):
            cleared.add(use.id)
        if edit.clears_input(use.name) and _clear_input(out, use, counter, namespace=namespace, offloads=offloads):
            cleared.add(use.id)
    freed = counter.messages(items) - counter.messages(out)
    if not cleared or freed < max(edit.clear_at_least, 1):
        return items, None, []
    return out, {"type": edit.type, "cleared_tool_uses": len(cleared), "cleared_input_tokens": freed}, offloads


def _clear_result(
    out: list[Any], at: int, view: MessagesView, *, counter: TokenCounter, namespace: str, offloads: list[Offload]
) -> bool:
    item = out[at]
    text = view.tool_text(item)
    if text is None or is_marker(text) or tool_result_block(item) is None:
        return False
    tokens = counter.text(text)
    ref = make_ref(namespace, "tool_result", text)
    replaced = view.with_tool_text(item, tool_result_marker(text, ref, tokens))
    if counter.message(replaced) >= counter.message(item):
        return False
    out[at] = replaced
    offloads.append(Offload(ref, "tool_result", text, tokens))
    return True


def _clear_input(out: list[Any], use: _Use, counter: TokenCounter, *, namespace: str, offloads: list[Offload]) -> bool:
    item = out[use.item]
    block = item["content"][use.block]
    value = block.get("input")
    if _is_cleared_input(value):
        return False
    text = input_text(value)
    tokens = counter.text(text)
    ref = make_ref(namespace, "tool_input", text)
    new_block = {**block, "input": {texts.CLEARED_INPUT_KEY: texts.cleared_tool_input(ref, tokens)}}
    if counter.content([new_block]) >= counter.content([block]):
        return False
    content = list(item["content"])
    content[use.block] = new_block
    out[use.item] = {**item, "content": content}
    offloads.append(Offload(ref, "tool_input", text, tokens))
    return True


def _is_cleared_input(value: Any) -> bool:
    return (
        type(value) is dict
        and len(value) == 1
        and type(value.get(texts.CLEARED_INPUT_KEY)) is str
        and value[texts.CLEARED_INPUT_KEY].startswith("[offloaded tool input: ")
    )


def apply_edits(
    items: list[Any],
    edits: Collection[Edit],
    view: MessagesView,
    *,
    counter: TokenCounter,
    namespace: str,
    fixed_tokens: int,
    clear_tool_uses_: bool = True,
) -> Edited:
    """Every clearing edit of `edits`, in order (others are not this module's). `fixed_tokens`:
    the request's tokens outside the history (system, tools), counted towards an input_tokens
    trigger. `clear_tool_uses_` False: that edit is skipped (nothing could be stored)."""
    result = Edited(items)
    for edit in edits:
        if isinstance(edit, ClearThinking):
            result.items, applied = clear_thinking(result.items, edit, view, counter=counter)
            offloads: list[Offload] = []
        elif isinstance(edit, ClearToolUses) and clear_tool_uses_:
            tokens = fixed_tokens + counter.messages(result.items)
            result.items, applied, offloads = clear_tool_uses(
                result.items, edit, view, counter=counter, namespace=namespace, input_tokens=tokens
            )
        else:
            continue
        if applied is not None:
            result.applied.append(applied)
            result.offloads += offloads
            result.cleared_tokens += applied["cleared_input_tokens"]
    return result
