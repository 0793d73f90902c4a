"""Response ids the client got for a stored exchange that lives upstream under another id.

After reload rounds, the client holds the first round's response id (a stream announces it
first), but the upstream response holding the whole exchange (the client's input, the
injected calls, their results and the answer) is the last round's. A later request naming the
first id as `previous_response_id` continues from the last one. Per namespace, with the
store's idle TTL; an unreachable store only loses the mapping (the request then goes up as
sent).
"""

from __future__ import annotations

import hashlib

from proxy.offload.tenant import key
from proxy.store import Store, StoreUnavailable
from proxy.store.sealing import Sealer

MAX_ID_CHARS = 256


def _key(namespace: str, response_id: str, sealer: Sealer) -> str:
    """Ids are the upstream's or the client's text: hashed into the key name, never used raw."""
    digest = hashlib.sha256(response_id.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return key(namespace, "chain", sealer.key_name(digest, namespace))


async def remember(store: Store, namespace: str, first: str, last: str, ttl: int, *, sealer: Sealer) -> None:
    if first == last or len(first) > MAX_ID_CHARS or len(last) > MAX_ID_CHARS:
        return
    name = _key(namespace, first, sealer)
    try:
        await store.put(name, sealer.seal(last.encode("utf-8", "surrogatepass"), name), ttl)
    except StoreUnavailable:
        pass


async def resolve(store: Store, namespace: str, response_id: str, ttl: int, *, sealer: Sealer) -> str | None:
    """The id to continue from instead of `response_id`, if the proxy remembers one."""
    if len(response_id) > MAX_ID_CHARS:
        return None
    name = _key(namespace, response_id, sealer)
    try:
        value = await store.get(name, ttl=ttl)
    except StoreUnavailable:
        return None
    opened = sealer.open(value, name) if value is not None else None
    return opened.decode("utf-8", "replace") if opened else None
