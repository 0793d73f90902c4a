"""Messages `compaction` blocks in a request, as the proxy forwards them (the Messages
counterpart of `tokens_in_input`).

Anthropic ignores every message before the newest message holding a `compaction` block and
reads the block as the summary of them. An upstream the proxy emulates context management for
knows no such block, so the proxy forwards, in their place:

- the block's `encrypted_content` is one of the proxy's tokens (a compaction the proxy made,
  `proxy.emulation.inline`): what the token stands for (the messages the proxy forwarded that
  turn: its summary with `ref=`, the messages it kept) — whichever way the request goes, no
  upstream can read the token;
- otherwise, when emulating: the block's `content` (the summary, readable) as a text block,
  where the block was in a user message, or in a user message of its own before an assistant
  message holding it (the history still opens with a user message); a block whose content is
  null is a failed compaction, which Anthropic treats as a no-op: it is dropped alone.

The holding message's other blocks (the answer that came with the compaction) stay after it.
Relayed to a native upstream, a block that is not ours goes on unchanged.
"""

from __future__ import annotations

from typing import Any

from proxy.core.compaction_token import TokenError, is_ours
from proxy.errors import ProxyError
from proxy.offload.compaction_records import CompactionRecords


def _blocks(message: Any) -> list:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def _is_compaction(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "compaction"


def _newest(messages: list[Any]) -> tuple[int, int] | None:
    for i in range(len(messages) - 1, -1, -1):
        blocks = _blocks(messages[i])
        for j in range(len(blocks) - 1, -1, -1):
            if _is_compaction(blocks[j]):
                return i, j
    return None


def _refused(param: str, why: str) -> ProxyError:
    return ProxyError(400, f"{param} is a compaction block this proxy cannot use: {why}.",
                      code="invalid_compaction", param=param)


def _record_messages(items: Any, param: str) -> list[dict]:
    if not isinstance(items, list) or not all(isinstance(m, dict) and m.get("role") in ("user", "assistant")
                                              and "type" not in m for m in items):  # a Responses item has a type
        raise _refused(param, "its token stands for no Messages history (it was made for another API)")
    return items


async def replace_compaction_blocks(messages: list[Any], records: CompactionRecords, *,
                                    emulating: bool) -> list[Any] | None:
    """The messages as they go on (see the module docstring), or None when unchanged.
    ProxyError 400 for a block whose fields are of the wrong type, or whose token is another
    namespace's, malformed or expired."""
    found = _newest(messages)
    if found is None:
        return None
    i, j = found
    holder = messages[i]
    block = _blocks(holder)[j]
    param = f"messages[{i}].content[{j}]"
    content, sealed = block.get("content"), block.get("encrypted_content")
    if content is not None and not isinstance(content, str):
        raise _refused(param, f"its content is {type(content).__name__}, not a string or null")
    if sealed is not None and not isinstance(sealed, str):
        raise _refused(param, f"its encrypted_content is {type(sealed).__name__}, not a string or null")
    ours = is_ours(sealed)
    if not ours and not emulating:
        return None  # the provider reads its own block
    rest = [b for k, b in enumerate(_blocks(holder)) if k != j]
    after = ([{**holder, "content": rest}] if rest else []) + messages[i + 1:]
    if ours:
        try:
            stands_for = await records.stands_for(sealed)
        except TokenError as exc:
            raise _refused(param, str(exc)) from None
        return [*_record_messages(stands_for, param), *after]
    if content is None:  # a failed compaction: a no-op
        return [*messages[:i], *([{**holder, "content": rest}] if rest else []), *messages[i + 1:]]
    if content == "":
        raise _refused(param, "its content is empty")
    text: dict[str, Any] = {"type": "text", "text": content}
    if "cache_control" in block:
        text["cache_control"] = block["cache_control"]
    if holder.get("role") == "user":
        return [{**holder, "content": [*rest[:j], text, *rest[j:]]}, *messages[i + 1:]]
    return [{"role": "user", "content": [text]}, *after]
