"""What a later request continuing a stored exchange needs: the id to continue from, and the
answers to injected calls the client never saw.

After reload rounds, the client holds the first round's response id (a stream announces it
first), but the upstream response holding the whole exchange (the client's input, the
injected calls, their results and the answer) is the last round's. A later request naming the
first id as `previous_response_id` continues from the last one.

When the last round asked for the client's tools and an injected tool at once, the client
gets its calls and the injected one is run by the proxy; its `function_call_output` is kept
here and put in front of the client's next input (which the upstream requires: every call
of a stored response needs its output). For a `conversation` the same holds, keyed by the
conversation id, once.

Per namespace, with the store's idle TTL; an unreachable store only loses the record (the
request then goes up as sent).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from proxy.offload.tenant import key
from proxy.store import Store, StoreUnavailable, resealing
from proxy.store.sealing import Sealer

MAX_ID_CHARS = 256
_ID = re.compile(r"[A-Za-z0-9_-]{1,256}")  # what an upstream response id looks like: nothing else is used


def plain_id(value: object) -> bool:
    """Is `value` an id the proxy may put in a path or a body (`resp_…`)?"""
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def _key(namespace: str, response_id: str, sealer: Sealer) -> str:
    """Ids are the upstream's or the client's text: hashed into the key name, never used raw."""
    digest = hashlib.sha256(response_id.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return key(namespace, "chain", sealer.key_name(digest, namespace))


@dataclass
class Continuation:
    """How to continue from an id the client holds."""

    response_id: str | None = None  # continue from this one instead (None: as sent)
    outputs: list[Any] = field(default_factory=list)  # input items to put first


def conversation_key(conversation: Any) -> str | None:
    """The key a `conversation` (an id, or `{"id": …}`) is remembered under."""
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    return f"conversation\0{conversation}" if isinstance(conversation, str) and conversation else None


async def remember(
    store: Store, namespace: str, name: str, *, continuation: Continuation, ttl: int, sealer: Sealer
) -> None:
    if len(name) > MAX_ID_CHARS or (continuation.response_id is not None and not plain_id(continuation.response_id)):
        return
    store_key = _key(namespace, name, sealer)
    value = json.dumps({"id": continuation.response_id, "outputs": continuation.outputs}).encode()
    try:
        await store.put(store_key, sealer.seal(value, store_key), ttl)
    except StoreUnavailable:
        pass


async def forget(store: Store, namespace: str, name: str, *, sealer: Sealer) -> None:
    try:
        await store.delete(_key(namespace, name, sealer))
    except StoreUnavailable:
        pass


async def resolve(store: Store, namespace: str, name: str, *, ttl: int, sealer: Sealer) -> Continuation | None:
    """How to continue from `name` (a response id, or a `conversation_key`), if remembered."""
    if len(name) > MAX_ID_CHARS:
        return None
    store_key = _key(namespace, name, sealer)
    try:
        value = await store.get(store_key, ttl=ttl)
    except StoreUnavailable:
        return None
    opened = await resealing.opened(store, store_key, value, sealer=sealer) if value is not None else None
    try:
        record = json.loads(opened) if opened else None
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    response_id = record.get("id") if plain_id(record.get("id")) else None
    outputs = record.get("outputs")
    return Continuation(response_id, outputs if isinstance(outputs, list) else [])
