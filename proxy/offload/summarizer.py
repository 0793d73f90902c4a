"""The summariser: the LLM call that turns old history into a `<state_snapshot>` (`summarize_prefix`,
`summarize`), where it runs when made ahead of time (in the background: `SummaryScheduler`, a
bounded number at once in a process, and `Lease`, one per conversation across a fleet), and what
the call needs from its request (`SummaryContext`), what compressing gives back (`Compressed`) and
where a summary is counted (`count_summary`, `bill_summary`).

Each part's own account follows as the comment that opens its section.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hashlib
import logging
import math
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2

from proxy import telemetry
from proxy.core import jsonio, texts
from proxy.core.answers import NONE, Bill, UsageReader
from proxy.core.compaction import Offload
from proxy.core.jsonio import JsonObject
from proxy.core.prompt_cache import CutContext
from proxy.core.view import ItemView
from proxy.core.wire import WireFormat
from proxy.errors import ProxyError
from proxy.formats.chat import USAGE as CHAT_USAGE
from proxy.offload.records import RefStore
from proxy.offload.tenant import key
from proxy.store import Store, StoreUnavailable
from proxy.telemetry import UpstreamRecord
from proxy.upstream.client import Headers, Upstream

# The LLM call that turns old history into a `<state_snapshot>`.
#
# Same upstream, the request's own credentials, non-streaming, bounded by a timeout. Two shapes:
#
# - prefix (`summarize_prefix`, the default): the conversation as its turns send it (the same
#   tools and leading items, byte for byte, so the provider's prompt cache serves them), then one
#   instruction; the wire format builds the request and reads the answer;
# - transcript (`summarize`, `--summary-request transcript`): a system prompt and one user message
#   rendering the items, on chat completions, for upstreams without prefix caching; a previous
#   summary is handed to the model to update rather than starting over.

DEFAULT_PROMPT = texts.SUMMARY_PROMPT  # the transcript shape's system prompt
DEFAULT_INSTRUCTION = texts.SUMMARY_INSTRUCTION  # the prefix shape's last message

SNAPSHOT_OPEN, SNAPSHOT_CLOSE = "<state_snapshot>", "</state_snapshot>"
MESSAGE_CHARS = 6_000  # one message's share of the transcript


@functools.lru_cache(maxsize=64)  # asked once per request; prompts are few
def prompt_version(prompt: str) -> str:
    return hashlib.blake2b(prompt.encode(), digest_size=6).hexdigest()


def render_transcript(lines: list[tuple[str, str]]) -> str:
    """The summarised items, as (header, text) from their format's `ItemView.transcript`."""
    out = []
    for header, text in lines:
        if len(text) > MESSAGE_CHARS:
            text = text[: MESSAGE_CHARS // 2] + "\n[…]\n" + text[-MESSAGE_CHARS // 2 :]
        out.append(f"{header}\n{text}".rstrip())
    return "\n\n".join(out)


class SummaryFailed(Exception):
    pass


@dataclass(frozen=True)
class Summary:
    text: str
    tokens_in: int
    tokens_out: int
    bill: Bill = Bill()  # what the provider reports it charged for the call (`proxy.core.answers`)


ESTIMATED_SUMMARY_TOKENS = 2048  # half the summary's output budget (4,096 tokens): what an observed turn assumes


def estimated(tokens: int = ESTIMATED_SUMMARY_TOKENS) -> Summary:
    """A stand-in for a summary that was not asked for (an observed turn plans what it would have
    forwarded): about `tokens` tokens of filler, never sent anywhere, costing nothing."""
    return Summary(" ".join(["state"] * max(1, tokens)), 0, 0)


class BilledFailure(SummaryFailed):
    """A call the upstream answered (and billed) whose answer is no summary."""

    def __init__(self, message: str, bill: Bill) -> None:
        super().__init__(message)
        self.bill = bill


async def summarize(
    upstream: Upstream,
    headers: Headers,
    model: str,
    *,
    prompt: str,
    lines: list[tuple[str, str]],
    previous: str | None,
    timeout: float,
    base: str | None = None,
    record: UpstreamRecord | None = None,
) -> Summary:
    user = ""
    if previous:
        user += f"Previous snapshot:\n{previous}\n\nNew messages since then:\n\n"
    user += render_transcript(lines)
    body = {"model": model, "messages": [{"role": "system", "content": prompt}, {"role": "user", "content": user}]}
    return await _call(
        upstream,
        headers,
        "chat/completions",
        body=body,
        read=_chat_answer,
        timeout=timeout,
        base=base,
        usage=CHAT_USAGE,
        record=record,
    )


async def summarize_prefix(
    upstream: Upstream,
    headers: Headers,
    request: tuple[str, JsonObject],
    *,
    read: Callable[[Any], tuple[str, int, int]],
    timeout: float,
    base: str | None = None,
    usage: UsageReader = CHAT_USAGE,
    record: UpstreamRecord | None = None,
) -> Summary:
    """`request`: (endpoint, body) from the wire format's `summary_request`; `read` its
    `summary_answer`, `usage` its `usage`."""
    endpoint, body = request
    return await _call(
        upstream, headers, endpoint, body=body, read=read, timeout=timeout, base=base, usage=usage, record=record
    )


def _chat_answer(data: Any) -> tuple[str, int, int]:
    content = data["choices"][0]["message"]["content"] or ""
    usage = data.get("usage") or {}
    return content, int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)


