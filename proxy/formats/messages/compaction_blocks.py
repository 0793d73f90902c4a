"""Messages `compaction` blocks in a request, as the proxy forwards them (the Messages
counterpart of `proxy.formats.responses.compaction_items`).

Anthropic ignores everything before the newest `compaction` block and reads the block as the
summary of it; a block whose `content` is null is a failed compaction, a no-op. Every block of
every message is read (several in one message, blocks of ours next to the provider's or failed
ones). A block carrying one of the proxy's tokens (a compaction the proxy made,
`proxy.turn._context_compaction`) is never forwarded as it is, whichever way the request goes:

- the newest block that is not a no-op is ours: replaced by what its token stands for (the
  messages the proxy forwarded that turn: its summary with `ref=`, the messages it kept);
  everything before it is dropped, older compaction blocks of the holding message included;
- it is the provider's: relayed, it goes on unchanged and the blocks of ours before it are
  dropped (the provider ignores what precedes its block; ours must not reach it); emulated,
  its `content` (the summary, readable) goes on as a text block, where the block was in a user
  message, or in a user message of its own before an assistant message holding it (the
  history still opens with a user message), everything before it dropped;
- failed blocks (null `content`, not ours) are dropped when emulating (no upstream could read
  them), relayed unchanged otherwise; only ours count past them.

The holding message's other blocks (the answer that came with the compaction) stay after it. A
record holding a block of ours (one written before records were kept free of them) is expanded
in turn, a bounded number of times.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proxy.core.compaction import Records, TokenError, is_ours
from proxy.errors import Kind, ProxyError

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


def _newest(messages: list[Any], *, names: str | None) -> tuple[int, int, bool] | None:
    """The newest block that is not a no-op: (message, block, ours?). Every block is checked."""
    found = None
    for i in range(len(messages) - 1, -1, -1):
        blocks = _blocks(messages[i])
        for j in range(len(blocks) - 1, -1, -1):
            if _is_compaction(blocks[j]):
                content, sealed = _checked(blocks[j], names or f"messages[{i}].content[{j}]")
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
        found = _newest(out, names=names)
        if found is None or (not found[2] and not emulating):
            if any(_is_compaction(b) and (emulating or _ours(b)) for m in out for b in _blocks(m)):
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
