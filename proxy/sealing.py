"""Optional encryption at rest of stored content (AES-256-GCM, the `cryptography` package).

With `--encryption-key`, every stored value that holds content (offloaded items, summarised
history, summaries) is sealed; the store key is the associated data, so a value copied under
another key (another tenant's) does not open.
"""

from __future__ import annotations

import hashlib
import os

MAGIC = b"\x00E1"  # zlib output never starts with a NUL byte


class Sealer:
    def __init__(self, secret: str | None) -> None:
        self._aead = None
        if secret:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._aead = AESGCM(hashlib.sha256(b"offload-proxy/at-rest/v1\0" + secret.encode()).digest())

    @property
    def enabled(self) -> bool:
        return self._aead is not None

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