MAX_ANSWER_BYTES = 8 * 1024 * 1024  # a summary answer larger than this is refused, not read into memory


def snapshot_in(content: str) -> str | None:
    """The first `<state_snapshot>…</state_snapshot>` block, found in linear time (a lazy regex
    over an answer repeating the opening tag is quadratic: seconds on the event loop)."""
    start = content.find(SNAPSHOT_OPEN)
    if start < 0:
        return None
    end = content.find(SNAPSHOT_CLOSE, start + len(SNAPSHOT_OPEN))
    return None if end < 0 else content[start : end + len(SNAPSHOT_CLOSE)]


async def _read_answer(response: httpx2.Response) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > MAX_ANSWER_BYTES:
            raise SummaryFailed(f"summary answer is larger than {MAX_ANSWER_BYTES} bytes")
    return bytes(body)


async def _call(
    upstream: Upstream,
    headers: Headers,
    endpoint: str,
    *,
    body: JsonObject,
    read: Callable[[Any], tuple[str, int, int]],
    timeout: float,
    base: str | None,
    usage: UsageReader,
    record: UpstreamRecord | None,
) -> Summary:
    payload = jsonio.dumps(body)
    try:
        async with asyncio.timeout(timeout):
            response = await upstream.send("POST", endpoint, headers=headers, content=payload, base=base, record=record)
            try:
                raw = await _read_answer(response)
            finally:
                await response.aclose()
    except TimeoutError as exc:
        raise SummaryFailed(f"summary call timed out after {timeout:g}s") from exc
    except ProxyError as exc:
        raise SummaryFailed(f"summary call failed: {exc.message}") from exc
    except httpx2.HTTPError as exc:  # the answer broke off while it was read
        raise SummaryFailed(f"summary answer broke off: {type(exc).__name__}") from exc
    if response.status_code != 200:
        raise SummaryFailed(f"summary call answered {response.status_code}")
    try:
        answer = jsonio.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise BilledFailure("summary call returned an unusable body", usage.of_answer(None)) from exc
    bill = usage.of_answer(answer)
    try:
        content, tokens_in, tokens_out = read(answer)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError) as exc:
        raise BilledFailure("summary call returned an unusable body", bill) from exc
    snapshot = snapshot_in(content) if isinstance(content, str) else None
    if snapshot is None:
        raise BilledFailure("summary has no <state_snapshot> block", bill)
    return Summary(snapshot, tokens_in, tokens_out, bill)


