"""What the proxy keeps in a tenant's namespace of the store, each value sealed at rest and its
idle TTL extended by every use: offloaded content (`RefStore`), compaction records, response
chains and offload events; and this process's memo of the summary records it read.

Refs: offloaded content, zlib-compressed. Every request that still references an item extends
its idle TTL, so content in use never expires mid-session; content-addressed refs make saving
idempotent.

Compaction records (`CompactionRecords`): what an emulated compaction token stands for, the
history items (in the request's own format) that replace the `compaction` item carrying the
token on later requests: the proxy's summary item, whose `ref=` keeps every summarised byte
reloadable, and whatever else the compaction kept that the client may drop. Written once (their
id is a hash of their content); a record never holds a token of ours in a compaction position
(`save` refuses one). A record is JSON as `proxy.core.jsonio` writes it, so it reads back exactly
as it came in; a large one is written, hashed, sealed and read back in the CPU pool
(`proxy.offload.cpu_pool`), a piece at a time (`proxy.core.jsonio`). One opened with the
previous key during a rotation is sealed again as it is read: the client holds only the token,
so nothing else would ever store it again.

Response chains: what a later request continuing a stored exchange needs. After reload rounds
the client holds the first round's response id, but the upstream response holding the whole
exchange is the last round's: a later `previous_response_id` naming the first continues from the
last. When the last round asked for the client's tools and an injected tool at once, the
injected call's `function_call_output` is kept and put in front of the client's next input
(every call of a stored response needs its output); for a `conversation` the same, keyed by its
id, once. An unreachable store only loses the record (the request then goes up as sent).

Events (compaction, compression, reload, summary failure), per tenant and session: they hold
what the model searched for and its reload calls' arguments, so they are sealed like content and
the session id is hashed in the list's key name.

The summary memo: a summary record never changes once written (its key is the hash of what it
summarises), so this process keeps the ones it read, per store (a replay or a test runs several
stores in one process), and re-reads one a minute to extend its idle TTL (`REFRESH`).

The tenant's store (`TenantStore`): the store, the tenant's namespace, the content's TTL and
the sealer travel together (they were passed apart at every call), with the tenant's storage
quota when its writes are charged. Everything the proxy keeps for a tenant is reached from there.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
import weakref
import zlib
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from proxy.core import compaction as compaction_token
from proxy.core import jsonio
from proxy.core import jsonio as large_json
from proxy.core.compaction import Offload, TokenError
from proxy.core.compression import PriorSummary
from proxy.core.jsonio import JsonObject
from proxy.offload.cpu_pool import CPU, INLINE, LARGE_CHARS
from proxy.offload.tenant import Quota, key, unsharded_key
from proxy.store import Store, StoreUnavailable
from proxy.store import sealing as resealing
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
        (`proxy.offload.tenant.Admission`); without it `save` refuses to store new content."""
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
        touched = await self.store.touch([self._key(r) for r in wanted], self.ttl, slack=slack)
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
        # the session's refs: those stored (before, or now) only, once the quota admitted the new
        # ones; a ref the request only names (a caller refused, a marker of nothing) is never listed
        held = [ref for ref, exists in zip(wanted, touched) if exists or ref in new]
        if session and held:
            await self.store.add_members(self._session_key(session), held, self.ttl, slack=slack)
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
        """The step before `save`: the caller's admission settled (`proxy.offload.tenant.Admission`)."""
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


MAX_ID_CHARS = 256
_ID = re.compile(r"[A-Za-z0-9_-]{1,256}")  # what an upstream response id looks like: nothing else is used


