"""Stores in the process's memory, gone with their owner: what an observed turn (`X-Offload-Mode:
observe`) writes while it plans what it would have forwarded (`MemoryStore`), and what one worker
holds of its observed sessions, a store per session (`ObservedSessions`).

`MemoryStore`: the same contract as the Redis and SQLite stores (`proxy.store.base.Store`, tested
with them), idle TTLs included, on `time.monotonic`. One event loop, no awaits inside an
operation: every operation is atomic.

`ObservedSessions` (observe mode, `proxy.http.observed`): an observed turn plans as a managed one
does from its second turn on (the refs and summaries of its earlier turns found again, the cut
kept) instead of from nothing, at a managed turn's cost. Never written to the shared store: on a
fleet each replica holds the sessions it served (a turn on another replica plans from what that
one holds), and a restart forgets them. Bounded: at most `max_bytes` held in all (each store's
size measured after its turn), the sessions used longest ago dropped first, and any idle for
`IDLE` seconds.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast


@dataclass
class _Entry:
    value: Any
    expires: float


@dataclass(eq=False)  # hashed by identity: memos are kept per store (`proxy.offload.records`)
class MemoryStore:
    _kv: dict[str, _Entry] = field(default_factory=dict)  # bytes, sets, lists and hashes, each under its key
    _ranked: dict[str, dict[str, _Entry]] = field(default_factory=dict)  # members carry their own expiry

    def _live(self, key: str, kind: type) -> _Entry | None:
        entry = self._kv.get(key)
        if entry is None:
            return None
        if entry.expires < time.monotonic():
            del self._kv[key]
            return None
        return entry if isinstance(entry.value, kind) else None

    def _fresh(self, key: str, kind: type, ttl: int) -> _Entry:
        entry = self._live(key, kind)
        if entry is None:
            entry = self._kv[key] = _Entry(kind(), 0.0)
        entry.expires = time.monotonic() + ttl
        return entry

    async def put(self, key: str, value: bytes, ttl: int) -> None:
        self._kv[key] = _Entry(bytes(value), time.monotonic() + ttl)

    async def put_if_absent(self, key: str, value: bytes, ttl: int) -> bool:
        if self._live(key, object) is not None:
            return False
        await self.put(key, value, ttl)
        return True

    async def get(self, key: str, ttl: int | None = None) -> bytes | None:
        entry = self._live(key, bytes)
        if entry is None:
            return None
        if ttl is not None:
            entry.expires = time.monotonic() + ttl
        return cast(bytes, entry.value)  # `_live(key, bytes)`: a bytes value

    async def touch(self, keys: Sequence[str], ttl: int, *, slack: int = 0) -> list[bool]:
        now, out = time.monotonic(), []
        for key in keys:
            entry = self._live(key, object)
            out.append(entry is not None)
            if entry is not None and entry.expires <= now + ttl - slack:
                entry.expires = now + ttl
        return out

    async def delete(self, key: str) -> None:
        self._kv.pop(key, None)
        self._ranked.pop(key, None)

    async def delete_if(self, key: str, value: bytes) -> bool:
        entry = self._live(key, bytes)
        if entry is None or entry.value != value:
            return False
        del self._kv[key]
        return True

    async def extend_if(self, key: str, value: bytes, ttl: int) -> bool:
        entry = self._live(key, bytes)
        if entry is None or entry.value != value:
            return False
        entry.expires = time.monotonic() + ttl
        return True

    async def replace_if(self, key: str, expected: bytes, value: bytes) -> bool:
        entry = self._live(key, bytes)
        if entry is None or entry.value != expected:
            return False
        entry.value = bytes(value)
        return True

    async def add_members(self, key: str, members: Sequence[str], ttl: int, *, slack: int = 0) -> None:
        entry = self._live(key, set)
        if entry is not None and set(members) <= entry.value and entry.expires > time.monotonic() + ttl - slack:
            return
        self._fresh(key, set, ttl).value.update(members)

    async def members(self, key: str) -> set[str]:
        entry = self._live(key, set)
        return set(entry.value) if entry is not None else set()

    async def push(self, key: str, value: bytes, *, max_len: int, ttl: int) -> None:
        items = self._fresh(key, list, ttl).value
        items.append(bytes(value))
        del items[: max(0, len(items) - max_len)]

    async def items(self, key: str) -> list[bytes]:
        entry = self._live(key, list)
        return list(entry.value) if entry is not None else []

    async def replace_items(self, key: str, replacements: Mapping[bytes, bytes]) -> int:
        entry = self._live(key, list)
        if entry is None or not replacements:
            return 0
        replaced = 0
        for i, item in enumerate(entry.value):
            if item in replacements:
                entry.value[i] = bytes(replacements[item])
                replaced += 1
        return replaced

    async def incr(self, key: str, amount: int, ttl: int) -> int:
        entry = self._live(key, bytes)
        total = (int(entry.value) if entry is not None else 0) + amount
        await self.put(key, str(total).encode(), ttl)
        return total

    async def incr_fields(self, key: str, amounts: Mapping[str, int | float], ttl: int) -> None:
        if not amounts:
            return
        fields = self._fresh(key, dict, ttl).value
        for name, amount in amounts.items():
            fields[name] = fields.get(name, 0) + amount

    async def set_fields(
        self, key: str, values: Mapping[str, int | float], ttl: int, *, only_new: bool = False
    ) -> None:
        if not values:
            return
        fields = self._fresh(key, dict, ttl).value
        for name, value in values.items():
            if not only_new or name not in fields:
                fields[name] = value

    async def hashes(self, keys: Sequence[str]) -> list[dict[str, int | float]]:
        out = []
        for key in keys:
            entry = self._live(key, dict)
            out.append(dict(entry.value) if entry is not None else {})
        return out

    def _members(self, key: str) -> dict[str, _Entry]:
        now = time.monotonic()
        ranked = self._ranked.setdefault(key, {})
        for member in [m for m, e in ranked.items() if e.expires < now]:
            del ranked[member]
        return ranked

    async def rank(self, key: str, member: str, score: float, *, ttl: int, drop_below: float | None = None) -> None:
        ranked = self._members(key)
        ranked[member] = _Entry(float(score), time.monotonic() + ttl)
        if drop_below is not None:
            for name in [m for m, e in ranked.items() if e.value < drop_below]:
                del ranked[name]

    async def rank_add(self, key: str, amounts: Mapping[str, float], ttl: int) -> None:
        ranked = self._members(key)
        for member, amount in amounts.items():
            known = ranked.get(member)
            ranked[member] = _Entry((known.value if known else 0.0) + amount, time.monotonic() + ttl)

    async def ranked(self, key: str, offset: int, limit: int) -> tuple[int, list[tuple[str, float]]]:
        ranked = self._members(key)
        ordered = sorted(((m, e.value) for m, e in ranked.items()), key=lambda p: (p[1], p[0]), reverse=True)
        return len(ordered), ordered[offset : offset + max(limit, 0)]

    def nbytes(self) -> int:
        """About what it holds, in bytes: its keys and values (sets, lists and hashes by their
        members), not Python's overhead."""
        total = 0
        for key, entry in self._kv.items():
            value = entry.value
            if isinstance(value, bytes):
                size = len(value)
            elif isinstance(value, dict):
                size = sum(len(k) + 8 for k in value)
            else:
                size = sum(len(v) for v in value)
            total += len(key) + size
        return total + sum(len(k) + sum(len(m) + 16 for m in members) for k, members in self._ranked.items())

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        self._kv.clear()
        self._ranked.clear()