# Summaries made in the background: a bounded number at once in a process (`SummaryScheduler`),
# and one per conversation across a fleet (`Lease`, in the shared store).
#
# The scheduler: a bounded number at once, a bounded queue, one per key; bounded three ways against
# one caller crowding out the others or the memory: jobs per tenant (`per_tenant`, queued and
# running), and the weight (tokens of history) all jobs hold together. A job holds what its
# summarisation call needs, the caller's credentials included, only while it waits or runs: a
# queued job older than `max_age` is dropped unstarted, a finished one is forgotten at once, and at
# shutdown the queue is dropped and what runs gets `grace` seconds before it is cancelled. Jobs run
# in a context of their own (not the request's that started them, which has ended by then).
#
# The lease makes `SummaryScheduler.busy` true for every replica on one store: it is taken where
# one process becomes busy (when the job is handed to the scheduler, once the turn that prepared it
# has been answered) and any replica's next turn that finds it held starts no summary of its own:
# the summary under way is found once it is stored.
#
# - what: the exact prefix the summary is made of (its hash, the summary prompt's version), so two
#   replicas summarising the very same prefix share one call, and two conversations that only
#   share their opening (a deterministic agent's parallel attempts) never hold each other's.
#   While held, a lease is listed in its conversation opening's index (`Listing`, a ranked set
#   scored by expiry): a later turn of the same conversation, whose cut has moved on, finds the
#   summary under way there, by the prefix it covers (`under_way`);
# - owner: a random token per lease; renewal and release compare it (compare-and-extend,
#   compare-and-delete), so a replica whose lease lapsed never renews or frees the next owner's;
# - expiry: `lease_ttl` (the summary timeout, at most LEASE_MAX seconds), renewed every third of it
#   while the job is queued or runs, released when it ends or is dropped unstarted;
# - a replica that dies (kill -9) renews no more: its lease lapses within the TTL and the next
#   turn, on any replica, starts the summary;
# - a store that is down: no lease is taken, so no background summary starts (as none could be
#   stored); the turn itself goes on as it would have.

log = logging.getLogger("proxy")
CANCEL_WAIT = 5.0  # at shutdown, how long (s) the jobs cancelled past their grace get to end


@dataclass
class _Job:
    key: str
    run: Callable[[], Awaitable[None]]
    queued: float
    tenant: str
    weight: int
    on_end: Callable[[], None] | None = None  # called once it has ended or was dropped


@dataclass(frozen=True)
class SchedulerState:
    queued: int
    running: int
    oldest_seconds: float  # age of the oldest job queued or running (0 when none)
    dropped: int  # jobs never started: queue full, too old, or shut down


