"""Per-namespace storage quota: how many bytes one tenant may make the proxy store.

Counted in the store (so every worker and replica shares the count) as bytes written, in one
counter per namespace whose idle TTL is the content's: it is a safe upper bound of what the
namespace holds, and starts again from 0 once the namespace has been idle for a whole TTL.
"""

from __future__ import annotations

from proxy.store import Store
from proxy.tenant import key


class QuotaExceeded(Exception):
    """Storing this would take the namespace past its quota; nothing was stored."""

    def __init__(self, used: int, limit: int) -> None:
        super().__init__(f"storage quota of this credential exhausted ({used} of {limit} bytes used)")
        self.used, self.limit = used, limit


class Quota:
    def __init__(self, store: Store, namespace: str, *, limit: int, ttl: int) -> None:
        self.store, self.limit, self.ttl = store, limit, ttl
        self.key = key(namespace, "usage", "bytes")

    async def charge(self, nbytes: int) -> None:
        """Count `nbytes` about to be written, or raise QuotaExceeded (and count nothing)."""
        if self.limit <= 0 or nbytes <= 0:
            return
        used = await self.store.incr(self.key, nbytes, self.ttl)
        if used > self.limit:
            await self.store.incr(self.key, -nbytes, self.ttl)
            raise QuotaExceeded(used - nbytes, self.limit)
