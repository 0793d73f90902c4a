"""The cache keep-alive: a session's provider cache kept warm and kept valid, from the record of
the prefix it last forwarded.

The record (`read`, `write`): the sessions' last forwarded prefixes (`proxy.core.prompt_cache.LastSent`)
in the store, one key per session under the tenant's namespace, the session's name keyed like the
events' (`Sealer.key_name`), the value sealed like content, expiring `RECORD_TTL` seconds after
the last write (at most the tenant's TTL). Every replica writes what it forwarded and reads what
any replica did. Neither call ever raises: a store that fails reads as no record (the decisions
then act as before the record existed) and loses the write (logged).

The kept cut (`forwarded`, `previous`): the summary the session forwarded last stays, below the
trigger and while a newer cut would not pay. `proxy.offload.summaries.Compressor.run` forwards
the longest summary ready for a history; when a newer one is ready while the one the last turn
forwarded still leaves what follows it under the trigger, taking the newer one rewrites the
cached rest of the prefix, which with the cache warm costs more than it saves unless the cut
removes enough (`proxy.core.prompt_cache`). A cut forwarded below the trigger is forwarded again by
the next turns rather than undone: the history is never rewritten back and forth.

Keep-alive pings (`KeepAlive`; `--cache-keepalive`, per tenant and request): after a turn a
worker forwarded (`hold`), it keeps in memory exactly what that turn sent: the body's bytes, the
headers with the session's own credential (never written anywhere), where it went. Shortly
before the provider's cache would expire (`proxy.core.prompt_cache.next_ping`) it sends the
session's 1-token ping (`proxy.formats.prompt_cache`) with that prefix, on that credential, to
that upstream. What is held is bounded by bytes per worker (`max_bytes`: the sessions idle
longest go first) and dropped once the session gets no more pings. In a fleet only the replica
that sent the session's latest turn holds its latest prefix: before a ping, the session's record
must name the prefix held (else a later turn went out elsewhere, and this one is dropped), and
the ping is claimed in the store per (session, prefix, ping number) with `put_if_absent` (the
lease's primitive), so of replicas holding the same prefix one pings. A store that fails sends
no ping (the claim cannot be made): never a duplicate. What each ping's answer reports goes to
`on_answer` (the app counts it: pings, their estimated cost, writes avoided, and records its
usage with the kind "keepalive").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from proxy.core import compression as cp
from proxy.core import jsonio
from proxy.core import prompt_cache as ka
from proxy.core import prompt_cache as pc
from proxy.core.prompt_cache import CutContext, LastSent, decode, keep_previous
from proxy.core.tokens import TokenCounter
from proxy.core.view import ItemView
from proxy.formats.json_body import LARGE_BODY
from proxy.formats.prompt_cache import output_tokens, profile_name
from proxy.formats.prompt_cache import ping as ping_body
from proxy.offload.cpu_pool import CPU
from proxy.offload.records import TenantStore
from proxy.offload.summarizer import Compressed
from proxy.offload.tenant import key
from proxy.store import StoreUnavailable
from proxy.store import sealing as resealing
from proxy.upstream.client import Headers, Upstream

log = logging.getLogger("proxy.offload.cache_keepalive")

RECORD_TTL = 24 * 3600  # seconds a session's record outlives its last turn: longer than any cache TTL


def record_key(tenant: TenantStore, session: str) -> str:
    return key(tenant.namespace, "sent", tenant.sealer.key_name(session, tenant.namespace))


async def read(tenant: TenantStore, session: str | None) -> LastSent | None:
    """The session's record; None without a session, without a record, or with the store failing."""
    if not session:
        return None
    store_key = record_key(tenant, session)
    try:
        raw = await tenant.store.get(store_key)
        if raw is None:
            return None
        return decode(await resealing.opened(tenant.store, store_key, raw, sealer=tenant.sealer))
    except StoreUnavailable:
        return None  # counted by the store's guard (offload_store_errors_total)
    except Exception:  # noqa: BLE001 - a decision input, never a request's failure
        log.warning("reading the session's last sent prefix failed", exc_info=True)
        return None