class SummaryScheduler:
    def __init__(
        self,
        *,
        concurrency: int = 4,
        queue: int = 64,
        max_age: float = 120.0,
        per_tenant: int | None = None,
        max_weight: int = 32_000_000,
        on_change: Callable[[SchedulerState], None] | None = None,
    ) -> None:
        self.concurrency, self.queue_size, self.max_age = concurrency, queue, max_age
        self.per_tenant = per_tenant or concurrency
        self.max_weight = max_weight
        self._queue: deque[_Job] = deque()
        self._running: dict[str, tuple[asyncio.Task[None], float]] = {}
        self._jobs: dict[str, _Job] = {}  # queued or running, by key
        self._tenants: dict[str, int] = {}
        self._weight = 0
        self._closed = False
        self._dropped = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._on_change = on_change

    def busy(self, key: str) -> bool:
        """Is a job with this key queued or running here?"""
        return key in self._jobs

    def submit(
        self,
        key: str,
        run: Callable[[], Awaitable[None]],
        *,
        tenant: str = "",
        weight: int = 0,
        on_end: Callable[[], None] | None = None,
    ) -> bool:
        """Start `run` now or when a slot frees; False (nothing started) when the same key is
        already here, the queue, the tenant's share or the weight is full, or it is closed.
        `weight`: what the job holds in memory (tokens of history), released when it ends.
        `on_end`: called when the job has ended, or was dropped without ever running."""
        if self._closed or key in self._jobs:
            return False
        if (
            (len(self._running) >= self.concurrency and len(self._queue) >= self.queue_size)
            or self._tenants.get(tenant, 0) >= self.per_tenant
            or (self._jobs and self._weight + weight > self.max_weight)
        ):
            self._dropped += 1
            self._changed()
            return False
        job = _Job(key, run, time.monotonic(), tenant, weight, on_end)
        self._jobs[key] = job
        self._tenants[tenant] = self._tenants.get(tenant, 0) + 1
        self._weight += weight
        self._idle.clear()
        if len(self._running) < self.concurrency:
            self._start(job)
        else:
            self._queue.append(job)
        self._changed()
        return True

    def _start(self, job: _Job) -> None:
        task = asyncio.get_running_loop().create_task(self._guarded(job), context=contextvars.Context())
        self._running[job.key] = (task, job.queued)
        key = job.key
        task.add_done_callback(lambda _task: self._finished(key))

    async def _guarded(self, job: _Job) -> None:
        try:
            await job.run()
        except asyncio.CancelledError:
            raise
        except Exception:  # a job reports its own failures; this is a bug, not a failed summary
            log.exception("background summary crashed")

    def _forget(self, key: str) -> None:
        job = self._jobs.pop(key, None)
        if job is not None:
            self._weight -= job.weight
            left = self._tenants.get(job.tenant, 1) - 1
            if left > 0:
                self._tenants[job.tenant] = left
            else:
                self._tenants.pop(job.tenant, None)
            if job.on_end is not None:
                try:
                    job.on_end()
                except Exception:  # the scheduler's own bookkeeping must go on
                    log.exception("a background summary's end callback failed")

    def _finished(self, key: str) -> None:
        self._running.pop(key, None)
        self._forget(key)
        now = time.monotonic()
        while self._queue and len(self._running) < self.concurrency and not self._closed:
            job = self._queue.popleft()
            if now - job.queued > self.max_age:  # its turn is long gone: do not start it late
                self._forget(job.key)
                self._dropped += 1
                continue
            self._start(job)
        if not self._running and not self._queue:
            self._idle.set()
        self._changed()

    def state(self) -> SchedulerState:
        now = time.monotonic()
        started = [queued for _, queued in self._running.values()] + [job.queued for job in self._queue]
        return SchedulerState(
            len(self._queue), len(self._running), now - min(started) if started else 0.0, self._dropped
        )

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self.state())

    async def idle(self) -> None:
        """Until nothing is queued or running (tests, benchmarks)."""
        await self._idle.wait()

    async def shutdown(self, grace: float) -> None:
        """Drop the queue; give running jobs `grace` seconds, then cancel them."""
        self._closed = True
        for job in self._queue:
            self._forget(job.key)
        self._dropped += len(self._queue)
        self._queue.clear()
        tasks = [task for task, _ in self._running.values()]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=grace)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=CANCEL_WAIT)
        self._changed()


LEASE_MAX = 10  # seconds a dead replica's lease can block its conversation's summaries, at most
LISTED_MAX = 64  # leases read from an opening's index (the conversations sharing it, summarising now)


@dataclass(frozen=True)
class Listing:
    """Where a lease is listed while held: its conversation opening's index, as `cut:name`
    (the summarised prefix's length, and the lease's name: its key's last part)."""

    index: str
    cut: int
    name: str

    @property
    def entry(self) -> str:
        return f"{self.cut}:{self.name}"

    async def show(self, store: Store, ttl: int) -> None:
        """Listed until `ttl` seconds from now (its score: its expiry); the expired ones dropped."""
        now = time.time()
        await store.rank(self.index, self.entry, now + ttl, ttl=ttl, drop_below=now)

    async def hide(self, store: Store, ttl: int) -> None:
        await store.rank(self.index, self.entry, 0.0, ttl=ttl, drop_below=time.time())


async def under_way(
    store: Store,
    index: str,
    *,
    namespace: str,
    suffix: str,
    covered: Callable[[list[tuple[int, str]]], Awaitable[list[str]]],
) -> bool:
    """Is a summary of a prefix of this history being made, here or on another replica? Of the
    leases an opening's `index` lists as held on names ending in `suffix` (the summary prompt's
    version), as (cut, name) by rising cut, those whose prefix `covered` finds in this history,
    is one still held?"""
    _, listed = await store.ranked(index, 0, LISTED_MAX)
    now = time.time()
    entries = sorted(
        (int(cut), name)
        for entry, expires in listed
        if expires >= now
        for cut, _, name in [entry.partition(":")]
        if cut.isdigit() and name.endswith(suffix)
    )
    for name in await covered(entries) if entries else []:
        if await held(store, key(namespace, "lease", name)):
            return True
    return False


