"""Prefix reuse: how much of a forwarded request a provider's prompt cache could serve.

A provider's prompt cache is keyed by prefix, not by conversation: a request is served from it
up to the first byte that differs from a request seen shortly before. This estimates the same
over the bytes the proxy forwards: the body is cut into fixed blocks (`BLOCK` bytes) and each
block's digest chains all bytes before its end (blake2b, 16 bytes, seeded with the tenant's
namespace, so tenants never share a prefix). A body reuses its leading blocks whose digests
were seen in the last `MAX_AGE` seconds; its share is those blocks over all of its blocks.

Only whole blocks are remembered (a cache holds whole increments too): the trailing partial
block of a body is never reused, so the same body sent twice is reused but for its last
partial block (wholly when its length is a multiple of `BLOCK`), and a body shorter than one
block never is. One `PrefixCache` per worker, bounded by entries (least recently seen evicted
first): with several workers each sees its own requests only, a lower bound.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from hashlib import blake2b

BLOCK = 1024  # bytes
MAX_ENTRIES = 100_000  # digests remembered (16 bytes each, about 150 bytes with their entry)
MAX_AGE = 3600.0  # seconds a digest stays reusable after it was last seen
DIGEST = 16


def chain(namespace: str, body: bytes, block: int = BLOCK) -> list[bytes]:
    """The digests of `body`'s whole blocks, each covering every byte up to its block's end."""
    digest = blake2b(namespace.encode("utf-8", "surrogatepass"), digest_size=DIGEST, person=b"offload-prefix").digest()
    view, out = memoryview(body), []
    for start in range(0, len(body) - block + 1, block):
        digest = blake2b(view[start : start + block], digest_size=DIGEST, key=digest).digest()
        out.append(digest)
    return out


class PrefixCache:
    """The digests seen lately, least recently seen first. Safe to share between threads (a
    large body is hashed off the event loop)."""

    def __init__(
        self,
        *,
        max_entries: int = MAX_ENTRIES,
        max_age: float = MAX_AGE,
        block: int = BLOCK,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries, self.max_age, self.block, self.clock = max_entries, max_age, block, clock
        self._seen: OrderedDict[bytes, float] = OrderedDict()  # digest -> when last seen, oldest first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._seen)

    def reuse(self, namespace: str, body: bytes) -> float:
        """The share of `body`'s blocks (the trailing partial one included) a cache could serve,
        from 0.0 to 1.0; then its blocks are remembered as seen now."""
        blocks = -(-len(body) // self.block)
        if not blocks:
            return 0.0
        digests = chain(namespace, body, self.block)  # the costly part, outside the lock
        with self._lock:
            now = self.clock()
            self._expire(now)
            seen, reused = self._seen, 0
            while reused < len(digests) and digests[reused] in seen:
                reused += 1
            for digest in digests:
                seen[digest] = now
                seen.move_to_end(digest)
            while len(seen) > self.max_entries:
                seen.popitem(last=False)
        return reused / blocks

    def _expire(self, now: float) -> None:
        seen = self._seen
        while seen:
            oldest, when = next(iter(seen.items()))
            if now - when <= self.max_age:
                return
            del seen[oldest]