async def write(
    tenant: TenantStore, session: str | None, sent: LastSent, *, previous: LastSent | None = None
) -> LastSent:
    """Store `sent` as the session's record (its turns counted on from `previous`, the record
    read before the turn, when given); returns what it stored, or would have."""
    record = previous.then(sent) if previous is not None else sent
    if not session:
        return record
    store_key = record_key(tenant, session)
    try:
        await tenant.store.put(store_key, tenant.sealer.seal(record.encode(), store_key), min(tenant.ttl, RECORD_TTL))
    except StoreUnavailable:
        pass  # counted by the store's guard
    except Exception:  # noqa: BLE001 - after the answer: never a request's failure
        log.warning("storing the session's last sent prefix failed", exc_info=True)
    return record


class Compressing(Protocol):
    """What this reads of the compressor (`proxy.offload.summaries.Compressor`, which uses this
    module: named by its shape so neither imports the other)."""

    view: ItemView

    @property
    def cuts(self) -> CutContext | None: ...

    async def _load(self, prefix_hash: str) -> cp.PriorSummary | None: ...

    def _using(self, compacted: list[Any], head: int, prior: cp.PriorSummary, **more: Any) -> Compressed: ...


async def forwarded(
    compressor: Compressing, originals: list[Any], *, chain: cp.PrefixHashes, head: int, tail: int, cpu: CPU
) -> cp.PriorSummary | None:
    """The summary the session's last turn forwarded, when it is one of this very history
    standing for items[head:cut] with cut <= `tail`; None otherwise (no record, none forwarded,
    expired, a fork's)."""
    ctx = compressor.cuts
    if ctx is None or ctx.sent is None or not ctx.sent.summary:
        return None
    old = await compressor._load(ctx.sent.summary)
    if old is None or not head <= old.cut <= tail:
        return None
    if not await cpu.for_part(originals[: old.cut])(chain.matches, old.cut, ctx.sent.summary):
        return None  # a summary of another history (a fork of the session's start)
    return old


async def previous(
    compressor: Compressing,
    compacted: list[Any],
    originals: list[Any],
    *,
    chain: cp.PrefixHashes,
    head: int,
    tail: int,
    trigger: int,
    newer: cp.PriorSummary,
    counter: TokenCounter,
    cpu: CPU,
) -> tuple[cp.PriorSummary, Compressed] | None:
    """The summary the session forwarded last and the items with it, to forward instead of
    `newer`: when it is another one, of this very history, what follows it fits `trigger`, the
    cache is warm and the newer cut would cost more than it saves. None: `newer` goes."""
    ctx = compressor.cuts
    if ctx is None or ctx.sent is None or ctx.cold or not ctx.sent.summary or ctx.sent.summary == newer.prefix:
        return None
    old = await forwarded(compressor, originals, chain=chain, head=head, tail=tail, cpu=cpu)
    if old is None or not old.cut < newer.cut:
        return None
    view = compressor.view
    if await cpu.light(cp.tokens_between, compacted, view, old.cut, end=tail, counter=counter) > trigger:
        return None  # the trigger is crossed with the old one: the newer one goes
    kept, cut = compressor._using(compacted, head, old), compressor._using(compacted, head, newer)
    assert kept.items is not None and cut.items is not None
    head_tokens = await cpu.light(counter.messages, compacted[:head])
    kept_tokens = await cpu.light(counter.messages, kept.items)
    cut_tokens = await cpu.light(counter.messages, cut.items)
    if not keep_previous(ctx, after=cut_tokens - head_tokens, removed=kept_tokens - cut_tokens):
        return None
    return old, kept


