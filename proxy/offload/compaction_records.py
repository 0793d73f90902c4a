"""What an emulated compaction token stands for, kept in the namespace's store.

A record is the list of history items (in the request's own format) that replace the
`compaction` item carrying the token on later requests: the proxy's summary item, whose `ref=`
keeps every summarised byte reloadable, and whatever else the compaction kept that the client
may drop. Records are written once (their id is a hash of their content), sealed at rest like
every offload, and their idle TTL is extended each time a request uses them. A record never
holds a token of ours in a compaction position (`save` refuses one): expanding a record never
sends one upstream.

A record is JSON as `proxy.core.jsonio` writes it (a lone surrogate escaped, valid UTF-8), so it
reads back exactly as it came in. A large one (a task of tens of MB is kept whole) is written,
hashed and sealed, and read back, in the CPU pool (`proxy.offload.cpu_pool`), a piece at a time
(`proxy.core.large_json`).

A record opened with the encryption key before a rotation (`--encryption-key-previous`) is
sealed again with the current key as it is read: the client holds only the token, so nothing
else would ever store it again, and a record in use (its TTL extended at every use) would
otherwise stay sealed with the old key until the rotation's end made it unreadable.
"""

from __future__ import annotations

from typing import Any

from proxy.core import compaction_token, jsonio, large_json
from proxy.core.compaction_token import TokenError
from proxy.offload.cpu_pool import CPU, LARGE_CHARS
from proxy.offload.quota import Quota
from proxy.offload.tenant import key, unsharded_key
from proxy.store import Store, resealing
from proxy.store.sealing import Sealer

__all__ = ["CompactionRecords", "TokenError"]


class CompactionRecords:
    def __init__(
        self,
        store: Store,
        namespace: str,
        ttl: int,
        *,
        sealer: Sealer,
        secret: str | None = None,
        quota: Quota | None = None,
        api: str = "responses",
    ) -> None:
        """`secret`: the server's names key (`ServerSettings.names_key`: it keys the tokens' tags), if any; `api`:
        whose items the records hold ("responses" or "messages"; a token is read by its own API only)."""
        self.store, self.namespace, self.ttl, self.sealer = store, namespace, ttl, sealer
        self.secret, self.quota, self.api = secret, quota, api

    def _key(self, record_id: str) -> str:
        return key(self.namespace, "compaction", record_id)

    def _encoded(self, items: list[Any], large: bool) -> tuple[bytes, bytes]:
        """The record's bytes, and its id."""
        content = large_json.dumps_yielding(items) if large else jsonio.dumps(items)
        if compaction_token.may_hold_token(content) and next(compaction_token.sealed_fields(items), None):
            raise TokenError("a compaction record may not hold a compaction token (it would reach the upstream)")
        return content, compaction_token.record_id_for(self.namespace, content)

    def _opened(self, value: bytes, store_key: str, large: bool) -> tuple[list[Any] | None, bytes | None]:
        """The items, and the value sealed again with the current key when the previous one opened it."""
        opened, again = self.sealer.reopened(value, store_key)
        if opened is None:
            return None, None
        items = large_json.loads_yielding(opened) if large else jsonio.loads(opened)
        if not isinstance(items, list):
            return None, None
        return items, again

    async def admit(self) -> None:
        """The step before `save`: the caller's admission settled (`proxy.offload.quota.Admission`)."""
        if self.quota is not None:
            await self.quota.admit()

    async def save(self, items: list[Any]) -> str:
        """Store `items` and answer the token that stands for them (the same items, the same token).
        Raises what the store and the quota raise; TokenError when `items` hold a token of ours
        in an `encrypted_content` (the request's own were settled before: a bug otherwise)."""
        cpu = CPU.for_messages(items)
        content, record_id = await cpu(self._encoded, items, cpu.large)
        store_key = self._key(record_id.hex())
        if not (await self.store.touch([store_key], self.ttl))[0]:
            sealed = await cpu(self.sealer.seal, content, store_key)
            if self.quota is not None:
                await self.quota.charge(len(sealed))
            await self.store.put(store_key, sealed, self.ttl)
        return compaction_token.make_token(record_id, self.namespace, self.secret, api=self.api)

    async def load(self, token: str) -> list[Any] | None:
        """The items a token of ours stands for; None when the store no longer holds them (expired,
        evicted). TokenError for a token this namespace may not use (another's, malformed)."""
        record_id = compaction_token.read_token(token, self.namespace, self.secret, api=self.api)
        store_key = self._key(record_id)
        value = await self.store.get(store_key, ttl=self.ttl)
        if value is None:
            value = await self._moved(record_id, store_key)
            if value is None:
                return None
        large = len(value) > LARGE_CHARS
        items, again = await CPU(large)(self._opened, value, store_key, large)
        await resealing.write_back(
            self.store, store_key, value, again=again
        )  # a rotation under way: readable after it too
        return items

    async def _moved(self, record_id: str, store_key: str) -> bytes | None:
        """A record stored before keys had shards, moved to its key now (the client holds only the
        token: nothing could store it again): its value as sealed at `store_key`, or None."""
        old_key = unsharded_key(self.namespace, "compaction", record_id)
        value = await self.store.get(old_key)
        opened = None if value is None else self.sealer.open(value, old_key)
        if opened is None:
            return None
        sealed = self.sealer.seal(opened, store_key)
        await self.store.put(store_key, sealed, self.ttl)
        await self.store.delete(old_key)
        return sealed

    async def stands_for(self, token: str) -> list[Any]:
        """What a token of ours stands for; TokenError when it may not be used here, or when the
        store no longer holds its record (the message says which)."""
        items = await self.load(token)
        if items is None:
            raise TokenError(
                "the proxy's store no longer holds what it stood for (it expired after --store-ttl "
                "unused, or was evicted); send the history without it"
            )
        return items
