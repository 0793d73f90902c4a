"""What the proxy does in place of Anthropic's context management, for a Messages upstream
without it: its compaction (`MessagesCompaction`: `compaction` blocks expanded,
`compact_20260112` thresholds read, the answer paused after a compaction), its clearing edits
(`MessagesEdits`, over `proxy.formats.messages._clearing_edits`), and the emulated
`anthropic-beta` values the upstream is not sent (`without_emulated_betas`). Pure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from proxy.core.compaction import Edited, Expanded, Records, Threshold, TokenError, is_ours
from proxy.core.jsonio import JsonObject
from proxy.core.texts import INJECTED_TOOLS
from proxy.core.tokens import TokenCounter
from proxy.errors import Kind, ProxyError
from proxy.formats.context_threshold import bad, entries, token_count
from proxy.formats.messages._clearing_edits import apply_edits, parse_context_management
from proxy.formats.messages._items import MessagesView
from proxy.formats.messages._request import history, messages_of
from proxy.formats.messages._rounds import MessagesRounds, block_events

# --- threshold ---
# The threshold compaction a Messages `context_management` asks for: its `compact_20260112` edit (`proxy.formats.context_threshold`).

ANTHROPIC_DEFAULT_TRIGGER = 150_000  # compact_20260112's default trigger (input tokens)
COMPACT_EDIT = "compact_20260112"


def messages_threshold(asked: Any) -> Threshold | None:
    """The `compact_20260112` edit of a Messages `context_management` (None: none). ProxyError
    400 for a malformed one. Other edit types are left to their own emulation."""
    if asked is None:
        return None
    if not isinstance(asked, dict):
        raise bad("context_management must be an object.", "context_management")
    edits = asked.get("edits")
    if edits is None:
        return None
    found: Threshold | None = None
    for i, edit in enumerate(entries(edits, "context_management.edits")):
        if edit["type"] != COMPACT_EDIT:
            continue
        param = f"context_management.edits[{i}]"
        if found is not None:
            raise bad(f"{param} is a second {COMPACT_EDIT} edit; one at most.", param)
        trigger = edit.get("trigger")
        tokens = ANTHROPIC_DEFAULT_TRIGGER
        if trigger is not None:
            if not isinstance(trigger, dict) or trigger.get("type") != "input_tokens":
                raise bad(f'{param}.trigger must be {{"type": "input_tokens", "value": N}}.', f"{param}.trigger")
            tokens = token_count(trigger.get("value"), f"{param}.trigger.value")
        pause = edit.get("pause_after_compaction", False)
        if not isinstance(pause, bool):
            raise bad(f"{param}.pause_after_compaction must be a boolean.", f"{param}.pause_after_compaction")
        instructions = edit.get("instructions")
        if instructions is not None and (not isinstance(instructions, str) or not instructions.strip()):
            raise bad(f"{param}.instructions must be a non-empty string.", f"{param}.instructions")
        found = Threshold(tokens, pause, instructions)
    return found


# --- betas ---
# The `anthropic-beta` values of what the proxy emulates, taken out of the headers that go
# upstream: an upstream that does not apply context management may refuse a beta it does not
# know (the proxy applies it instead).
#
# One place for every emulated beta: `EMULATED_BETAS` lists them (add a value there); only those
# values are removed, the others stay in their order, a header left with none is dropped.

EMULATED_BETAS = frozenset(
    {
        "context-management-2025-06-27",  # the clearing edits (proxy.turn._context_management)
        "compact-2026-01-12",  # threshold compaction (proxy.formats.messages._emulation, proxy.turn._context_management)
    }
)


def without_emulated_betas(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """`headers` (raw name/value pairs) with the emulated values out of every `anthropic-beta`."""
    out: list[tuple[bytes, bytes]] = []
    for name, value in headers:
        if name.lower() == b"anthropic-beta":
            values = [v.strip() for v in value.split(b",") if v.strip()]
            kept = [v for v in values if v.decode("latin-1") not in EMULATED_BETAS]
            if not kept:
                continue
            if len(kept) != len(values):  # untouched otherwise: byte for byte
                value = b",".join(kept)
        out.append((name, value))
    return out


# --- compaction_blocks ---
# Messages `compaction` blocks in a request, as the proxy forwards them (the Messages
# counterpart of `proxy.formats.responses._compaction`).
#
# Anthropic ignores everything before the newest `compaction` block and reads the block as the
# summary of it; a block whose `content` is null is a failed compaction, a no-op. Every block of
# every message is read (several in one message, blocks of ours next to the provider's or failed
# ones). A block carrying one of the proxy's tokens (a compaction the proxy made,
# `proxy.turn._context_management`) is never forwarded as it is, whichever way the request goes:
#
# - the newest block that is not a no-op is ours: replaced by what its token stands for (the
#   messages the proxy forwarded that turn: its summary with `ref=`, the messages it kept);
#   everything before it is dropped, older compaction blocks of the holding message included;
# - it is the provider's: relayed, it goes on unchanged and the blocks of ours before it are
#   dropped (the provider ignores what precedes its block; ours must not reach it); emulated,
#   its `content` (the summary, readable) goes on as a text block, where the block was in a user
#   message, or in a user message of its own before an assistant message holding it (the
#   history still opens with a user message), everything before it dropped;
# - failed blocks (null `content`, not ours) are dropped when emulating (no upstream could read
#   them), relayed unchanged otherwise; only ours count past them.
#
# The holding message's other blocks (the answer that came with the compaction) stay after it. A
# record holding a block of ours (one written before records were kept free of them) is expanded
# in turn, a bounded number of times.

MAX_NESTED = 8  # records expanded inside one another (records written now never nest)


def _blocks(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def _is_compaction(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "compaction"


def _refused(param: str, why: str) -> ProxyError:
    return ProxyError(
        Kind.BAD_REQUEST,
        f"{param} is a compaction block this proxy cannot use: {why}.",
        code="invalid_compaction",
        param=param,
    )


def _record_messages(items: Any, param: str) -> list[dict[str, Any]]:
    if not isinstance(items, list) or not all(
        isinstance(m, dict) and m.get("role") in ("user", "assistant") and "type" not in m for m in items
    ):  # a Responses item has a type
        raise _refused(param, "its token stands for no Messages history (it was made for another API)")
    return items


def _checked(block: dict[str, Any], param: str) -> tuple[Any, Any]:
    content, sealed = block.get("content"), block.get("encrypted_content")
    if content is not None and not isinstance(content, str):
        raise _refused(param, f"its content is {type(content).__name__}, not a string or null")
    if sealed is not None and not isinstance(sealed, str):
        raise _refused(param, f"its encrypted_content is {type(sealed).__name__}, not a string or null")
    return content, sealed


def _compactions(messages: list[Any]) -> list[tuple[int, int]]:
    """(message, block) of every compaction block, in order: the one walk of every block."""
    found: list[tuple[int, int]] = []
    for i, message in enumerate(messages):
        for j, block in enumerate(_blocks(message)):
            if isinstance(block, dict) and block.get("type") == "compaction":
                found.append((i, j))
    return found


def _newest(
    messages: list[Any], compactions: list[tuple[int, int]], *, names: str | None
) -> tuple[int, int, bool] | None:
    """The newest block that is not a no-op: (message, block, ours?). Every block is checked."""
    found = None
    for i, j in reversed(compactions):
        content, sealed = _checked(messages[i]["content"][j], names or f"messages[{i}].content[{j}]")
        if found is None and (is_ours(sealed) or content is not None):
            found = (i, j, is_ours(sealed))
    return found


def _without(messages: list[Any], drop: Callable[[Any], bool]) -> list[Any]:
    """`messages` less the compaction blocks `drop(block)` selects (a message left empty goes too)."""
    out: list[Any] = []
    for message in messages:
        blocks = _blocks(message)
        if not any(_is_compaction(b) and drop(b) for b in blocks):
            out.append(message)
            continue
        rest = [b for b in blocks if not (_is_compaction(b) and drop(b))]
        if rest:
            out.append({**message, "content": rest})
    return out


def _failed(block: Any) -> bool:
    return block.get("content") is None and not is_ours(block.get("encrypted_content"))


def _ours(block: Any) -> bool:
    return is_ours(block.get("encrypted_content"))


async def replace_compaction_blocks(messages: list[Any], records: Records, *, emulating: bool) -> list[Any] | None:
    """The messages as they go on (see the module docstring), or None when unchanged.
    ProxyError 400 for a block whose fields are of the wrong type, or whose token is another
    namespace's, malformed or expired."""
    out, changed, names = messages, False, None
    for _ in range(MAX_NESTED):
        compactions = _compactions(out)
        if not compactions:
            return out if changed else None
        found = _newest(out, compactions, names=names)
        if found is None or (not found[2] and not emulating):
            if any(emulating or _ours(out[i]["content"][j]) for i, j in compactions):
                # emulating: every block left is a failed one (a no-op); relaying: ours before the provider's
                return _without(out, (lambda b: True) if emulating else _ours)
            return out if changed else None
        i, j, ours = found
        holder = out[i]
        blocks = _blocks(holder)
        param = names or f"messages[{i}].content[{j}]"
        block = blocks[j]
        # the holder's other blocks: the answer that came with the compaction (older compaction
        # blocks before it are superseded; failed ones after it are no-ops)
        rest = [b for k, b in enumerate(blocks) if k != j and not (_is_compaction(b) and (k < j or emulating))]
        later = out[i + 1 :] if not emulating else _without(out[i + 1 :], _failed)
        after = ([{**holder, "content": rest}] if rest else []) + later
        if not ours:  # emulating: the provider's summary as text
            content = block["content"]
            if content == "":
                raise _refused(param, "its content is empty")
            text: dict[str, Any] = {"type": "text", "text": content}
            if "cache_control" in block:
                text["cache_control"] = block["cache_control"]
            if holder.get("role") == "user":
                kept_before = [b for k, b in enumerate(blocks) if k < j and not _is_compaction(b)]
                return [{**holder, "content": [*kept_before, text, *rest[len(kept_before) :]]}, *later]
            return [{"role": "user", "content": [text]}, *after]
        try:
            stands_for = await records.stands_for(block["encrypted_content"])
        except TokenError as exc:
            raise _refused(param, str(exc)) from None
        out, changed, names = [*_record_messages(stands_for, param), *after], True, param
    raise _refused(names or "messages", f"its record holds compaction blocks nested more than {MAX_NESTED} deep")


