"""The recorder: turns are queued in memory on the request path (never awaited there) and a
background task adds them to the store about once a second, so every worker and replica
contributes and a restart loses at most the last second.

A full queue drops the turn, and a flush the store refuses drops its turns: both are counted,
neither fails a request.

Besides turns: the prefix reuse of each turn's forwarded body (`proxy.stats.prefix`, measured
here once the response is complete, a large body off the event loop), the summaries made in
the background (`count_summary`, added to the tenant's buckets when they finish), and the
sessions of turns without `X-Offload-Session` (derived by `proxy.stats.session_id`; a Responses
turn continuing from a `previous_response_id` is given its session here, `proxy.stats.replies`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, replace

from starlette.types import Scope

from proxy.core import jsonio
from proxy.core.settings import IDENT_PATTERN
from proxy.offload.tenant import key
from proxy.stats.buckets import (
    ALL,
    ALL_GRAINS,
    TENANT_GRAINS,
    TOP_GRAINS,
    Fields,
    add,
    bucket_key,
    bucket_start,
    top_key,
    ttl_of,
)
from proxy.stats.prefix import PrefixCache
from proxy.stats.prices import PriceTable
from proxy.stats.replies import Replies
from proxy.stats.session_id import from_name
from proxy.stats.turns import Turn, turn_fields
from proxy.store.base import Store
from proxy.store.sealing import Sealer

log = logging.getLogger("proxy.stats")

WRITES_AT_ONCE = 16  # store writes of one flush in flight at once
LABEL_REWRITE = 3600  # a tenant's label is written again (its TTL renewed) after this many seconds
MAX_LABELS = 10_000  # labels remembered as written (then forgotten, and written again)
SESSION_TURNS = 200  # turns kept per session
MAX_MODEL = 100  # characters of a model name kept (it is the client's string)
SESSION_HEADER = b"x-offload-session"
UNMANAGED = ("/v1/messages/count_tokens",)  # counts tokens, forwards no turn
INLINE_BYTES = 256 * 1024  # a forwarded body up to this size is hashed on the event loop (about 1 ms)
ROUTES = (("chat", "/chat/completions"), ("responses", "/responses"), ("messages", "/messages"))
REFUSED = (401, 403)  # the upstream's answers to a credential it does not accept
_session_id = re.compile(IDENT_PATTERN)
_surrogates = re.compile("[\ud800-\udfff]")  # valid in JSON, but no store can encode them


def turn_of(rec, scope: Scope) -> Turn | None:
    """The Turn of a finished request (`proxy.http.telemetry.RequestRecord`), or None when it
    was not a managed turn (nothing planned, or no caller)."""
    caller = scope.get("state", {}).get("caller")
    if rec.tokens_before is None or caller is None or scope.get("path") in UNMANAGED:
        return None
    if getattr(caller, "kind", None) == "client" and getattr(rec, "upstream_status", None) in REFUSED:  # any key:
        return None  # only those the upstream accepts become tenants (nothing is stored for the others)
    session, header = None, False
    for name, value in scope.get("headers", ()):
        if name.lower() == SESSION_HEADER:
            text = value.decode("latin-1").strip()
            session, header = (text if _session_id.match(text) else None), True
    if not header:  # derived from the conversation (proxy.stats.session_id), or found at the flush
        session = getattr(rec, "session", None)
    continues = getattr(rec, "continues", None) if session is None and not header else None
    path = scope.get("path", "")
    route = next((name for name, suffix in ROUTES if path.endswith(suffix)), rec.route)
    return Turn(
        namespace=caller.namespace, session=session, time=time.time(), route=route,
        model=_surrogates.sub("\ufffd", (rec.model or "")[:MAX_MODEL]) or None,
        status=rec.status, stream=bool(rec.stream), tokens_before=rec.tokens_before,
        tokens_after=rec.tokens_after if rec.tokens_after is not None else rec.tokens_before,
        action=rec.action or "none", refs=rec.refs or 0, refs_created=rec.refs_created,
        reload_rounds=rec.reload_rounds, searches=getattr(rec, "searches", 0),
        image_tokens_saved=getattr(rec, "image_tokens_saved", 0),
        summaries_made=getattr(rec, "summaries_made", 0), summaries_failed=getattr(rec, "summaries_failed", 0),
        warnings=len(rec.warnings), store_warnings=sum("store unavailable" in w for w in rec.warnings),
        continues=continues, response_id=getattr(rec, "response_id", None) if not header else None,
        label=getattr(caller, "label", None),
    )


def session_keys(namespace: str, session_name: str) -> tuple[str, str]:
    """(the list of a session's turns, the hash of its totals); `session_name` as
    `Sealer.key_name` writes the session id. Both end with the name, after a prefix of their
    own: a suffix after it would let one session's key be another's (`x`'s turns were the
    totals of `x:turns`, a key of the wrong type that failed every flush holding it)."""
    return key(namespace, "stats", f"turns:{session_name}"), key(namespace, "stats", f"session:{session_name}")


def sessions_key(namespace: str) -> str:
    """A tenant's sessions, ranked by the time of their last turn."""
    return key(namespace, "stats", "sessions")


def label_key(namespace: str) -> str:
    """What the dashboard calls a tenant (`Caller.label`: its name, or its key's fingerprint)."""
    return key(namespace, "stats", "label")


@dataclass
class RecorderState:
    queued: int = 0
    recorded: int = 0  # turns added to the store by this worker
    dropped: int = 0  # turns (and background summaries) lost: queue full, or the store refused their flush
    flush_failures: int = 0


class Recorder:
    """One per worker. `record`, `observe` and `count_summary` are synchronous and cheap;
    `start`/`stop` from the lifespan."""

    def __init__(self, prices: PriceTable, retention: int, *, max_queue: int = 10_000,
                 flush_every: float = 1.0, prefixes: PrefixCache | None = None) -> None:
        self.prices, self.retention = prices, retention
        self.max_queue, self.flush_every = max_queue, flush_every
        self.state = RecorderState()
        self.prefixes = prefixes or PrefixCache()
        self.replies = Replies()
        self._queue: deque[Turn] = deque()
        self._waiting: list[Turn] = []  # continuing a response not known yet: they wait one flush
        self._tallies: dict[tuple[str, int], Fields] = {}  # (namespace, minute) -> background summaries
        self._hashing: set[asyncio.Future] = set()  # large bodies being hashed off the loop
        self._labelled: dict[str, tuple[str, float]] = {}  # namespace -> (label, when it was written)
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
        """`Observe`'s `on_finished` (the response has been sent): queue the turn of a finished
        managed request, with the prefix reuse of the body it forwarded (then dropped)."""
        forwarded = getattr(rec, "forwarded", None)
        rec.forwarded = None
        if (turn := turn_of(rec, scope)) is None:
            return
        if not forwarded:
            self.record(turn)
            return
        try:
            loop = asyncio.get_running_loop() if len(forwarded) > INLINE_BYTES else None
        except RuntimeError:
            loop = None
        if loop is None:
            self.record(_reused(turn, self.prefixes.reuse(turn.namespace, forwarded)))
            return
        hashing = loop.run_in_executor(None, self.prefixes.reuse, turn.namespace, forwarded)
        self._hashing.add(hashing)

        def hashed(done: asyncio.Future) -> None:
            self._hashing.discard(done)
            failed = done.cancelled() or done.exception() is not None
            self.record(_reused(turn, 0.0 if failed else done.result()))

        hashing.add_done_callback(hashed)

    def count_summary(self, namespace: str, ok: bool) -> None:
        """A summary made in the background (after its turn was answered): counted in the
        tenant's buckets as made or failed when it finishes, flushed with the turns."""
        minute = bucket_start(time.time(), "m")
        if (namespace, minute) not in self._tallies and len(self._tallies) >= self.max_queue:
            self.state.dropped += 1
            return
        add(self._tallies.setdefault((namespace, minute), {}), {"summaries_made" if ok else "summaries_failed": 1})

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
            if self._hashing:
                await asyncio.wait(set(self._hashing))
                await asyncio.sleep(0)  # their turns recorded
            await self.flush(final=True)

        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(last(), timeout)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.flush_every)
            self._flushing = asyncio.ensure_future(self.flush())
            await asyncio.shield(self._flushing)  # stopping waits for it instead of cutting it

    async def flush(self, *, final: bool = False) -> int:
        """Write what is queued; the number of turns written (0 when the store failed).
        `final`: no turn waits for a later flush."""
        store = self._store
        if store is None or not (self._queue or self._waiting or self._tallies):
            return 0
        waited, turns = len(self._waiting), [*self._waiting, *self._queue]
        self._queue.clear()
        self._waiting = []
        tallies, self._tallies = self._tallies, {}
        try:
            ready, later = await self._sessions(store, turns, waited, final)
            await self._write(store, ready, tallies)
        except Exception as exc:  # the store (or anything) failed: these turns are lost, counted
            self.state.flush_failures += 1
            self.state.dropped += len(turns) + sum(int(n) for fields in tallies.values() for n in fields.values())
            log.warning("statistics of %d turns dropped: %s", len(turns), exc)
            return 0
        self._waiting = later
        self.state.recorded += len(ready)
        return len(ready)

    def snapshot(self) -> RecorderState:
        queued = len(self._queue) + len(self._waiting) + len(self._hashing)
        return RecorderState(queued, self.state.recorded, self.state.dropped, self.state.flush_failures)

    async def _sessions(self, store: Store, turns: list[Turn], waited: int,
                        final: bool) -> tuple[list[Turn], list[Turn]]:
        """(the turns to write now, with the sessions of those continuing a stored response; those
        to keep for the next flush). A turn whose response is not known yet waits one flush (the
        turn that made it may be another worker's, queued still), then starts a session of its own.
        The first `waited` turns have waited already."""
        ready, later = [], []
        for i, turn in enumerate(turns):
            if turn.session is None and turn.continues is not None:
                found = await self.replies.find(store, turn.namespace, turn.continues, self._sealer)
                if found is None and i >= waited and not final:
                    later.append(turn)
                    continue
                turn = replace(turn, session=found or from_name(turn.namespace, "response", turn.continues))
            if turn.session is not None and turn.response_id is not None:
                await self.replies.remember(store, turn.namespace, turn.response_id, turn.session, self.retention,
                                            self._sealer)
            ready.append(turn)
        return ready, later

    def _add(self, buckets: dict[str, tuple[Fields, int]], namespace: str, t: float, fields: Fields) -> None:
        for scope, grains in ((namespace, TENANT_GRAINS), (ALL, ALL_GRAINS)):
            for grain in grains:
                k = bucket_key(scope, grain, bucket_start(t, grain))
                add(buckets.setdefault(k, ({}, ttl_of(grain, self.retention)))[0], fields)

    async def _write(self, store: Store, turns: list[Turn], tallies: dict[tuple[str, int], Fields]) -> None:
        buckets: dict[str, tuple[Fields, int]] = {}  # key -> (fields, ttl)
        sessions: dict[tuple[str, str], list[tuple[Turn, Fields]]] = {}
        tops: dict[str, tuple[Fields, int]] = {}  # key -> (raw tokens by namespace, ttl)
        for turn in turns:
            fields = turn_fields(turn, self.prices)
            self._add(buckets, turn.namespace, turn.time, fields)
            for grain in TOP_GRAINS:
                k = top_key(grain, bucket_start(turn.time, grain))
                add(tops.setdefault(k, ({}, ttl_of(grain, self.retention)))[0], {turn.namespace: turn.tokens_before})
            if turn.session is not None:
                sessions.setdefault((turn.namespace, turn.session), []).append((turn, fields))
        for (namespace, minute), fields in tallies.items():
            self._add(buckets, namespace, minute, fields)
        labels = self._labels_due(turns)
        await _bounded(store.incr_fields(k, fields, ttl) for k, (fields, ttl) in buckets.items())
        await _bounded(store.put(label_key(ns), self._sealer.seal(jsonio.text_bytes(label), label_key(ns)),
                                 ttl_of("d", self.retention))
                       for ns, label in labels.items())
        now = time.time()
        if len(self._labelled) + len(labels) > MAX_LABELS:
            self._labelled.clear()
        self._labelled.update((ns, (label, now)) for ns, label in labels.items())
        await _bounded(store.rank_add(k, amounts, ttl) for k, (amounts, ttl) in tops.items())
        await _bounded(self._write_session(store, namespace, session, done)
                       for (namespace, session), done in sessions.items())

    def _labels_due(self, turns: Iterable[Turn]) -> dict[str, str]:
        """The labels of these turns' tenants not written lately (or changed since)."""
        due: dict[str, str] = {}
        now = time.time()
        for turn in turns:
            if turn.label is None or turn.namespace in due:
                continue
            written = self._labelled.get(turn.namespace)
            if written is None or written[0] != turn.label or now - written[1] > LABEL_REWRITE:
                due[turn.namespace] = turn.label
        return due

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


async def _bounded(writes: Iterable[Awaitable[None]], limit: int = WRITES_AT_ONCE) -> None:
    """Await `writes`, `limit` at a time: a burst of buckets or sessions never takes more of the
    store's connections than that (a Redis pool refuses past its size)."""
    gate = asyncio.Semaphore(limit)

    async def one(write: Awaitable[None]) -> None:
        async with gate:
            await write

    await asyncio.gather(*(one(w) for w in writes))


def _reused(turn: Turn, share: float) -> Turn:
    """`turn` with the tokens a prompt cache could serve: `share` of those it forwarded."""
    return replace(turn, prefix_tokens=round(turn.tokens_after * share)) if share else turn
