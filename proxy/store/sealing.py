"""Optional encryption at rest (AES-256-GCM, the `cryptography` package).

With `--encryption-key`, every stored value that holds content or what was done with it
(offloaded items, summarised history, summaries, events) is sealed; the store key is the
associated data, so a value copied under another key (another tenant's) does not open.
Session ids, which would otherwise appear in store key names, appear there only as a keyed
hash (`key_name`): equal for equal sessions, unreadable without the key.
"""

from __future__ import annotations

import hashlib
import hmac
import os

MAGIC = b"\x00E1"  # zlib output never starts with a NUL byte


class Sealer:
    def __init__(self, secret: str | None) -> None:
        self._aead = None
        self._names: bytes | None = None
        if secret:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._aead = AESGCM(hashlib.sha256(b"offload-proxy/at-rest/v1\0" + secret.encode()).digest())
            self._names = hashlib.sha256(b"offload-proxy/key-names/v1\0" + secret.encode()).digest()

    def key_name(self, value: str, scope: str) -> str:
        """How `value` (a session id) appears in a store key name within `scope` (a namespace):
        as is without encryption; with it, a keyed hash."""
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
        """The plain value; None when it cannot be opened (sealed without a key, or tampered with)."""
        if not value.startswith(MAGIC):
            return value
        if self._aead is None:
            return None
        from cryptography.exceptions import InvalidTag

        try:
            return self._aead.decrypt(value[3:15], value[15:], store_key.encode())
        except InvalidTag:
            return None
