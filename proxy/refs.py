"""Offloaded content in the store, scoped to one tenant namespace.

Values are zlib-compressed. Every request that still references an item extends its idle TTL,
so content in use never expires mid-session; content-addressed refs make saving idempotent.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

from proxy.plan import Offload
from proxy.sealing import Sealer
from proxy.store import Store
from proxy.tenant import key

FORMAT = 1


@dataclass(frozen=True)
class StoredItem:
    ref: str
    kind: str
    text: str


def encode_item(offload: Offload) -> bytes:
    header = json.dumps({"v": FORMAT, "kind": offload.kind, "tokens": offload.tokens}).encode()
    return zlib.compress(header + b"\n" + offload.text.encode("utf-8", "surrogatepass"), 6)


def decode_item(ref: str, value: bytes) -> StoredItem:
    header, _, body = zlib.decompress(value).partition(b"\n")
    meta = json.loads(header)
    return StoredItem(ref, meta.get("kind", "tool_result"), body.decode("utf-8", "surrogatepass"))


class TouchMemo:
    """Keys this process extended recently: extending a 7-day idle TTL once a minute is plenty.

    Spares the store a round trip per request for a conversation whose items are all known.
    """

    def __init__(self, interval: float = 60.0, size: int = 100_000) -> None:
        self.interval, self.size = interval, size
        self._seen: dict[str, float] = {}

    def fresh(self, key: str, now: float) -> bool:
        seen = self._seen.get(key)
        return seen is not None and now - seen < self.interval

    def clear(self) -> None:
        self._seen.clear()

    def mark(self, keys: Iterable[str], now: float) -> None:
        if len(self._seen) > self.size:
            self._seen.clear()
        for k in keys:
            self._seen[k] = now


class RefStore:
    def __init__(
        self, store: Store, namespace: str, ttl: int, memo: TouchMemo | None = None, sealer: Sealer | None = None
    ) -> None:
        self.store, self.namespace, self.ttl = store, namespace, ttl
        self.memo = memo or TouchMemo(interval=0)
        self.sealer = sealer or Sealer(None)

    def _key(self, ref: str) -> str:
        return key(self.namespace, "item", ref)

    async def save(self, offloads: Iterable[Offload], refs: Iterable[str], session: str | None = None) -> set[str]:
        """Make every ref in `refs` resolvable: extend the live ones, store the missing ones.

        Returns the refs that were written now (not already stored).
        """
        by_ref = {o.ref: o for o in offloads}
        now = time.monotonic()

        def memo_key(ref: str) -> str:  # fresh per session, since session membership goes along
            return f"{self._key(ref)}|{session or ''}"

        stale = [r for r in dict.fromkeys([*refs, *by_ref]) if not self.memo.fresh(memo_key(r), now)]
        if not stale:
            return set()
        alive = await self.store.touch([self._key(r) for r in stale], self.ttl)
        written: set[str] = set()
        for ref, exists in zip(stale, alive):
            if not exists and ref in by_ref:
                value = self.sealer.seal(encode_item(by_ref[ref]), self._key(ref))
                await self.store.put(self._key(ref), value, self.ttl)
                written.add(ref)
        if session:
            await self.store.add_members(key(self.namespace, "session", session), stale, self.ttl)
        self.memo.mark([memo_key(r) for r, exists in zip(stale, alive) if exists or r in by_ref], now)
        return written

    async def load(self, ref: str) -> StoredItem | None:
        value = await self.store.get(self._key(ref), ttl=self.ttl)
        opened = None if value is None else self.sealer.open(value, self._key(ref))
        return None if opened is None else decode_item(ref, opened)

    async def session_refs(self, session: str) -> set[str]:
        return await self.store.members(key(self.namespace, "session", session))