# --- compaction ---
# The answer to a Messages turn paused after an emulated compaction (`compact_20260112` with
# `pause_after_compaction`): the `compaction` block alone, `stop_reason: "compaction"`, as
# Anthropic answers it; the upstream is asked for no turn. Pure.


def _usage(tokens_in: int, tokens_out: int) -> JsonObject:
    counts = {
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    return {**counts, "iterations": [{"type": "compaction", **counts}]}


def paused_message(block: JsonObject, *, model: Any, tokens_in: int, tokens_out: int) -> JsonObject:
    """The message: `block` alone, its id derived from the block (the same compaction, the same id)."""
    digest = hashlib.sha256(str(block.get("encrypted_content") or block.get("content")).encode()).hexdigest()
    return {
        "id": f"msg_cmp{digest[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model if isinstance(model, str) else "unknown",
        "content": [block],
        "stop_reason": "compaction",
        "stop_sequence": None,
        "usage": _usage(tokens_in, tokens_out),
    }


def paused_events(message: JsonObject) -> list[JsonObject]:
    """The same message streamed: message_start, the block's events, message_delta (with the
    message's `context_management`, if any), message_stop."""
    usage = message["usage"]
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "usage": {k: v for k, v in usage.items() if k != "iterations"} | {"output_tokens": 0},
    }
    out = [{"type": "message_start", "message": start}]
    for index, block in enumerate(message["content"]):
        out += block_events(index, block)
    delta = {"type": "message_delta", "delta": {"stop_reason": "compaction", "stop_sequence": None}, "usage": usage}
    if "context_management" in message:
        delta["context_management"] = message["context_management"]
    out.append(delta)
    out.append({"type": "message_stop"})
    return out


