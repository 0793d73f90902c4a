"""Offload events (compaction, compression, reload, summary failure), per tenant and session.

Events hold what the model searched for and the arguments of its reload calls: with encryption
at rest they are sealed like content, and the session id is hashed in the list's key name.
"""

from __future__ import annotations

import json
import time
from typing import Any

from proxy.core.jsonio import JsonObject
from proxy.offload.tenant import key
from proxy.store import Store, StoreUnavailable, resealing
from proxy.store.sealing import Sealer

MAX_EVENTS = 500
NO_SESSION = "-"


def event(type_: str, **fields: Any) -> dict[str, Any]:
    return {"type": type_, "time": round(time.time(), 3), **fields}


def _list_key(namespace: str, session: str | None, sealer: Sealer) -> str:
    return key(namespace, "events", sealer.key_name(session or NO_SESSION, namespace))


async def record(
    store: Store, namespace: str, session: str | None, *, events: list[JsonObject], ttl: int, sealer: Sealer
) -> None:
    """Append events; an unreachable store loses them (accounting never fails a request)."""
    list_key = _list_key(namespace, session, sealer)
    try:
        await resealing.reseal_items(store, list_key, sealer)  # a rotation under way: those pushed before
        for e in events:
            await store.push(list_key, sealer.seal(json.dumps(e).encode(), list_key), max_len=MAX_EVENTS, ttl=ttl)
    except StoreUnavailable:
        pass


async def recent(
    store: Store, namespace: str, session: str | None, *, limit: int = MAX_EVENTS, sealer: Sealer
) -> list[JsonObject]:
    """The newest `limit` events, oldest first; ones that do not open (sealed under another key) are left out."""
    list_key = _list_key(namespace, session, sealer)
    opened = await resealing.opened_items(store, list_key, (await store.items(list_key))[-limit:], sealer=sealer)
    return [json.loads(item) for item in opened if item is not None]