def lease_ttl(summary_timeout: float) -> int:
    """The lease's expiry: the summary timeout, within 1 and LEASE_MAX seconds."""
    return max(1, min(LEASE_MAX, math.ceil(summary_timeout)))


class Lease:
    def __init__(self, store: Store, key: str, owner: bytes, *, ttl: int, listed: Listing | None = None) -> None:
        self.store, self.key, self.owner, self.ttl, self.listed = store, key, owner, ttl, listed
        self._released = False
        self._keeper = asyncio.get_running_loop().create_task(self._keep(), context=contextvars.Context())

    @classmethod
    async def take(cls, store: Store, key: str, ttl: int, *, listed: Listing | None = None) -> Lease | None:
        """The lease, renewed (and listed in `listed`'s index) from now on; None while another
        owner holds it. Raises StoreUnavailable (a lease it could not list is not kept)."""
        owner = secrets.token_hex(16).encode()
        if not await store.put_if_absent(key, owner, ttl):
            return None
        taken = cls(store, key, owner, ttl=ttl, listed=listed)
        if listed is not None:
            try:
                await listed.show(store, ttl)
            except StoreUnavailable:
                await taken.release()  # unlisted, a later turn of its conversation would not see it
                raise
        return taken

    async def _keep(self) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            try:
                if not await self.store.extend_if(self.key, self.owner, self.ttl):
                    log.warning("a background summary's lease lapsed before it ended (%s)", self.key)
                    return
                if self.listed is not None:
                    await self.listed.show(self.store, self.ttl)
            except StoreUnavailable:
                continue  # the store may answer again before the lease lapses

    async def release(self) -> None:
        """Stop renewing and free the lease if it is still this owner's (once)."""
        if self._released:
            return
        self._released = True
        self._keeper.cancel()
        try:
            if await self.store.delete_if(self.key, self.owner) and self.listed is not None:
                await self.listed.hide(self.store, self.ttl)
        except StoreUnavailable:
            pass  # it lapses by itself, and so does its listing

    def release_soon(self) -> None:
        """`release` from synchronous code (a job dropped unstarted)."""
        if self._released:
            return
        task = asyncio.get_running_loop().create_task(self.release(), context=contextvars.Context())
        _releasing.add(task)
        task.add_done_callback(_releasing.discard)


_releasing: set[asyncio.Task[None]] = set()  # releases under way: kept referenced until they end


async def held(store: Store, key: str) -> bool:
    """Is the lease held (by any replica, this one included)?"""
    return await store.get(key) is not None


Submit = Callable[[Callable[[], Awaitable[None]], Callable[[], None]], bool]


async def submit_leased(
    store: Store,
    key: str,
    ttl: int,
    *,
    run: Callable[[], Awaitable[None]],
    submit: Submit,
    listed: Listing | None = None,
) -> bool:
    """Take the lease (listed in `listed`'s index), then hand `run` to `submit(job, on_end)` (the
    scheduler): the job releases the lease as it ends (before the scheduler counts it done),
    `on_end` if it was dropped unstarted or cancelled before it began. False (nothing started)
    when the lease is held elsewhere, the store is down or the scheduler refuses."""
    try:
        lease = await Lease.take(store, key, ttl, listed=listed)
    except StoreUnavailable:
        return False
    if lease is None:
        return False

    async def job() -> None:
        try:
            await run()
        finally:
            await lease.release()

    try:
        submitted = submit(job, lease.release_soon)
    except BaseException:
        await lease.release()  # never a lease renewed for a job nobody runs
        raise
    if not submitted:
        await lease.release()
        return False
    return True


# What a summarisation call needs from its request (`SummaryContext`), what compressing a
# history gives back (`Compressed`), and where a summary is counted: once, in the request's
# record or, made in the background, in the metrics and the tenant's statistics.


