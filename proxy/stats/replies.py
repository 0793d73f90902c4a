"""Which session a stored Responses answer belongs to, for the turns that continue from it.

A request continuing with `previous_response_id` carries only its new items, so its session
cannot be derived from its history (`proxy.stats.session_id`): it is the session of the
response it names. The recorder remembers, for each stored answer of a turn whose session was
derived, its response id → that session, here (per worker, bounded) and in the store (for the
other workers and replicas, with the statistics' retention), and looks a continuing turn's
session up the same way when it flushes it. Response ids are hashed into key names, never
kept raw; session ids are sealed with encryption at rest.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from proxy.core import jsonio
from proxy.offload.tenant import key
from proxy.store import resealing
from proxy.store.base import Store
from proxy.store.sealing import Sealer

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