def plain_id(value: object) -> bool:
    """Is `value` an id the proxy may put in a path or a body (`resp_…`)?"""
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def _key(namespace: str, response_id: str, sealer: Sealer) -> str:
    """Ids are the upstream's or the client's text: hashed into the key name, never used raw."""
    digest = hashlib.sha256(response_id.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return key(namespace, "chain", sealer.key_name(digest, namespace))


@dataclass
class Continuation:
    """How to continue from an id the client holds."""

    response_id: str | None = None  # continue from this one instead (None: as sent)
    outputs: list[Any] = field(default_factory=list)  # input items to put first


def conversation_key(conversation: Any) -> str | None:
    """The key a `conversation` (an id, or `{"id": …}`) is remembered under."""
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    return f"conversation\0{conversation}" if isinstance(conversation, str) and conversation else None


async def remember(
    store: Store, namespace: str, name: str, *, continuation: Continuation, ttl: int, sealer: Sealer
) -> None:
    if len(name) > MAX_ID_CHARS or (continuation.response_id is not None and not plain_id(continuation.response_id)):
        return
    store_key = _key(namespace, name, sealer)
    value = json.dumps({"id": continuation.response_id, "outputs": continuation.outputs}).encode()
    try:
        await store.put(store_key, sealer.seal(value, store_key), ttl)
    except StoreUnavailable:
        pass


async def forget(store: Store, namespace: str, name: str, *, sealer: Sealer) -> None:
    try:
        await store.delete(_key(namespace, name, sealer))
    except StoreUnavailable:
        pass


async def resolve(store: Store, namespace: str, name: str, *, ttl: int, sealer: Sealer) -> Continuation | None:
    """How to continue from `name` (a response id, or a `conversation_key`), if remembered."""
    if len(name) > MAX_ID_CHARS:
        return None
    store_key = _key(namespace, name, sealer)
    try:
        value = await store.get(store_key, ttl=ttl)
    except StoreUnavailable:
        return None
    opened = await resealing.opened(store, store_key, value, sealer=sealer) if value is not None else None
    try:
        record = json.loads(opened) if opened else None
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    response_id = record.get("id") if plain_id(record.get("id")) else None
    outputs = record.get("outputs")
    return Continuation(response_id, outputs if isinstance(outputs, list) else [])


MAX_EVENTS = 500
NO_SESSION = "-"


def event(type_: str, **fields: Any) -> dict[str, Any]:
    return {"type": type_, "time": round(time.time(), 3), **fields}


def _list_key(namespace: str, session: str | None, sealer: Sealer) -> str:
    return key(namespace, "events", sealer.key_name(session or NO_SESSION, namespace))


async def record(
    store: Store, namespace: str, session: str | None, *, events: list[JsonObject], ttl: int, sealer: Sealer
) -> None:
    """Append events; an unreachable store loses them (accounting never fails a request)."""
    list_key = _list_key(namespace, session, sealer)
    try:
        await resealing.reseal_items(store, list_key, sealer)  # a rotation under way: those pushed before
        for e in events:
            await store.push(list_key, sealer.seal(json.dumps(e).encode(), list_key), max_len=MAX_EVENTS, ttl=ttl)
    except StoreUnavailable:
        pass


async def recent(
    store: Store, namespace: str, session: str | None, *, limit: int = MAX_EVENTS, sealer: Sealer
) -> list[JsonObject]:
    """The newest `limit` events, oldest first; ones that do not open (sealed under another key) are left out."""
    list_key = _list_key(namespace, session, sealer)
    opened = await resealing.opened_items(store, list_key, (await store.items(list_key))[-limit:], sealer=sealer)
    return [json.loads(item) for item in opened if item is not None]


RECORDS = 10_000  # records remembered per store (then forgotten at once, and read again)
REFRESH = 60.0
_records: MutableMapping[object, dict[str, tuple[float, PriorSummary]]] = weakref.WeakKeyDictionary()


def memo(store: object) -> dict[str, tuple[float, PriorSummary]]:
    """The records this process read from or wrote to `store`, by key: (when, record)."""
    found = _records.get(store)
    if found is None:
        found = _records[store] = {}
    return found


def keep(store: object, summary_key: str, record: PriorSummary) -> PriorSummary:
    remembered = memo(store)
    if len(remembered) > RECORDS:
        remembered.clear()
    remembered[summary_key] = (time.monotonic(), record)
    return record


@dataclass(frozen=True)
class TenantStore:
    store: Store
    namespace: str
    ttl: int  # of everything stored for the tenant (`--store-ttl`)
    sealer: Sealer
    names_key: str | None = None  # keys the compaction tokens' tags (`ServerSettings.names_key`)
    quota: Quota | None = None  # admits (or refuses) every write of new content

    def refs(self) -> RefStore:
        """The offloaded content, by reference."""
        return RefStore(self.store, self.namespace, self.ttl, sealer=self.sealer, quota=self.quota)

    def records(self, api: str) -> CompactionRecords:
        """The emulated compactions' records of one API ("responses" or "messages")."""
        return CompactionRecords(
            self.store, self.namespace, self.ttl, sealer=self.sealer, secret=self.names_key, quota=self.quota, api=api
        )

    async def record_events(self, session: str | None, recorded: list[JsonObject]) -> None:
        await record(self.store, self.namespace, session, events=recorded, ttl=self.ttl, sealer=self.sealer)

    async def recent_events(self, session: str | None) -> list[JsonObject]:
        """Raises StoreUnavailable (a read the caller asked for)."""
        return await recent(self.store, self.namespace, session, sealer=self.sealer)

    async def resolve_chain(self, name: str) -> Continuation | None:
        return await resolve(self.store, self.namespace, name, ttl=self.ttl, sealer=self.sealer)

    async def remember_chain(self, name: str, continuation: Continuation) -> None:
        await remember(self.store, self.namespace, name, continuation=continuation, ttl=self.ttl, sealer=self.sealer)

    async def forget_chain(self, name: str) -> None:
        await forget(self.store, self.namespace, name, sealer=self.sealer)

    def with_quota(self, quota: Quota | None) -> TenantStore:
        return TenantStore(self.store, self.namespace, self.ttl, self.sealer, self.names_key, quota)

    def __repr__(self) -> str:  # never the sealer's keys
        return f"TenantStore(namespace={self.namespace[:12]!r}, ttl={self.ttl})"
