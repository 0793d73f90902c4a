"""Offload events (compaction, compression, reload, summary failure), per tenant and session."""

from __future__ import annotations

import json
import time
from typing import Any

from proxy.store import Store, StoreUnavailable
from proxy.tenant import key

MAX_EVENTS = 500
NO_SESSION = "-"


def event(type_: str, **fields: Any) -> dict[str, Any]:
    return {"type": type_, "time": round(time.time(), 3), **fields}


async def record(store: Store, namespace: str, session: str | None, events: list[dict], ttl: int) -> None:
    """Append events; an unreachable store loses them (accounting never fails a request)."""
    try:
        for e in events:
            await store.push(key(namespace, "events", session or NO_SESSION), json.dumps(e).encode(),
                             max_len=MAX_EVENTS, ttl=ttl)
    except StoreUnavailable:
        pass


async def recent(store: Store, namespace: str, session: str | None, limit: int = MAX_EVENTS) -> list[dict]:
    items = await store.items(key(namespace, "events", session or NO_SESSION))
    return [json.loads(item) for item in items[-limit:]]
