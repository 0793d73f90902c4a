"""Session ids for the statistics of clients that send no `X-Offload-Session` (Codex CLI,
Claude Code, openai-agents): derived from the conversation itself.

A conversation resends its whole history every turn, and its start does not change: the
system prompt (Anthropic's top-level `system`, Responses' `instructions`, a chat system
message) and the items up to and including the first user message. Their digest, with the
tenant's namespace, names the session: `auto-` and 16 hex digits. `cache_control` markers are
left out (Claude Code moves them to the newest message every turn). A request continuing a
`conversation` stored upstream is named by its conversation's id instead; one continuing from
a `previous_response_id` carries only its new items, and is named after the response it
continues (`proxy.stats.replies`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from hashlib import blake2b
from typing import Any

from proxy.core import jsonio

PREFIX = "auto-"
MAX_ITEMS = 32  # items looked at for the first user message (else those are the start)
UNSTABLE_KEYS = ("cache_control",)


def _plain(value: Any) -> Any:
    """`value` without the keys that move between the turns of one conversation (an item, its
    content blocks, or a list of system blocks)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) if k == "content" else v for k, v in value.items() if k not in UNSTABLE_KEYS}
    return value


def _named(namespace: str, *parts: bytes) -> str:
    digest = blake2b(digest_size=8, person=b"offload-session")
    digest.update(namespace.encode("utf-8", "surrogatepass"))
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return PREFIX + digest.hexdigest()


def from_history(namespace: str, items: Sequence[Any], role: Callable[[Any], str], *, system: Any = None) -> str | None:
    """The session of a conversation whose history is `items` (`role`: the format's view of an
    item's role), `system` its system prompt kept outside the items; None without items."""
    first: list[Any] = []
    for item in items[:MAX_ITEMS]:
        first.append(_plain(item))
        if role(item) == "user":
            break
    if not first:
        return None
    return _named(namespace, b"history", jsonio.dumps([_plain(system), first]))


def from_name(namespace: str, kind: str, name: str) -> str:
    """The session named by an id of the upstream's: a `conversation`, or the response a
    continuation starts from when nothing is known of it."""
    return _named(namespace, kind.encode(), name.encode("utf-8", "surrogatepass"))
