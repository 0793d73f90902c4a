"""What the statistics still have to write: the recorder adds each flush's turns here (bucket
increments, ranked tenants, session rows and totals) and writes what it can. A write the store
refuses stays, merged with the next turns' (a bucket's increments add up), and is written once
the store is back: turns served while it was down are counted in the buckets of the minute they
were served, not lost.

Every write that succeeded leaves the backlog, so a flush cut short by an outage writes the rest
later and nothing twice. The one exception is a write that timed out on a hung Redis which
then ran it after all: that one is written again (Redis cannot say whether it ran it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from proxy.core.holdout import Arm
from proxy.stats import holdout
from proxy.stats.buckets import Fields, add
from proxy.stats.holdout import HoldoutDue
from proxy.store.base import Store

WRITES_AT_ONCE = 16  # store writes of one flush in flight at once


@dataclass
class SessionDue:
    """A session's writes not made yet: its rows (sealed, oldest first), the increments of its
    totals, and its place in the tenant's index (the time of its last turn)."""

    turns_key: str
    totals_key: str
    index_key: str
    name: str
    rows: list[bytes] = field(default_factory=list)
    totals: Fields = field(default_factory=dict)
    last: float | None = None

    def empty(self) -> bool:
        return not self.rows and not self.totals and self.last is None


@dataclass
class Backlog:
    buckets: dict[str, tuple[Fields, int]] = field(default_factory=dict)  # key -> (increments, ttl)
    tops: dict[str, tuple[Fields, int]] = field(default_factory=dict)  # key -> (raw tokens by tenant, ttl)
    sessions: dict[tuple[str, str], SessionDue] = field(default_factory=dict)
    holdouts: dict[str, holdout.HoldoutDue] = field(default_factory=dict)  # a holdout session's key -> its writes
    held: int = 0  # turns added since the backlog was last written in full

    def __bool__(self) -> bool:
        return bool(self.buckets or self.tops or self.sessions or self.holdouts)

    def add_bucket(self, key: str, fields: Fields, ttl: int) -> None:
        add(self.buckets.setdefault(key, ({}, ttl))[0], fields)

    def add_top(self, key: str, amounts: Fields, ttl: int) -> None:
        add(self.tops.setdefault(key, ({}, ttl))[0], amounts)

    def session(self, namespace: str, name: str, *, turns_key: str, totals_key: str, index_key: str) -> SessionDue:
        return self.sessions.setdefault((namespace, name), SessionDue(turns_key, totals_key, index_key, name))

    def holdout(self, namespace: str, arm: Arm, name: str) -> HoldoutDue:
        session_key = holdout.session_key(namespace, arm, name)
        return self.holdouts.setdefault(
            session_key, holdout.HoldoutDue(holdout.index_key(namespace, arm), session_key, name)
        )

    async def write(self, store: Store, *, retention: int, max_rows: int, now: float) -> int:
        """Write what is due; the number of turns now written in full (0 unless nothing is left)."""
        await write_each(self.buckets, lambda k, v: store.incr_fields(k, v[0], v[1]))
        await write_each(self.tops, lambda k, v: store.rank_add(k, v[0], v[1]))
        await write_each(
            self.sessions, lambda k, due: _write_session(store, due, retention=retention, max_rows=max_rows, now=now)
        )
        await write_each(self.holdouts, lambda k, due: holdout.write(store, due, retention=retention, now=now))
        if self:
            return 0
        held, self.held = self.held, 0
        return held


async def _write_session(store: Store, due: SessionDue, *, retention: int, max_rows: int, now: float) -> None:
    """Each step leaves `due` once made, so a session cut short goes on where it stopped."""
    while due.rows:
        await store.push(due.turns_key, due.rows[0], max_len=max_rows, ttl=retention)
        due.rows.pop(0)
    if due.totals:
        await store.incr_fields(due.totals_key, due.totals, retention)
        due.totals = {}
    if due.last is not None:
        await store.rank(due.index_key, due.name, due.last, ttl=retention, drop_below=now - retention)
        due.last = None


K = TypeVar("K")
V = TypeVar("V")


async def write_each(due: dict[K, V], write: Callable[[K, V], Awaitable[None]], limit: int = WRITES_AT_ONCE) -> None:
    """Make each write of `due` (key -> value), `limit` at a time (a burst never takes more of the store's
    connections: a Redis pool refuses past its size); those made leave `due`, the others stay."""
    gate = asyncio.Semaphore(limit)
    done: list = []

    async def one(key, value) -> None:
        async with gate:
            await write(key, value)
            done.append(key)

    await asyncio.gather(*(one(k, v) for k, v in list(due.items())), return_exceptions=True)
    for key in done:
        if key in due and (not isinstance(value := due[key], SessionDue | holdout.HoldoutDue) or value.empty()):
            del due[key]
