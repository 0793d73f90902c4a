"""Offloaded content in the store, scoped to one tenant namespace.

Values are zlib-compressed. Every request that still references an item extends its idle TTL,
so content in use never expires mid-session; content-addressed refs make saving idempotent.
"""

from __future__ import annotations

import asyncio
import json
import zlib
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from typing import Any, cast

from proxy.core.compaction import Offload
from proxy.offload.cpu_pool import CPU, INLINE
from proxy.offload.quota import Quota
from proxy.offload.tenant import key
from proxy.store import Store, resealing
from proxy.store.sealing import Sealer

FORMAT = 1
TOUCH_SLACK = 60
LARGE_STORED = 32 * 1024  # bytes stored (zlib-compressed text): opened and inflated off the event loop past this


@dataclass(frozen=True)
class StoredItem:
    ref: str
    kind: str
    text: str


BINARY_KINDS = frozenset({"image", "document", "audio"})  # base64 of compressed data: zlib's fastest level


def encode_item(offload: Offload) -> bytes:
    header = json.dumps({"v": FORMAT, "kind": offload.kind, "tokens": offload.tokens}).encode()
    level = 1 if offload.kind in BINARY_KINDS else 6
    return zlib.compress(header + b"\n" + offload.text.encode("utf-8", "surrogatepass"), level)


def decode_item(ref: str, value: bytes) -> StoredItem:
    header, _, body = zlib.decompress(value).partition(b"\n")
    meta = json.loads(header)
    return StoredItem(ref, meta.get("kind", "tool_result"), body.decode("utf-8", "surrogatepass"))


def touch_slack(ttl: int) -> int:
    """Seconds an expiry may age before it is written again: extending a 7-day idle TTL once
    a minute is plenty, and spares the store a write per item per request."""
    return min(TOUCH_SLACK, ttl // 10)


class RefStore:
    """Every save asks the store which items exist (one batched, read-only round trip in the
    steady state): an item that vanished (eviction, FLUSHDB, a restarted Redis) is stored again
    by the very next request that carries it. Nothing about the store is remembered between
    requests; expiry writes are rate-limited by the store itself (`slack`)."""

    def __init__(
        self, store: Store, namespace: str, ttl: int, *, sealer: Sealer | None = None, quota: Quota | None = None
    ) -> None:
        self.store, self.namespace, self.ttl = store, namespace, ttl
        self.sealer = sealer or Sealer(None)
        self.quota = quota  # admits (or refuses) every write of new content

    def _key(self, ref: str) -> str:
        return key(self.namespace, "item", ref)

    async def admit(self) -> None:
        """The step before a write of new content: the caller's admission settled
        (`proxy.offload.quota.Admission`); without it `save` refuses to store new content."""
        if self.quota is not None:
            await self.quota.admit()

    def _session_key(self, session: str) -> str:
        """With encryption at rest, the session id appears in the key only as a keyed hash."""
        return key(self.namespace, "session", self.sealer.key_name(session, self.namespace))

    async def save(
        self, offloads: Iterable[Offload], refs: Iterable[str], session: str | None = None, *, cpu: CPU = INLINE
    ) -> set[str]:
        """Make every ref in `refs` resolvable: extend the live ones, store the missing ones.

        Returns the refs that were written now (not already stored). Raises what the quota
        raises (QuotaExceeded; CredentialRejected for a caller not admitted: `admit` first),
        storing nothing, when it refuses the writes.
        `cpu` runs the encoding (zlib, sealing) of the new items: off the event loop for a large request.
        """
        by_ref = {o.ref: o for o in offloads}
        wanted = list(dict.fromkeys([*refs, *by_ref]))
        if not wanted:
            return set()
        slack = touch_slack(self.ttl)
        checks: list[Awaitable[Any]] = [self.store.touch([self._key(r) for r in wanted], self.ttl, slack=slack)]
        if session:
            checks.append(self.store.add_members(self._session_key(session), wanted, self.ttl, slack=slack))
        results = await asyncio.gather(*checks, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        touched = cast("list[bool]", results[0])  # the exceptions were raised above
        missing = [by_ref[ref] for ref, exists in zip(wanted, touched) if not exists and ref in by_ref]
        # During a key rotation an item in use (its TTL extended by every request carrying it) would
        # stay sealed with the old key until the rotation's end made it unreadable: the content
        # this request carries is sealed again, once per process, replacing what is stored (the same
        # content whoever writes it: its ref is its digest).
        # What it only refers to (a placeholder, a summary's ref) is read and sealed again when the old key opens it.
        due = [ref for ref, exists in zip(wanted, touched) if exists and resealing.due(self._key(ref), self.sealer)]
        again = [by_ref[ref] for ref in due if ref in by_ref]
        await asyncio.gather(*(self._reseal_stored(ref) for ref in due if ref not in by_ref))
        new: dict[str, bytes] = {}
        if missing or again:  # sized by what is encoded: one small new item of a large request needs no thread hop
            encode = [*missing, *again]
            new = await cpu.sized(sum(len(o.text) for o in encode), len(encode))(self._encode, encode)
        resealed = {ref: new.pop(ref) for ref in [o.ref for o in again]}
        if new and self.quota is not None:
            await self.quota.charge(sum(len(value) for value in new.values()))
        for ref, value in new.items():
            await self.store.put(self._key(ref), value, self.ttl)
        for ref, value in resealed.items():
            await self.store.put(self._key(ref), value, self.ttl)
            resealing.done(self._key(ref))
        return set(new)

    async def _reseal_stored(self, ref: str) -> None:
        store_key = self._key(ref)
        value = await self.store.get(store_key)
        if value is not None:
            await resealing.write_back(self.store, store_key, value, again=self.sealer.reopened(value, store_key)[1])
        resealing.done(store_key)

    def _encode(self, offloads: list[Offload]) -> dict[str, bytes]:
        return {o.ref: self.sealer.seal(encode_item(o), self._key(o.ref)) for o in offloads}

    async def load(self, ref: str) -> StoredItem | None:
        """The stored item; opened and inflated in the CPU pool when it is large."""
        store_key = self._key(ref)
        value = await self.store.get(store_key, ttl=self.ttl)
        if value is None:
            return None

        def opened() -> tuple[StoredItem | None, bytes | None]:
            plain, again = self.sealer.reopened(value, store_key)
            return (None if plain is None else decode_item(ref, plain)), again

        item, again = await CPU(len(value) > LARGE_STORED)(opened)
        await resealing.write_back(self.store, store_key, value, again=again)  # read during a rotation
        return item

    async def session_refs(self, session: str) -> set[str]:
        return await self.store.members(self._session_key(session))
