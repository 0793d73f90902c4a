"""Optional encryption at rest (AES-256-GCM, the `cryptography` package).

With `--encryption-key`, every stored value that holds content or what was done with it
(offloaded items, summarised history, summaries, events) is sealed; the store key is the
associated data, so a value copied under another key (another tenant's) does not open.
Session ids, which would otherwise appear in store key names, appear there only as a keyed
hash (`key_name`): equal for equal sessions, unreadable without the key.

Two secrets, so that the sealing key can be rotated without moving anything: values are sealed
with the current key and opened with it or the previous one (`--encryption-key-previous`);
names are keyed by the names key (`--namespace-key`, by default the encryption key), which a
rotation keeps.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import TYPE_CHECKING

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
