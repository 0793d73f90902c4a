"""The recorder: turns are queued in memory on the request path (never awaited there) and a
background task adds them to the store about once a second, so every worker and replica
contributes and a restart loses at most the last second.

A flush the store refuses keeps its turns (`Backlog`, below) and writes them once it is
back, in the buckets of the minute they were served; past `max_queue` turns held (queued or
unwritten), new turns are dropped and counted (`on_dropped` too: `offload_stats_dropped_total`).
Nothing of it fails a request.

Bills that belong to no turn (`bill_call`: a summary made in the background, a keep-alive ping)
go to the tenant's buckets, and to the session's totals when the session is known, with the
next flush.

Besides turns: the prefix reuse of each turn's forwarded body (`PrefixCache`, below, measured
here once the response is complete, a large body off the event loop), the summaries made in
the background (`count_summary`, added to the tenant's buckets when they finish, and to the
session's totals as their bills are), and the sessions of turns without `X-Offload-Session`
(derived by `proxy.stats._sessions`; a Responses turn continuing from a `previous_response_id`
is given its session here, `proxy.stats._sessions`).

Prefix reuse: how much of a forwarded request a provider's prompt cache could serve.

A provider's prompt cache is keyed by prefix, not by conversation: a request is served from it
up to the first byte that differs from a request seen shortly before. This estimates the same
over the bytes the proxy forwards: the body is cut into fixed blocks (`BLOCK` bytes) and each
block's digest chains all bytes before its end (blake2b, 16 bytes, seeded with the tenant's
namespace, so tenants never share a prefix). A body reuses its leading blocks whose digests
were seen in the last `MAX_AGE` seconds; its share is those blocks over all of its blocks.

Only whole blocks are remembered (a cache holds whole increments too): the trailing partial
block of a body is never reused, so the same body sent twice is reused but for its last
partial block (wholly when its length is a multiple of `BLOCK`), and a body shorter than one
block never is. One `PrefixCache` per worker, bounded by entries (least recently seen evicted
first): with several workers each sees its own requests only, a lower bound.

What the statistics still have to write: the recorder adds each flush's turns here (bucket
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
import contextlib
import json
import logging
import re
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field, replace
from hashlib import blake2b
from typing import Any, TypeVar

from proxy.core import jsonio
from proxy.core.answers import KINDS, NONE, Bill, Meter
from proxy.core.settings import ARMS, IDENT_PATTERN, Arm
from proxy.offload.tenant import key
from proxy.stats import _holdout as holdout
from proxy.stats._buckets import (
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
from proxy.stats._holdout import HoldoutDue, HoldoutTurn
from proxy.stats._prices import PriceTable
from proxy.stats._sessions import Replies, session_from_name
from proxy.stats._turns import Turn, bill_fields, counterfactual, turn_fields
from proxy.store import sealing as resealing
from proxy.store.base import Store, StoreUnavailable
from proxy.store.sealing import Sealer

Scope = MutableMapping[str, Any]  # an ASGI scope (starlette.types.Scope), read without the web framework
BLOCK = 1024  # bytes
MAX_ENTRIES = 100_000  # digests remembered (16 bytes each, about 150 bytes with their entry)
MAX_AGE = 3600.0  # seconds a digest stays reusable after it was last seen
DIGEST = 16


def chain(namespace: str, body: bytes, block: int = BLOCK) -> list[bytes]:
    """The digests of `body`'s whole blocks, each covering every byte up to its block's end."""
    digest = blake2b(namespace.encode("utf-8", "surrogatepass"), digest_size=DIGEST, person=b"offload-prefix").digest()
    view, out = memoryview(body), []
    for start in range(0, len(body) - block + 1, block):
        digest = blake2b(view[start : start + block], digest_size=DIGEST, key=digest).digest()
        out.append(digest)
    return out


class PrefixCache:
    """The digests seen lately, least recently seen first. Safe to share between threads (a
    large body is hashed off the event loop)."""

    def __init__(
        self,
        *,
        max_entries: int = MAX_ENTRIES,
        max_age: float = MAX_AGE,
        block: int = BLOCK,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_entries, self.max_age, self.block, self.clock = max_entries, max_age, block, clock
        self._seen: OrderedDict[bytes, float] = OrderedDict()  # digest -> when last seen, oldest first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._seen)

    def reuse(self, namespace: str, body: bytes) -> float:
        """The share of `body`'s blocks (the trailing partial one included) a cache could serve,
        from 0.0 to 1.0; then its blocks are remembered as seen now."""
        blocks = -(-len(body) // self.block)
        if not blocks:
            return 0.0
        digests = chain(namespace, body, self.block)  # the costly part, outside the lock
        with self._lock:
            now = self.clock()
            self._expire(now)
            seen, reused = self._seen, 0
            while reused < len(digests) and digests[reused] in seen:
                reused += 1
            for digest in digests:
                seen[digest] = now
                seen.move_to_end(digest)
            while len(seen) > self.max_entries:
                seen.popitem(last=False)
        return reused / blocks

    def _expire(self, now: float) -> None:
        seen = self._seen
        while seen:
            oldest, when = next(iter(seen.items()))
            if now - when <= self.max_age:
                return
            del seen[oldest]


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
    done: list[K] = []

    async def one(key: K, value: V) -> None:
        async with gate:
            await write(key, value)
            done.append(key)

    await asyncio.gather(*(one(k, v) for k, v in list(due.items())), return_exceptions=True)
    for written in done:
        if written in due and (not isinstance(value := due[written], SessionDue | HoldoutDue) or value.empty()):
            del due[written]


log = logging.getLogger("proxy.stats")

STOP_TIMEOUT = 2.0  # at shutdown, how long (s) the last flush may take
LABEL_REWRITE = 3600  # a tenant's label is written again (its TTL renewed) after this many seconds
MAX_LABELS = 10_000  # labels remembered as written (then forgotten, and written again)
SESSION_TURNS = 200  # turns kept per session
MAX_HOLDOUT_SESSIONS = 10_000  # holdout sessions whose arm a worker remembers (for their later bills)
MAX_MODEL = 100  # characters of a model name kept (it is the client's string)
SESSION_HEADER = b"x-offload-session"
UNMANAGED = ("/v1/messages/count_tokens",)  # counts tokens, forwards no turn
INLINE_BYTES = 256 * 1024  # a forwarded body up to this size is hashed on the event loop (about 1 ms)
ROUTES = (("chat", "/chat/completions"), ("responses", "/responses"), ("messages", "/messages"))
REFUSED = (401, 403)  # the upstream's answers to a credential it does not accept
_session_id = re.compile(IDENT_PATTERN)
_surrogates = re.compile("[\ud800-\udfff]")  # valid in JSON, but no store can encode them


def turn_of(rec: Any, scope: Scope) -> Turn | None:
    """The Turn of a finished request (`proxy.telemetry.RequestRecord`), or None when it
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
    if not header:  # derived from the conversation (proxy.stats._sessions), or found at the flush
        session = getattr(rec, "session", None)
    continues = getattr(rec, "continues", None) if session is None and not header else None
    path = scope.get("path", "")
    route = next((name for name, suffix in ROUTES if path.endswith(suffix)), rec.route)
    return Turn(
        namespace=caller.namespace,
        session=session,
        time=time.time(),
        route=route,
        model=_surrogates.sub("\ufffd", (rec.model or "")[:MAX_MODEL]) or None,
        status=rec.status,
        stream=bool(rec.stream),
        tokens_before=rec.tokens_before,
        tokens_after=rec.tokens_after if rec.tokens_after is not None else rec.tokens_before,
        action=rec.action or "none",
        refs=rec.refs or 0,
        refs_created=rec.refs_created,
        transport=getattr(rec, "transport", None) or "http",
        reload_rounds=rec.reload_rounds,
        searches=getattr(rec, "searches", 0),
        image_tokens_saved=getattr(rec, "image_tokens_saved", 0),
        summaries_made=getattr(rec, "summaries_made", 0),
        summaries_failed=getattr(rec, "summaries_failed", 0),
        warnings=len(rec.warnings),
        store_warnings=sum("store unavailable" in w for w in rec.warnings),
        continues=continues,
        response_id=getattr(rec, "response_id", None) if not header else None,
        label=getattr(caller, "label", None),
        bill=meter.total if (meter := getattr(rec, "bill", None)) is not None else NONE,
        summary_bill=getattr(rec, "summary_bill", NONE),
        counterfactual=None if meter is None else _estimate(rec, meter),
        observed=bool(getattr(rec, "observed", False)),
        arm=arm if (arm := getattr(rec, "arm", None)) in ARMS else None,
        finish=getattr(rec, "finish", None),
        answer_error=bool(getattr(rec, "answer_error", False)),
        context_error=bool(getattr(rec, "context_error", False)),
        repeated_calls=getattr(rec, "repeated_calls", 0),
    )