# --- emulation ---
# What the proxy does in place of Anthropic's context management, for a Messages upstream
# without it: its compaction (a `proxy.core.wire.ProviderCompaction`: `compaction` blocks,
# `compaction_blocks`; `compact_20260112` thresholds, `threshold`; the answer paused after one,
# `compaction`) and its clearing edits (a `proxy.core.wire.ClearingEdits`: `edits`,
# `edits_config`). Pure.


def _index(text: str) -> int | None:
    return int(text) if text.isdigit() else None


class MessagesCompaction:
    records_api = "messages"

    def threshold(self, asked: Any) -> Threshold | None:
        return messages_threshold(asked)

    def settles(self, body: dict[str, Any], path: str) -> bool:
        """`messages[i].content[j].encrypted_content` of a `compaction` block."""
        if not path.startswith("messages["):
            return False
        i, _, rest = path.removeprefix("messages[").partition("].content[")
        at, block = _index(i), _index(rest.removesuffix("].encrypted_content"))
        if at is None or block is None:
            return False
        try:
            return bool(body["messages"][at]["content"][block].get("type") == "compaction")
        except (KeyError, IndexError, TypeError, AttributeError):
            return False

    async def expand(
        self, body: dict[str, Any], items: list[Any], records: Records, *, emulating: bool
    ) -> Expanded | None:
        if not isinstance(body.get("messages"), list):
            return None
        messages = await replace_compaction_blocks(body["messages"], records, emulating=emulating)
        if messages is None:
            return None
        expanded = {**body, "messages": messages}
        return Expanded(expanded, history(expanded), messages, "messages")

    def record(self, reduced: list[Any]) -> list[Any]:
        """The messages forwarded now."""
        return messages_of(reduced)

    def lead(self, summary: str, token: str) -> dict[str, Any]:
        return {"type": "compaction", "content": summary, "encrypted_content": token}

    def compacts_now(self, body: dict[str, Any], items: list[Any]) -> bool:
        return False  # Anthropic has no "compact now"

    def rounds(
        self,
        body: dict[str, Any],
        items: list[Any],
        tools: Sequence[dict[str, Any]],
        *,
        extra_usage: dict[str, Any] | None,
        lead: Sequence[dict[str, Any]],
    ) -> MessagesRounds:
        return MessagesRounds(body, items, tools, names=INJECTED_TOOLS, extra_usage=extra_usage, lead=lead)

    def paused_answer(
        self, lead: list[dict[str, Any]], *, body: dict[str, Any], created_at: int, tokens_in: int, tokens_out: int
    ) -> dict[str, Any]:
        return paused_message(lead[0], model=body.get("model"), tokens_in=tokens_in, tokens_out=tokens_out)

    def paused_events(self, answer: dict[str, Any]) -> list[dict[str, Any]]:
        return paused_events(answer)


class MessagesEdits:
    def __init__(self, view: MessagesView) -> None:
        self.view = view

    def apply(
        self,
        asked: Any,
        items: list[Any],
        *,
        counter: TokenCounter,
        namespace: str,
        fixed_tokens: int,
        tool_uses: bool = True,
    ) -> Edited:
        edits = parse_context_management(asked)
        return apply_edits(
            items,
            edits,
            self.view,
            counter=counter,
            namespace=namespace,
            fixed_tokens=fixed_tokens,
            clear_tool_uses_=tool_uses,
        )