DROP_HEADERS = (b"content-length", b"content-encoding", b"transfer-encoding", b"idempotency-key")
MAX_ANSWER = 1024 * 1024  # bytes of a ping's answer read, at most
TICK = 1.0  # seconds between two looks at what is due, at most


@dataclass(frozen=True)
class Session:
    """What one session's last turn sent, held for its pings."""

    tenant: TenantStore
    session: str
    endpoint: str
    base: str | None
    headers: Headers
    content: bytes
    digest: str
    model: str | None
    profile: pc.Profile
    held: ka.Held
    fmt: Any = None  # the turn's WireFormat: what reads a ping's usage
    query: bytes = b""  # the turn's query string (Azure OpenAI's `api-version`): the ping goes where the turn went

    @property
    def size(self) -> int:
        """Bytes held: the body and the headers (the client's, whatever their size)."""
        return len(self.content) + len(self.query) + sum(len(k) + len(v) for k, v in self.headers)


@dataclass(frozen=True)
class PingDone:
    """One ping's outcome, for the metrics and the bill."""

    session: Session
    status: int  # the upstream's status (0: not answered)
    answer: Any  # its JSON body (None: none)
    cost: float  # estimated, in input tokens (`proxy.core.prompt_cache.ping_cost`)


def _ping_of(endpoint: str, content: bytes) -> bytes | None:
    """The ping's body made of a forwarded body (`proxy.formats.prompt_cache`), None for none."""
    try:
        body = ping_body(endpoint, jsonio.loads(content))
    except (ValueError, RecursionError):
        return None
    return None if body is None else jsonio.dumps(body)