def count_summary(ok: bool, seconds: float, ctx: SummaryContext, *, record: telemetry.SummaryRecord | None) -> None:
    """Into the request's record (`record`, its turn's statistics count it), or for a summary
    made in the background (no record: `SummaryContext.record` is not its) into the metrics and
    the tenant's statistics (`tally`) straight away: once either way."""
    if record is not None:
        return record.count_summary(ok, seconds)
    if ctx.metrics is not None:
        ctx.metrics.count_summary(ok, seconds)
    if ctx.tally is not None:
        ctx.tally(ok)


def bill_summary(bill: Bill, ctx: SummaryContext, *, record: telemetry.SummaryRecord | None) -> None:
    """What the provider billed for a summary's calls, counted once as `count_summary` counts
    the summary: on the request's record (its turn's bill, kind "summary"), or for one made in
    the background into the tenant's statistics (`billed`) straight away."""
    if bill == NONE:
        return
    if record is not None:
        record.add_summary_bill(bill)
        return
    if ctx.metrics is not None:
        ctx.metrics.count_bill(bill, "summary")
    if ctx.billed is not None:
        ctx.billed(bill, ctx.model)


@dataclass(frozen=True, kw_only=True)
class SummaryContext:
    """What a summarisation call needs from the request."""

    upstream: Upstream
    headers: Headers
    model: str
    prompt: str
    timeout: float
    wait: float
    base: str | None = None  # the upstream base URL when not the server's default
    view: ItemView | None = None  # the wire format's history items (chat when None)
    background: SummaryScheduler | None = None  # None: every summary is made inline
    session: str | None = None  # where a background summary's events go
    request_model: str | None = None  # the conversation's model (its context window caps the hard limit)
    metrics: telemetry.Metrics | None = None  # for summaries made in the background
    tally: Callable[[bool], None] | None = None  # the tenant's statistics, for those too (ok or failed)
    billed: Callable[[Bill, str], None] | None = None  # and their bill, with the model that made it
    refs: RefStore | None = None  # where a background summary stores the originals it covers
    tenant_scope: str | None = None  # whose share of the background slots (the credential, not X-Offload-Tenant)
    # The prefix shape (see the module docstring) needs the request's wire format and body; without
    # them, or with summary_request "transcript", summaries are transcripts sent to chat completions.
    wire: WireFormat | None = None
    body: JsonObject | None = None  # the client's request body (its tools, instructions, sampling, …)
    summary_request: str = "prefix"  # "prefix" | "transcript"
    instruction: str = DEFAULT_INSTRUCTION  # what the prefix shape appends
    cuts: CutContext | None = None  # the session's cache as the cut decisions see it (`proxy.core.prompt_cache`)
    # An observed turn (`X-Offload-Mode: observe`): no summary is asked for; a text of this many
    # tokens stands for it (`proxy.offload.summarizer.estimated`), so the plan says what would go out.
    estimate: int | None = None
    # The request's record (the HTTP layer's sink): a summary made inline is counted there, its
    # calls' timings too; one made in the background never is (None: no request's).
    record: telemetry.SummaryRecord | None = None


@dataclass
class Compressed:
    items: list[Any] | None = None  # None: not compressed
    offload: Offload | None = None  # the summarised originals, when newly made
    summary_tokens: int = 0
    warning: str | None = None
    events: list[JsonObject] = field(default_factory=list)
    usage: JsonObject | None = None  # the summarisation calls' usage, chat-completions shaped
    pending: bool = False  # the summary this turn needed is being made in the background
    usage_in: int = 0  # what the summary just made cost, however it is billed
    usage_out: int = 0
    summary_at: int | None = None  # `fold`: the index of the summary item in `items`
    media: list[Offload] = field(default_factory=list)  # the images and documents the new originals name
    kept: tuple[str, ...] = ()  # the media refs the summary's originals name: kept alive while it is used
    summary_prefix: str = ""  # the forwarded summary's `PriorSummary.prefix` ("" none, or not known)

    @property
    def stored(self) -> list[Offload]:
        """What a newly made summary stores: its originals, then the media they name."""
        return [self.offload, *self.media] if self.offload is not None else []


def summary_usage(tokens_in: int, tokens_out: int) -> JsonObject | None:
    if not tokens_in and not tokens_out:
        return None
    return {"prompt_tokens": tokens_in, "completion_tokens": tokens_out, "total_tokens": tokens_in + tokens_out}
