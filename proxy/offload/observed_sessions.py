"""What one worker holds of its observed sessions (observe mode, `proxy.http.observed`): a store
in memory per session (`proxy.store.memory`), so an observed turn plans as a managed one does
from its second turn on (the refs and summaries of its earlier turns found again, the cut kept)
instead of from nothing, at a managed turn's cost. Never written to the shared store: on a fleet
each replica holds the sessions it served (a turn on another replica plans from what that one
holds), and a restart forgets them.

Bounded: at most `max_bytes` held in all (each store's size measured after its turn), the
sessions used longest ago dropped first, and any idle for `IDLE` seconds.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

from proxy.store.memory import MemoryStore

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
