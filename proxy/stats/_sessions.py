"""Session ids for the statistics of clients that send no `X-Offload-Session` (Codex CLI,
Claude Code, openai-agents): derived from the conversation itself.

A conversation resends its whole history every turn, and its start does not change: the
system prompt (Anthropic's top-level `system`, Responses' `instructions`, a chat system
message) and the items up to and including the first user message. Their digest, with the
tenant's namespace, names the session: `auto-` and 16 hex digits. `cache_control` markers are
left out (Claude Code moves them to the newest message every turn). A request continuing a
`conversation` stored upstream is named by its conversation's id instead; one continuing from
a `previous_response_id` carries only its new items, and is named after the response it
continues (below).

Which session a stored Responses answer belongs to, for the turns that continue from it
(`Replies`).

A request continuing with `previous_response_id` carries only its new items, so its session
cannot be derived from its history (`session_from_history`): it is the session of the
response it names. The recorder remembers, for each stored answer of a turn whose session was
derived, its response id → that session, here (per worker, bounded) and in the store (for the
other workers and replicas, with the statistics' retention), and looks a continuing turn's
session up the same way when it flushes it. Response ids are hashed into key names, never
kept raw; session ids are sealed with encryption at rest.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from hashlib import blake2b
from typing import Any

from proxy.core import jsonio
from proxy.offload.tenant import key
from proxy.store import sealing as resealing
from proxy.store.base import Store
from proxy.store.sealing import Sealer

PREFIX = "auto-"
MAX_SESSION_ITEMS = 32  # items looked at for the first user message (else those are the start)
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


def session_from_history(
    namespace: str, items: Sequence[Any], role: Callable[[Any], str], *, system: Any = None
) -> str | None:
    """The session of a conversation whose history is `items` (`role`: the format's view of an
    item's role), `system` its system prompt kept outside the items; None without items."""
    first: list[Any] = []
    for item in items[:MAX_SESSION_ITEMS]:
        first.append(_plain(item))
        if role(item) == "user":
            break
    if not first:
        return None
    return _named(namespace, b"history", jsonio.dumps([_plain(system), first]))


def session_from_name(namespace: str, kind: str, name: str) -> str:
    """The session named by an id of the upstream's: a `conversation`, or the response a
    continuation starts from when nothing is known of it."""
    return _named(namespace, kind.encode(), name.encode("utf-8", "surrogatepass"))


MAX_KNOWN = 10_000  # links kept in memory per worker
MAX_ID_CHARS = 256


def reply_key(namespace: str, response_id: str, sealer: Sealer) -> str:
    digest = hashlib.sha256(response_id.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return key(namespace, "stats", f"reply:{sealer.key_name(digest, namespace)}")


class Replies:
    def __init__(self, max_known: int = MAX_KNOWN) -> None:
        self.max_known = max_known
        self._known: OrderedDict[tuple[str, str], str] = OrderedDict()

    async def find(self, store: Store, namespace: str, response_id: str, *, sealer: Sealer) -> str | None:
        """The session of the answer `response_id`, if remembered (here, else in the store)."""
        if len(response_id) > MAX_ID_CHARS:
            return None
        if (session := self._known.get((namespace, response_id))) is not None:
            return session
        store_key = reply_key(namespace, response_id, sealer)
        raw = await store.get(store_key)
        opened = await resealing.opened(store, store_key, raw, sealer=sealer) if raw is not None else None
        return jsonio.stored_text(opened) if opened else None

    def note(self, namespace: str, response_id: str, *, session: str) -> None:
        """The link in this worker's memory, at once: the turn continuing from the answer may
        come before it is written to the store (`remember`)."""
        if len(response_id) > MAX_ID_CHARS:
            return
        self._known[(namespace, response_id)] = session
        self._known.move_to_end((namespace, response_id))
        while len(self._known) > self.max_known:
            self._known.popitem(last=False)

    async def remember(
        self, store: Store, namespace: str, response_id: str, *, session: str, ttl: int, sealer: Sealer
    ) -> None:
        if len(response_id) > MAX_ID_CHARS:
            return
        self.note(namespace, response_id, session=session)
        store_key = reply_key(namespace, response_id, sealer)
        await store.put(store_key, sealer.seal(jsonio.text_bytes(session), store_key), ttl)