IDLE = 3600.0  # seconds an observed session's plan state outlives its last turn
MAX_SESSIONS = 10_000


@dataclass
class _Held:
    store: MemoryStore
    size: int = 0
    used: float = 0.0


class ObservedSessions:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._held: OrderedDict[tuple[str, str], _Held] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._held)

    def store(self, namespace: str, session: str | None) -> MemoryStore:
        """The session's store (a new one for a session not held, or for none)."""
        now = time.monotonic()
        self._expire(now)
        if session is None or self.max_bytes <= 0:
            return MemoryStore()
        key = (namespace, session)
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = _Held(MemoryStore())
            while len(self._held) > MAX_SESSIONS:
                self._drop(next(iter(self._held)))
        self._held.move_to_end(key)
        held.used = now
        return held.store

    def measured(self, namespace: str, session: str | None) -> None:
        """After a turn: the session's store weighed again, the oldest dropped past the bound."""
        held = self._held.get((namespace, session)) if session is not None else None
        if held is None:
            return
        size = held.store.nbytes()
        self.bytes += size - held.size
        held.size = size
        while self.bytes > self.max_bytes and self._held:
            self._drop(next(iter(self._held)))

    def _expire(self, now: float) -> None:
        while self._held:
            key, held = next(iter(self._held.items()))
            if now - held.used <= IDLE:
                return
            self._drop(key)

    def _drop(self, key: tuple[str, str]) -> None:
        held = self._held.pop(key)
        self.bytes -= held.size
