"""Anthropic's clearing edits done by the proxy: the `context_management` config read and checked
(`parse_context_management`) and the edits applied to Messages history items (`apply_edits`). Pure.
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
from proxy.errors import Kind, ProxyError
from proxy.formats.messages._items import (
    MessagesView,
    block_type,
    input_text,
    is_part,
    is_summary,
    is_tool_use,
    tool_result_block,
)

# --- edits_config ---
# Anthropic's `context_management` config (beta `context-management-2025-06-27`), read and
# checked when the proxy applies its edits itself (`proxy.turn._context_management`). Pure.
#
# `{"edits": [...]}`, each edit an object with a `type`:
#
# - `clear_tool_uses_20250919`: `trigger` `{"type": "input_tokens" | "tool_uses", "value": n}`
#   (default 100,000 input tokens), `keep` `{"type": "tool_uses", "value": n}` (default 3),
#   `clear_at_least` `{"type": "input_tokens", "value": n}`, `exclude_tools` (tool names),
#   `clear_tool_inputs` (a boolean, or the names of the tools whose inputs are cleared);
# - `clear_thinking_20251015`: `keep` `{"type": "thinking_turns", "value": n}`, `"all"` or
#   `{"type": "all"}` (default 1 turn); when edits are combined it must come first (as Anthropic
#   requires);
# - `compact_20260112`: known, its fields left to its own emulation.
#
# Anything else (an unknown type or key, another JSON type, a negative or huge count, one edit
# type twice, more than MAX_EDITS edits) is a 400 naming the field, as Anthropic's API answers.

CLEAR_TOOL_USES = "clear_tool_uses_20250919"
CLEAR_THINKING = "clear_thinking_20251015"
COMPACT = "compact_20260112"
KNOWN = (CLEAR_TOOL_USES, CLEAR_THINKING, COMPACT)
MAX_EDITS = 16  # Anthropic knows three edit types, each allowed once: a longer list is refused before it is read
MAX_NAMES = 1000  # tool names in exclude_tools / clear_tool_inputs
MAX_VALUE = 2**31 - 1
DEFAULT_TRIGGER_TOKENS = 100_000
DEFAULT_KEEP_TOOL_USES = 3
DEFAULT_KEEP_THINKING_TURNS = 1


@dataclass(frozen=True)
class ClearToolUses:
    trigger_kind: str = "input_tokens"  # "input_tokens" | "tool_uses"
    trigger_value: int = DEFAULT_TRIGGER_TOKENS
    keep: int = DEFAULT_KEEP_TOOL_USES
    clear_at_least: int = 0
    exclude_tools: frozenset[str] = frozenset()
    clear_inputs: bool | frozenset[str] = False  # True: every cleared tool use's input; a set: those tools'
    type: str = CLEAR_TOOL_USES

    def clears_input(self, name: str) -> bool:
        return self.clear_inputs is True or (isinstance(self.clear_inputs, frozenset) and name in self.clear_inputs)


@dataclass(frozen=True)
class ClearThinking:
    keep: int | None = DEFAULT_KEEP_THINKING_TURNS  # None: "all"
    type: str = CLEAR_THINKING


@dataclass(frozen=True)
class Other:
    """An edit emulated elsewhere (`compact_20260112`): its config as sent."""

    type: str
    config: JsonObject


Edit = ClearToolUses | ClearThinking | Other


def _bad(param: str, why: str) -> ProxyError:
    return ProxyError(
        Kind.BAD_REQUEST,
        f"context_management.{param}: {why}",
        code="invalid_context_management",
        param=f"context_management.{param}",
    )


def _object(value: Any, param: str, allowed: tuple[str, ...]) -> JsonObject:
    if type(value) is not dict:
        raise _bad(param, f"expected an object, got {type(value).__name__}")
    for key in value:
        if key not in allowed:
            raise _bad(f"{param}.{key}", "unknown field")
    return value


def _count(value: Any, param: str, *, minimum: int = 0) -> int:
    if type(value) is not int:
        raise _bad(param, f"expected an integer, got {type(value).__name__}")
    if not minimum <= value <= MAX_VALUE:
        raise _bad(param, f"must be between {minimum} and {MAX_VALUE}")
    return value


def _measure(value: Any, param: str, kinds: tuple[str, ...], *, minimum: int = 0) -> tuple[str, int]:
    """`{"type": one of kinds, "value": n}`."""
    value = _object(value, param, ("type", "value"))
    kind = value.get("type")
    if kind not in kinds:
        raise _bad(f"{param}.type", f"expected one of {', '.join(repr(k) for k in kinds)}")
    if "value" not in value:
        raise _bad(f"{param}.value", "required")
    return kind, _count(value["value"], f"{param}.value", minimum=minimum)


def _names(value: Any, param: str) -> frozenset[str]:
    if type(value) is not list:
        raise _bad(param, f"expected a list of tool names, got {type(value).__name__}")
    if len(value) > MAX_NAMES:
        raise _bad(param, f"at most {MAX_NAMES} tool names")
    for i, name in enumerate(value):
        if type(name) is not str:
            raise _bad(f"{param}[{i}]", f"expected a string, got {type(name).__name__}")
    return frozenset(value)


def _clear_tool_uses(edit: JsonObject, at: str) -> ClearToolUses:
    _object(edit, at, ("type", "trigger", "keep", "clear_at_least", "exclude_tools", "clear_tool_inputs"))
    out: dict[str, Any] = {}
    if edit.get("trigger") is not None:
        out["trigger_kind"], out["trigger_value"] = _measure(
            edit["trigger"], f"{at}.trigger", ("input_tokens", "tool_uses"), minimum=1
        )
    if edit.get("keep") is not None:
        out["keep"] = _measure(edit["keep"], f"{at}.keep", ("tool_uses",))[1]
    if edit.get("clear_at_least") is not None:
        out["clear_at_least"] = _measure(edit["clear_at_least"], f"{at}.clear_at_least", ("input_tokens",))[1]
    if edit.get("exclude_tools") is not None:
        out["exclude_tools"] = _names(edit["exclude_tools"], f"{at}.exclude_tools")
    inputs = edit.get("clear_tool_inputs")
    if type(inputs) is bool:
        out["clear_inputs"] = inputs
    elif inputs is not None:
        out["clear_inputs"] = _names(inputs, f"{at}.clear_tool_inputs")
    return ClearToolUses(**out)


def _clear_thinking(edit: JsonObject, at: str) -> ClearThinking:
    _object(edit, at, ("type", "keep"))
    keep = edit.get("keep")
    if keep is None:
        return ClearThinking()
    if keep == "all" or (type(keep) is dict and keep.get("type") == "all" and len(keep) == 1):
        return ClearThinking(keep=None)
    return ClearThinking(keep=_measure(keep, f"{at}.keep", ("thinking_turns",))[1])


def parse_context_management(config: Any) -> list[Edit]:
    """The edits asked for, checked (see the module docstring); ProxyError 400 otherwise."""
    if type(config) is not dict:
        raise ProxyError(
            Kind.BAD_REQUEST,
            f"context_management: expected an object, got {type(config).__name__}",
            code="invalid_context_management",
            param="context_management",
        )
    for key in config:
        if key != "edits":
            raise _bad(key, "unknown field")
    edits = config.get("edits")
    if edits is None:
        return []
    if type(edits) is not list:
        raise _bad("edits", f"expected a list, got {type(edits).__name__}")
    if len(edits) > MAX_EDITS:
        raise _bad("edits", f"at most {MAX_EDITS} edits (got {len(edits)})")
    out: list[Edit] = []
    seen: set[str] = set()
    for i, edit in enumerate(edits):
        at = f"edits[{i}]"
        if type(edit) is not dict:
            raise _bad(at, f"expected an object, got {type(edit).__name__}")
        kind = edit.get("type")
        if kind not in KNOWN:
            raise _bad(f"{at}.type", f"unknown edit type; expected one of {', '.join(KNOWN)}")
        if kind in seen:
            raise _bad(f"{at}.type", f"{kind} given twice")
        seen.add(kind)
        if kind == CLEAR_THINKING and i > 0:
            raise _bad(f"{at}.type", f"{CLEAR_THINKING} must come first in the edits list when edits are combined")
        if kind == CLEAR_TOOL_USES:
            out.append(_clear_tool_uses(edit, at))
        elif kind == CLEAR_THINKING:
            out.append(_clear_thinking(edit, at))
        else:
            out.append(Other(kind, edit))
    return out


# --- edits ---
# Anthropic's clearing edits applied by the proxy itself, on Messages history items. Pure.
#
# `clear_thinking_20251015` removes the `thinking` and `redacted_thinking` blocks of all but the
# `keep` most recent assistant turns that have some. An assistant *turn* is everything the
# assistant says between two user messages that are not only tool results: the assistant
# messages of one tool loop are one turn (its thinking goes back with the results, as the API
# requires). An assistant message that would be left with no block keeps its thinking.
#
# `clear_tool_uses_20250919` applies once the request is over its `trigger` (more input tokens,
# or more tool uses, than its value): the results of all but the `keep` most recent tool uses
# (`exclude_tools` spared; `keep` counts every tool use, as the provider does) become the proxy's
# tool-result markers (`proxy.core.texts`: a preview, and a `ref=` that `context_reload` returns
# byte for byte), and with `clear_tool_inputs` their `tool_use` inputs become
# `{"offloaded_input": <a note with its ref>}` (the input's JSON text stored). A result or input
# that its replacement would not make smaller, one that is no text (an image), a marker already,
# or a call to the proxy's own tools is left as it is; a tool use counts as cleared when its result
# or its input was replaced. When all of it frees fewer tokens than `clear_at_least`, nothing is
# cleared (as Anthropic documents).
#
# Both are pure functions of (items, edit, counter, namespace): the same history always gives the
# same bytes, so a prefix cleared on one turn is cleared the same way on the next. The edits run
# in the order given (thinking first); each reports what the provider would in
# `context_management.applied_edits` (None when it cleared nothing).

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
