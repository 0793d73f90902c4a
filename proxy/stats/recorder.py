"""The recorder: turns are queued in memory on the request path (never awaited there) and a
background task adds them to the store about once a second, so every worker and replica
contributes and a restart loses at most the last second.

A full queue drops the turn, and a flush the store refuses drops its turns: both are counted,
neither fails a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.types import Scope

from proxy.core.settings import IDENT_PATTERN
from proxy.offload.tenant import key
from proxy.stats.buckets import (
    ALL,
    ALL_GRAINS,
    TENANT_GRAINS,
    Fields,
    add,
    bucket_key,
    bucket_start,
    tenants_key,
    ttl_of,
)
from proxy.stats.prices import PriceTable
from proxy.stats.turns import Turn, turn_fields
from proxy.store.base import Store
from proxy.store.sealing import Sealer

log = logging.getLogger("proxy.stats")

SESSION_TURNS = 200  # turns kept per session
MAX_MODEL = 100  # characters of a model name kept (it is the client's string)
SESSION_HEADER = b"x-offload-session"
UNMANAGED = ("/v1/messages/count_tokens",)  # counts tokens, forwards no turn
ROUTES = (("chat", "/chat/completions"), ("responses", "/responses"), ("messages", "/messages"))
_session_id = re.compile(IDENT_PATTERN)


def turn_of(rec, scope: Scope) -> Turn | None:
    """The Turn of a finished request (`proxy.http.observe.RequestRecord`), or None when it
    was not a managed turn (nothing planned, or no caller)."""
    caller = scope.get("state", {}).get("caller")
    if rec.tokens_before is None or caller is None or scope.get("path") in UNMANAGED:
        return None
    session = None
    for name, value in scope.get("headers", ()):
        if name.lower() == SESSION_HEADER:
            text = value.decode("latin-1").strip()
            session = text if _session_id.match(text) else None
    path = scope.get("path", "")
    route = next((name for name, suffix in ROUTES if path.endswith(suffix)), rec.route)
    return Turn(
        namespace=caller.namespace, session=session, time=time.time(), route=route,
        model=(rec.model or "")[:MAX_MODEL] or None,
        status=rec.status, stream=bool(rec.stream), tokens_before=rec.tokens_before,
        tokens_after=rec.tokens_after if rec.tokens_after is not None else rec.tokens_before,
        action=rec.action or "none", refs=rec.refs or 0, refs_created=rec.refs_created,
        reload_rounds=rec.reload_rounds, searches=getattr(rec, "searches", 0),
        summaries_made=getattr(rec, "summaries_made", 0), summaries_failed=getattr(rec, "summaries_failed", 0),
        warnings=len(rec.warnings), store_warnings=sum("store unavailable" in w for w in rec.warnings),
    )


def session_keys(namespace: str, session_name: str) -> tuple[str, str]:
    """(the list of a session's turns, the hash of its totals); `session_name` as
    `Sealer.key_name` writes the session id."""
    return key(namespace, "stats", f"session:{session_name}:turns"), key(namespace, "stats", f"session:{session_name}")


def sessions_key(namespace: str) -> str:
    """A tenant's sessions, ranked by the time of their last turn."""
    return key(namespace, "stats", "sessions")


@dataclass
class RecorderState:
    queued: int = 0
    recorded: int = 0  # turns added to the store by this worker
    dropped: int = 0  # turns lost: queue full, or the store refused their flush
    flush_failures: int = 0


class Recorder:
    """One per worker. `record` is synchronous and cheap; `start`/`stop` from the lifespan."""

    def __init__(self, prices: PriceTable, retention: int, *, max_queue: int = 10_000,
                 flush_every: float = 1.0) -> None:
        self.prices, self.retention = prices, retention
        self.max_queue, self.flush_every = max_queue, flush_every
        self.state = RecorderState()
        self._queue: deque[Turn] = deque()
        self._store: Store | None = None
        self._sealer = Sealer(None)
        self._task: asyncio.Task | None = None
        self._flushing: asyncio.Future | None = None

    def record(self, turn: Turn) -> None:
        if len(self._queue) >= self.max_queue:
            self.state.dropped += 1
            return
        self._queue.append(turn)

    def observe(self, rec, scope: Scope) -> None:
        """`Observe`'s `on_finished`: queue the turn of a finished managed request."""
        if (turn := turn_of(rec, scope)) is not None:
            self.record(turn)

    def start(self, store: Store, sealer: Sealer) -> None:
        self._store, self._sealer = store, sealer
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self, timeout: float = 2.0) -> None:
        """Stop the task and flush what is queued (for `timeout` seconds at most)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

        async def last() -> None:
            if self._flushing is not None:  # a flush the cancellation did not interrupt
                await self._flushing
            await self.flush()

        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(last(), timeout)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.flush_every)
            self._flushing = asyncio.ensure_future(self.flush())
            await asyncio.shield(self._flushing)  # stopping waits for it instead of cutting it

    async def flush(self) -> int:
        """Write what is queued; the number of turns written (0 when the store failed)."""
        if not self._queue or self._store is None:
            return 0
        turns = list(self._queue)
        self._queue.clear()
        try:
            await self._write(self._store, turns)
        except Exception as exc:  # the store (or anything) failed: these turns are lost, counted
            self.state.flush_failures += 1
            self.state.dropped += len(turns)
            log.warning("statistics of %d turns dropped: %s", len(turns), exc)
            return 0
        self.state.recorded += len(turns)
        return len(turns)

    def snapshot(self) -> RecorderState:
        return RecorderState(len(self._queue), self.state.recorded, self.state.dropped, self.state.flush_failures)

    async def _write(self, store: Store, turns: Iterable[Turn]) -> None:
        buckets: dict[str, tuple[Fields, int]] = {}  # key -> (fields, ttl)
        sessions: dict[tuple[str, str], list[tuple[Turn, Fields]]] = {}
        days: dict[int, set[str]] = {}
        for turn in turns:
            fields = turn_fields(turn, self.prices)
            for scope, grains in ((turn.namespace, TENANT_GRAINS), (ALL, ALL_GRAINS)):
                for grain in grains:
                    k = bucket_key(scope, grain, bucket_start(turn.time, grain))
                    add(buckets.setdefault(k, ({}, ttl_of(grain, self.retention)))[0], fields)
            days.setdefault(bucket_start(turn.time, "d"), set()).add(turn.namespace)
            if turn.session is not None:
                sessions.setdefault((turn.namespace, turn.session), []).append((turn, fields))
        await asyncio.gather(*(store.incr_fields(k, fields, ttl) for k, (fields, ttl) in buckets.items()))
        for day, namespaces in days.items():
            await store.add_members(tenants_key(day), sorted(namespaces), ttl_of("d", self.retention), slack=3600)
        for (namespace, session), done in sessions.items():
            await self._write_session(store, namespace, session, done)

    async def _write_session(self, store: Store, namespace: str, session: str,
                             done: list[tuple[Turn, Fields]]) -> None:
        name = self._sealer.key_name(session, namespace)
        turns_key, totals_key = session_keys(namespace, name)
        ttl = self.retention
        totals: Fields = {}
        for turn, fields in done:
            await store.push(turns_key, self._sealer.seal(json.dumps(turn.row()).encode(), turns_key),
                             max_len=SESSION_TURNS, ttl=ttl)
            add(totals, fields)
            if turn.model:
                add(totals, {f"model:{turn.model}": 1})
        await store.incr_fields(totals_key, totals, ttl)
        last = max(turn.time for turn, _ in done)
        await store.rank(sessions_key(namespace), name, last, ttl, drop_below=time.time() - ttl)