def _estimate(rec: Any, meter: Meter) -> Bill | None:
    """The bill on the other side of the turn, estimated: the raw history's for a managed turn;
    for an observed one (the raw history went out) what the planned turn would have been billed."""
    after = rec.tokens_after if rec.tokens_after is not None else rec.tokens_before
    if getattr(rec, "observed", False):
        return counterfactual(meter, tokens_before=after, tokens_after=rec.tokens_before)
    return counterfactual(meter, tokens_before=rec.tokens_before, tokens_after=after)


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
    queued: int = 0  # turns held: queued, or waiting for the store to be written
    recorded: int = 0  # turns added to the store by this worker
    dropped: int = 0  # turns (and background summaries) lost: more held than `max_queue`, or left at shutdown
    flush_failures: int = 0  # flushes the store refused (their turns were kept)


class Recorder:
    """One per worker. `record`, `observe` and `count_summary` are synchronous and cheap;
    `start`/`stop` from the lifespan."""

    def __init__(
        self,
        prices: PriceTable,
        retention: int,
        *,
        max_queue: int = 10_000,
        flush_every: float = 1.0,
        prefixes: PrefixCache | None = None,
        on_dropped: Callable[[int], None] | None = None,
    ) -> None:
        self.prices, self.retention = prices, retention
        self.on_dropped = on_dropped
        self.max_queue, self.flush_every = max_queue, flush_every
        self.state = RecorderState()
        self.prefixes = prefixes or PrefixCache()
        self.replies = Replies()
        self._queue: deque[Turn] = deque()
        self._backlog = Backlog()  # what the store refused so far
        self._one_flush = asyncio.Lock()
        self._waiting: list[Turn] = []  # continuing a response not known yet: they wait one flush
        # (namespace, minute, session) -> background summaries and bills of no turn (`bill_call`)
        self._tallies: dict[tuple[str, int, str | None], Fields] = {}
        self._hashing: set[asyncio.Future[float]] = set()  # large bodies being hashed off the loop
        self._open = 0  # turns whose request came in and that `observe` has not queued yet
        self._labelled: dict[str, tuple[str, float]] = {}  # namespace -> (label, when it was written)
        self._store: Store | None = None
        self._sealer = Sealer(None)
        self._task: asyncio.Task[None] | None = None
        self._flushing: asyncio.Future[int] | None = None
        self._in_flush = 0  # turns a flush took from the queue and has not yet handed to the backlog
        # (namespace, session) -> arm of the holdout sessions this worker recorded lately (their
        # background summaries' and pings' bills are theirs too)
        self._holdout_arms: OrderedDict[tuple[str, str], Arm] = OrderedDict()

    def record(self, turn: Turn) -> None:
        if len(self._queue) + self._backlog.held >= self.max_queue:
            self._drop(1)
            return
        self._queue.append(turn)

    def _drop(self, count: int) -> None:
        self.state.dropped += count
        if self.on_dropped is not None and count:
            self.on_dropped(count)

    def opened(self) -> Callable[[], None]:
        """A turn's request has come in: counted as held (`snapshot`) until the returned function
        is called, after `observe` has queued it (its client may read the statistics between)."""
        self._open += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._open -= 1

        return release

    def observe(self, rec: Any, scope: Scope) -> None:
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

        def hashed(done: asyncio.Future[float]) -> None:
            self._hashing.discard(done)
            failed = done.cancelled() or done.exception() is not None
            self.record(_reused(turn, 0.0 if failed else done.result()))

        hashing.add_done_callback(hashed)

    def count_summary(self, namespace: str, ok: bool, *, session: str | None = None) -> None:
        """A summary made in the background (after its turn was answered): counted in the
        tenant's buckets (and `session`'s totals, as its bill is) as made or failed when it
        finishes, flushed with the turns."""
        self._tally(namespace, _known(session), {"summaries_made" if ok else "summaries_failed": 1})

    def bill_call(
        self, namespace: str, bill: Bill, *, call: str, model: str | None, session: str | None = None
    ) -> None:
        """What the upstream billed for a call of the proxy's that is no turn's (`call`: "summary"
        for one made in the background, "keepalive" for a cache ping), priced at `model`'s price
        now; into the tenant's buckets (and `session`'s totals) with the next flush."""
        if call not in KINDS:
            raise ValueError(f"unknown call {call!r}")
        model = _surrogates.sub("\ufffd", (model or "")[:MAX_MODEL]) or None
        fields = bill_fields(bill, self.prices.price(model), call, model=model)
        if fields:
            self._tally(namespace, _known(session), fields)

    def _tally(self, namespace: str, session: str | None, fields: Fields) -> None:
        minute = bucket_start(time.time(), "m")
        if (namespace, minute, session) not in self._tallies and len(self._tallies) >= self.max_queue:
            self._drop(1)
            return
        add(self._tallies.setdefault((namespace, minute, session), {}), fields)

    def start(self, store: Store, sealer: Sealer) -> None:
        self._store, self._sealer = store, sealer
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self, timeout: float = STOP_TIMEOUT) -> None:
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
        left = len(self._queue) + len(self._waiting) + self._backlog.held
        if left:
            log.warning("statistics of %d turns not written at shutdown (the store is unavailable)", left)
            self._drop(left)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.flush_every)
            self._flushing = asyncio.ensure_future(self.flush())
            await asyncio.shield(self._flushing)  # stopping waits for it instead of cutting it

    async def flush(self, *, final: bool = False) -> int:
        """Write what is queued, and what earlier flushes could not; the number of turns now
        written in full (0 while the store refuses any of it). `final`: no turn waits for a
        later flush. One flush at a time: two would both write the backlog."""
        async with self._one_flush:
            return await self._flush(final)

    async def _flush(self, final: bool) -> int:
        store = self._store
        if store is None or not (self._queue or self._waiting or self._tallies or self._backlog):
            return 0
        waited, turns = len(self._waiting), [*self._waiting, *self._queue]
        self._queue.clear()
        self._waiting = []
        tallies, self._tallies = self._tallies, {}
        for (namespace, minute, session), fields in tallies.items():
            self._add(namespace, minute, fields)
            if session is not None:
                self._session_totals(namespace, session, fields)
                if (arm := self._holdout_arms.get((namespace, session))) is not None:  # its cost, as billed
                    usd = sum(float(v) for k, v in fields.items() if k.startswith("usd:"))
                    name = self._sealer.key_name(session, namespace)
                    if usd:
                        add(self._backlog.holdout(namespace, arm, name).sums, {"usd": usd})
        self._in_flush = len(turns)  # held still, for snapshot(), while their sessions are looked up
        try:
            ready, later = await self._sessions(store, turns, waited, final=final)
        except Exception as exc:  # the store is down: the turns wait in the queue, none is lost
            self.state.flush_failures += 1
            self._queue.extendleft(reversed(turns))
            log.info("statistics of %d turns kept for later: %s", len(turns), exc)
            return 0
        finally:
            self._in_flush = 0
        self._waiting = later
        self._merge(ready)
        labels = self._labels_due(ready)
        refused = dict(labels)  # those not written are written again with the tenant's next turn
        await write_each(
            refused,
            lambda ns, label: store.put(
                label_key(ns), self._sealer.seal(jsonio.text_bytes(label), label_key(ns)), ttl_of("d", self.retention)
            ),
        )
        labels = {ns: label for ns, label in labels.items() if ns not in refused}
        now = time.time()
        if len(self._labelled) + len(labels) > MAX_LABELS:
            self._labelled.clear()
        self._labelled.update((ns, (label, now)) for ns, label in labels.items())
        written = await self._backlog.write(store, retention=self.retention, max_rows=SESSION_TURNS, now=now)
        await self._reseal_turns(store, ready)
        if self._backlog:
            self.state.flush_failures += 1
            log.info("statistics of %d turns kept until the store answers", self._backlog.held)
        self.state.recorded += written
        return written

    async def _reseal_turns(self, store: Store, turns: list[Turn]) -> None:
        """A key rotation under way: the turns these sessions kept from before it (their lists'
        TTL extended by every turn) are sealed again with the current key, once per process."""
        if not self._sealer.rotating:
            return
        for turns_key in dict.fromkeys(
            session_keys(t.namespace, self._sealer.key_name(t.session, t.namespace))[0]
            for t in turns
            if t.session is not None
        ):
            with contextlib.suppress(StoreUnavailable):  # sealed again by a later flush
                await resealing.reseal_items(store, turns_key, self._sealer)

    def snapshot(self) -> RecorderState:
        queued = (
            self._open
            + len(self._queue)
            + len(self._waiting)
            + len(self._hashing)
            + self._in_flush
            + self._backlog.held
        )
        return RecorderState(queued, self.state.recorded, self.state.dropped, self.state.flush_failures)

    async def _sessions(
        self, store: Store, turns: list[Turn], waited: int, *, final: bool
    ) -> tuple[list[Turn], list[Turn]]:
        """(the turns to write now, with the sessions of those continuing a stored response; those
        to keep for the next flush). A turn whose response is not known yet waits one flush (the
        turn that made it may be another worker's, queued still), then starts a session of its own.
        The first `waited` turns have waited already."""
        ready, later = [], []
        for i, turn in enumerate(turns):
            if turn.session is None and turn.continues is not None:
                found = await self.replies.find(store, turn.namespace, turn.continues, sealer=self._sealer)
                if found is None and i >= waited and not final:
                    later.append(turn)
                    continue
                turn = replace(turn, session=found or session_from_name(turn.namespace, "response", turn.continues))
            if turn.session is not None and turn.response_id is not None:
                await self.replies.remember(
                    store,
                    turn.namespace,
                    turn.response_id,
                    session=turn.session,
                    ttl=self.retention,
                    sealer=self._sealer,
                )
            ready.append(turn)
        return ready, later

    def _add(self, namespace: str, t: float, fields: Fields) -> None:
        for scope, grains in ((namespace, TENANT_GRAINS), (ALL, ALL_GRAINS)):
            for grain in grains:
                self._backlog.add_bucket(
                    bucket_key(scope, grain, bucket_start(t, grain)), fields, ttl_of(grain, self.retention)
                )

    def _merge(self, turns: list[Turn]) -> None:
        """These turns' writes, added to the backlog (each turn to the buckets of its own time)."""
        for turn in turns:
            fields = turn_fields(turn, self.prices)
            self._add(turn.namespace, turn.time, fields)
            for grain in TOP_GRAINS:
                self._backlog.add_top(
                    top_key(grain, bucket_start(turn.time, grain)),
                    {turn.namespace: turn.tokens_before},
                    ttl_of(grain, self.retention),
                )
            if turn.session is None:
                continue
            if turn.arm in ARMS:
                self._holdout_turn(turn)
            due = self._session_totals(turn.namespace, turn.session, fields)
            due.rows.append(self._sealer.seal(json.dumps(turn.row()).encode(), due.turns_key))
            if turn.model:
                add(due.totals, {f"model:{turn.model}": 1})
            due.last = max(due.last or 0.0, turn.time)
        self._backlog.held += len(turns)

    def _holdout_turn(self, turn: Turn) -> None:
        """A turn of the holdout, added to its session's (`proxy.stats._holdout`): billed cost is
        the turn's answers and the summary calls it waited for (and, as they are billed, its
        session's background summaries and pings: `_tallies`)."""
        arm, session = turn.arm, turn.session
        assert arm is not None and session is not None
        price = self.prices.price(turn.model)
        usd = turn.bill.cost(price).total + turn.summary_bill.cost(price).total
        name = self._sealer.key_name(session, turn.namespace)
        self._backlog.holdout(turn.namespace, arm, name).add(
            HoldoutTurn(
                arm=arm,
                time=turn.time,
                usd=usd,
                tokens_forwarded=turn.tokens_after,
                upstream_error=turn.answer_error or turn.status >= 400,
                context_error=turn.context_error,
                reload_rounds=turn.reload_rounds,
                finish=turn.finish,
                repeated_calls=turn.repeated_calls,
            )
        )
        self._holdout_arms[(turn.namespace, session)] = arm
        self._holdout_arms.move_to_end((turn.namespace, session))
        while len(self._holdout_arms) > MAX_HOLDOUT_SESSIONS:
            self._holdout_arms.popitem(last=False)

    def _session_totals(self, namespace: str, session: str, fields: Fields) -> SessionDue:
        """`fields` added to the session's totals (in the backlog); its due writes."""
        name = self._sealer.key_name(session, namespace)
        turns_key, totals_key = session_keys(namespace, name)
        due = self._backlog.session(
            namespace, name, turns_key=turns_key, totals_key=totals_key, index_key=sessions_key(namespace)
        )
        add(due.totals, fields)
        return due

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


def _known(session: str | None) -> str | None:
    """A session a tally may name (one the statistics would list), else None."""
    return session if session and _session_id.match(session) else None


def _reused(turn: Turn, share: float) -> Turn:
    """`turn` with the tokens a prompt cache could serve: `share` of those it forwarded."""
    return replace(turn, prefix_tokens=round(turn.tokens_after * share)) if share else turn
