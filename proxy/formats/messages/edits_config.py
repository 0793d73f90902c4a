"""Anthropic's `context_management` config (beta `context-management-2025-06-27`), read and
checked when the proxy applies its edits itself (`proxy.turn._context_edits`). Pure.

`{"edits": [...]}`, each edit an object with a `type`:

- `clear_tool_uses_20250919`: `trigger` `{"type": "input_tokens" | "tool_uses", "value": n}`
  (default 100,000 input tokens), `keep` `{"type": "tool_uses", "value": n}` (default 3),
  `clear_at_least` `{"type": "input_tokens", "value": n}`, `exclude_tools` (tool names),
  `clear_tool_inputs` (a boolean, or the names of the tools whose inputs are cleared);
- `clear_thinking_20251015`: `keep` `{"type": "thinking_turns", "value": n}`, `"all"` or
  `{"type": "all"}` (default 1 turn); when edits are combined it must come first (as Anthropic
  requires);
- `compact_20260112`: known, its fields left to its own emulation.

Anything else (an unknown type or key, another JSON type, a negative or huge count, one edit
type twice, more than MAX_EDITS edits) is a 400 naming the field, as Anthropic's API answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.core.jsonio import JsonObject
from proxy.errors import Kind, ProxyError

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
