"""During a key rotation, what the previous key sealed is sealed again with the current one as it
is read (`--encryption-key-previous`).

A value in use has its idle TTL extended by every read, so it would never expire while sealed
with the old key, and read as missing once the rotation drops it: a conversation would lose its
summary, a session its events and turns. Every read that opens a value with the previous key
writes it back sealed with the current key, compare-and-set (`Store.replace_if`,
`Store.replace_items`): only while the store still holds the bytes that were read, so two
replicas sealing one value again at once, or a writer storing a new value meanwhile, lose
nothing (the first write stands; the other finds other bytes and writes nothing). A store that
fails then leaves the value for a later read: the read itself has succeeded.

Lists only pushed to (events, a session's turns) are read once per process during the rotation
for the same (`due`, `done`): pushes extend their TTL too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from proxy.store.base import Store, StoreUnavailable
from proxy.store.sealing import Sealer

REMEMBERED = 100_000  # store keys remembered as sealed again by this process (then forgotten at once)
_done: set[str] = set()


async def write_back(store: Store, store_key: str, read: bytes, *, again: bytes | None) -> None:
    """Replace `read` (the value as read) by `again` (sealed with the current key), if any."""
    if again is not None:
        with contextlib.suppress(StoreUnavailable):
            await store.replace_if(store_key, read, again)


async def opened(store: Store, store_key: str, value: bytes, *, sealer: Sealer) -> bytes | None:
    """`value`, as read at `store_key`, opened (None when it does not open); sealed again in the
    store when the previous key opened it."""
    plain, again = sealer.reopened(value, store_key)
    await write_back(store, store_key, value, again=again)
    return plain


async def opened_items(store: Store, list_key: str, items: Sequence[bytes], *, sealer: Sealer) -> list[bytes | None]:
    """The items of the list at `list_key`, opened (None for one that does not open); those the
    previous key opened are sealed again in place."""
    plain: list[bytes | None] = []
    again: dict[bytes, bytes] = {}
    for item in items:
        value, resealed = sealer.reopened(item, list_key)
        plain.append(value)
        if resealed is not None:
            again[item] = resealed
    if again:
        with contextlib.suppress(StoreUnavailable):
            await store.replace_items(list_key, again)
    return plain


async def reseal_items(store: Store, list_key: str, sealer: Sealer) -> None:
    """Seal again what the previous key sealed in the list at `list_key`, once per process
    during a rotation (a list written to, and read rarely). Raises StoreUnavailable."""
    if due(list_key, sealer):
        await opened_items(store, list_key, await store.items(list_key), sealer=sealer)
        done(list_key)


def due(store_key: str, sealer: Sealer) -> bool:
    """Is a rotation under way and `store_key` not sealed again by this process yet?"""
    return sealer.rotating and store_key not in _done


def done(store_key: str) -> None:
    if len(_done) >= REMEMBERED:
        _done.clear()
    _done.add(store_key)
