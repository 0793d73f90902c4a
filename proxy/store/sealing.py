"""Optional encryption at rest (AES-256-GCM, the `cryptography` package), and the values sealed
again with the current key as they are read during a key rotation.

With `--encryption-key`, every stored value that holds content or what was done with it
(offloaded items, summarised history, summaries, events) is sealed; the store key is the
associated data, so a value copied under another key (another tenant's) does not open.
Session ids, which would otherwise appear in store key names, appear there only as a keyed
hash (`key_name`): equal for equal sessions, unreadable without the key.

Two secrets, so that the sealing key can be rotated without moving anything: values are sealed
with the current key and opened with it or the previous one (`--encryption-key-previous`);
names are keyed by the names key (`--namespace-key`, by default the encryption key), which a
rotation keeps.

Resealing: a value in use has its idle TTL extended by every read, so it would never expire
while sealed with the old key, and read as missing once the rotation drops it: a conversation
would lose its summary, a session its events and turns. Every read that opens a value with the
previous key writes it back sealed with the current key, compare-and-set (`Store.replace_if`,
`Store.replace_items`): only while the store still holds the bytes that were read, so two
replicas sealing one value again at once, or a writer storing a new value meanwhile, lose
nothing (the first write stands; the other finds other bytes and writes nothing). A store that
fails then leaves the value for a later read: the read itself has succeeded. Lists only pushed to
(events, a session's turns) are read once per process during the rotation for the same (`due`,
`done`): pushes extend their TTL too.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from proxy.store.base import Store, StoreUnavailable

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

MAGIC = b"\x00E1"  # zlib output never starts with a NUL byte


def _aead(secret: str) -> AESGCM:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM(hashlib.sha256(b"offload-proxy/at-rest/v1\0" + secret.encode()).digest())


class Sealer:
    def __init__(self, secret: str | None, *, previous: str | None = None, names: str | None = None) -> None:
        """`secret`: the sealing key; `previous`: the one before a rotation (opens, never seals);
        `names`: what keys `key_name` (default: `secret`)."""
        self._aead = _aead(secret) if secret else None
        self._previous = _aead(previous) if previous and previous != secret else None
        names = names or secret
        self._names = hashlib.sha256(b"offload-proxy/key-names/v1\0" + names.encode()).digest() if names else None

    @property
    def rotating(self) -> bool:
        """Is a previous key given (a rotation under way: what it sealed is to be sealed again)?"""
        return self._previous is not None

    @property
    def seals(self) -> bool:
        return self._aead is not None

    def key_name(self, value: str, scope: str) -> str:
        """How `value` (a session id) appears in a store key name within `scope` (a namespace):
        as is without a names key; with it, a keyed hash."""
        if self._names is None:
            return value
        material = scope.encode() + b"\0" + value.encode("utf-8", "surrogatepass")
        return hmac.new(self._names, material, hashlib.sha256).hexdigest()[:32]

    def seal(self, value: bytes, store_key: str) -> bytes:
        if self._aead is None:
            return value
        nonce = os.urandom(12)
        return MAGIC + nonce + self._aead.encrypt(nonce, value, store_key.encode())

    def open(self, value: bytes, store_key: str) -> bytes | None:
        """The plain value; None when it cannot be opened (sealed without a key, under another
        key, or tampered with)."""
        return self.opened(value, store_key)[0]

    def opened(self, value: bytes, store_key: str) -> tuple[bytes | None, str | None]:
        """(the plain value or None, what opened it: "plain", "current", "previous" or None)."""
        if not value.startswith(MAGIC):
            return value, "plain"
        from cryptography.exceptions import InvalidTag

        for which, aead in (("current", self._aead), ("previous", self._previous)):
            if aead is None:
                continue
            try:
                return aead.decrypt(value[3:15], value[15:], store_key.encode()), which
            except InvalidTag:
                pass
        return None, None

    def reopened(self, value: bytes, store_key: str) -> tuple[bytes | None, bytes | None]:
        """(the plain value or None, the value sealed again with the current key when the
        previous one opened it, else None: what a rotation writes back)."""
        plain, by = self.opened(value, store_key)
        return plain, (self.seal(plain, store_key) if by == "previous" and plain is not None else None)


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