class KeepAlive:
    def __init__(
        self,
        upstream: Upstream,
        limits: ka.Limits,
        *,
        max_bytes: int,
        on_answer: Callable[[PingDone], None] | None = None,
        on_avoided: Callable[[int], None] | None = None,
        clock: Callable[[], float] = time.time,
        timeout: float = 60.0,
    ) -> None:
        self.upstream, self.limits, self.max_bytes, self.clock, self.timeout = (
            upstream,
            limits,
            max_bytes,
            clock,
            timeout,
        )
        self.on_answer, self.on_avoided = on_answer, on_avoided
        self._held: dict[tuple[str, str], Session] = {}
        self._bytes = 0
        self._task: asyncio.Task[None] | None = None
        self._pinging: dict[tuple[str, str], asyncio.Task[None]] = {}  # the ping under way of each session
        self._wake = asyncio.Event()

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._held)

    async def hold(
        self,
        tenant: TenantStore,
        session: str,
        *,
        sent: LastSent,
        content: bytes,
        headers: Headers,
        base: str | None,
        fmt: Any = None,
        query: bytes = b"",
    ) -> bool:
        """After a turn: what it sent, held for its pings when it may get any (True). The ping is
        made of `content` (parsed, walked, written again) off the event loop for a large one."""
        name = (tenant.namespace, session)
        before = self._drop(name)
        now = self.clock()
        if (
            before is not None
            and before.held.pings
            and now - before.held.turn_at > self.limits.ttl
            and now - before.held.sent_at <= self.limits.ttl
            and self.on_avoided is not None
        ):
            self.on_avoided(before.held.tokens)  # cold without the pings, warm with them: a write avoided
        profile_of = profile_name(sent.endpoint)
        if profile_of is None or len(content) > self.max_bytes:
            return False
        profile = replace(pc.profile_for(profile_of, sent.model), ttl=self.limits.ttl)
        held = ka.Held(sent.tokens, turn_at=sent.at, sent_at=sent.at, output_tokens=output_tokens(sent.endpoint))
        if ka.next_ping(held, self.limits, profile) is None:
            return False
        body = await CPU(len(content) > LARGE_BODY)(_ping_of, sent.endpoint, content)
        if body is None:
            return False
        headers = [(k, v) for k, v in headers if k.lower() not in DROP_HEADERS]
        entry = Session(
            tenant,
            session,
            sent.endpoint,
            base,
            headers,
            body,
            sent.digest,
            sent.model,
            profile,
            held,
            fmt,
            query=query,
        )
        self._drop(name)  # a later turn's, held while this one was made
        self._held[name] = entry
        self._bytes += entry.size
        while self._bytes > self.max_bytes and self._held:  # the longest idle first
            self._drop(min(self._held, key=lambda n: self._held[n].held.turn_at))
        self._wake.set()
        return name in self._held

    def _drop(self, name: tuple[str, str]) -> Session | None:
        entry = self._held.pop(name, None)
        if entry is not None:
            self._bytes -= entry.size
        return entry

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        pinging = list(self._pinging.values())
        for ping in pinging:
            ping.cancel()
        await asyncio.gather(*pinging, return_exceptions=True)
        self._held.clear()
        self._bytes = 0

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:  # noqa: BLE001 - the loop outlives any one session's failure
                log.exception("keep-alive pings failed")
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=min(TICK, self.limits.lead / 2))

    async def tick(self) -> None:
        """Start the pings due now, each on its own (a session's upstream slow to answer holds up
        no other session's ping: it could take the ping's timeout, longer than the lead); drop
        what gets no more."""
        now = self.clock()
        for name, entry in list(self._held.items()):
            at = ka.next_ping(entry.held, self.limits, entry.profile)
            if at is None:
                if ka.expired(entry.held, self.limits, now) or entry.held.pings >= self.limits.max_pings:
                    self._drop(name)
                continue
            if at <= now and name not in self._pinging:
                self._pinging[name] = asyncio.get_running_loop().create_task(self._logged(name, entry))

    async def _logged(self, name: tuple[str, str], entry: Session) -> None:
        try:
            await self._ping(entry)
        except Exception:  # noqa: BLE001 - one session's failure ends its ping only
            log.exception("a keep-alive ping failed")
        finally:
            self._pinging.pop(name, None)

    async def _ping(self, entry: Session) -> None:
        name = (entry.tenant.namespace, entry.session)
        record = await read(entry.tenant, entry.session)
        if record is None or record.digest != entry.digest:
            self._drop(name)  # a later turn went out (here, on another replica), or the store forgot it
            return
        pinged = replace(entry, held=replace(entry.held, pings=entry.held.pings + 1, sent_at=self.clock()))
        if self._held.get(name) is not entry:
            return  # a turn came meanwhile
        self._held[name] = pinged
        claim = key(
            entry.tenant.namespace,
            "keepalive",
            f"{entry.tenant.sealer.key_name(entry.session, entry.tenant.namespace)}:{entry.digest}:{entry.held.pings}",
        )
        try:
            if not await entry.tenant.store.put_if_absent(claim, b"1", max(1, int(self.limits.ttl))):
                return  # another replica pings it
        except Exception:  # noqa: BLE001 - no claim, no ping (a store down: StoreUnavailable)
            return
        cost = ka.ping_cost(entry.profile, entry.held)
        status, answer = await self._send(entry)
        if self.on_answer is not None:
            self.on_answer(PingDone(entry, status, answer, cost))

    async def _send(self, entry: Session) -> tuple[int, Any]:
        try:
            async with asyncio.timeout(self.timeout):
                response = await self.upstream.send(
                    "POST",
                    entry.endpoint,
                    query=entry.query,
                    headers=entry.headers,
                    content=entry.content,
                    base=entry.base,
                )
                try:
                    raw = bytearray()
                    async for chunk in response.aiter_bytes():
                        raw += chunk
                        if len(raw) > MAX_ANSWER:
                            break
                finally:
                    await response.aclose()
        except Exception:  # noqa: BLE001 - a ping that fails is counted, never retried
            log.warning("a keep-alive ping failed", exc_info=True)
            return 0, None
        try:
            return response.status_code, jsonio.loads(bytes(raw))
        except (ValueError, RecursionError):
            return response.status_code, None
