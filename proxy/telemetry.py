"""What a request's observability is made of, below the HTTP layer: the `RequestRecord` each
request carries, filled in by whoever knows a figure (the handlers, the upstream client, the
summariser), and the Prometheus `Metrics` it is turned into. Nothing below the HTTP layer reads
or writes a context variable for it: each part reports to the sink it is handed (`TurnRecord`
for the reload loop and tools, `UpstreamRecord` for the upstream client, `SummaryRecord` for
the summariser; the HTTP layer passes the request's record, `NO_RECORD` or None keeps nothing).
The middleware that opens the record (and the context variable the HTTP layer finds it in), and
the log line it becomes, live in `proxy.http.telemetry`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess

from proxy.core.answers import NONE, PARTS, Bill, Meter

MAX_TENANT_LABELS = 1000  # tenants with series of their own (clients make namespaces): the rest are "other"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


@dataclass
class RequestRecord:
    route: str
    method: str
    path: str | None = None  # as routed (canonical); clipped in the log line
    started: float = field(default_factory=time.perf_counter)
    status: int = 0
    request_id: str | None = None
    tenant: str | None = None
    model: str | None = None
    stream: bool | None = None
    transport: str | None = None  # "websocket": a response.create of a Responses WebSocket (else HTTP)
    tokens_before: int | None = None
    tokens_after: int | None = None
    action: str | None = None
    refs: int | None = None  # references in the forwarded payload (X-Offload-Refs)
    refs_created: int = 0  # of which stored for the first time by this request (X-Offload-Refs-Created)
    offloaded_bytes: int = 0
    image_tokens_saved: int = 0  # by offloading images and documents (the dashboard shows them apart)
    reload_calls: int = 0
    reload_rounds: int = 0
    searches: int = 0  # context_search calls run
    summaries_made: int = 0  # summaries this request made (not those made in the background)
    summaries_failed: int = 0
    upstream_status: int | None = None
    upstream_sent: float | None = None  # when the (first) upstream request left
    upstream_ttfb: float | None = None  # seconds until its response headers
    warnings: list[str] = field(default_factory=list)
    unknown_headers: list[str] = field(default_factory=list)  # X-Offload-* names ignored (clipped, at most 8)
    metrics: "Metrics | None" = field(default=None, repr=False)
    # For the usage statistics (proxy.stats.recorder), never logged but the session: the session
    # derived from the conversation when no X-Offload-Session came, the previous_response_id a
    # Responses turn continues from, its stored answer's id, and the body of its first upstream
    # request (prefix reuse; dropped once measured).
    session: str | None = None
    continues: str | None = field(default=None, repr=False)
    response_id: str | None = field(default=None, repr=False)
    forwarded: bytes | None = field(default=None, repr=False)
    # What the provider billed (`proxy.core.answers`): the turn's upstream answers (its reload rounds
    # included), and the proxy's summary calls made while it waited.
    bill: Meter = field(default_factory=Meter, repr=False)
    summary_bill: Bill = field(default=NONE, repr=False)
    observed: bool = False  # forwarded as received; tokens_after and action are what would have gone (observe mode)
    # A session of the holdout (`proxy.http.observed`): its arm, how the answer the client got ended
    # (`proxy.core.answers`: its finish reason, an error, a context-length error), and the tool
    # calls of the request's history repeating an earlier identical one (`proxy.core.answers`).
    arm: str | None = None
    finish: str | None = None
    answer_error: bool = False
    context_error: bool = False
    repeated_calls: int = 0

    def count_reload(self, tool: str) -> None:
        self.reload_calls += 1
        self.searches += tool == "context_search"
        if self.metrics:
            self.metrics.reload_calls.labels(tool).inc()

    def count_summary(self, ok: bool, seconds: float) -> None:
        self.summaries_made += ok
        self.summaries_failed += not ok
        if self.metrics:
            self.metrics.count_summary(ok, seconds)

    def count_round(self) -> None:
        self.reload_rounds += 1

    def add_bill(self, bill: Bill) -> None:
        """One upstream answer's bill (`proxy.core.answers.Meter`)."""
        self.bill.add(bill)

    def add_summary_bill(self, bill: Bill) -> None:
        """What the provider billed for the summaries this request made."""
        self.summary_bill = self.summary_bill + bill

    def upstream_left(self, at: float) -> None:
        """An upstream request left (`time.perf_counter()`): the first one's time is kept."""
        if self.upstream_sent is None:
            self.upstream_sent = at

    def upstream_answered(self, status: int, ttfb: float) -> None:
        """The response headers of an upstream request arrived, `ttfb` seconds after it left:
        the last one's status, the first one's time."""
        self.upstream_status = status
        if self.upstream_ttfb is None:
            self.upstream_ttfb = ttfb


class TurnRecord(Protocol):
    """The sink a turn's steps report their figures to (the reload loop and tools): passed in by
    the HTTP layer (its `RequestRecord`), never found in a context variable."""

    def count_reload(self, tool: str) -> None: ...

    def count_round(self) -> None: ...

    def add_bill(self, bill: Bill) -> None: ...


class _NoRecord:
    """A sink that keeps nothing (replay, tests, a request without a record)."""

    def count_reload(self, tool: str) -> None:
        pass

    def count_round(self) -> None:
        pass

    def add_bill(self, bill: Bill) -> None:
        pass


NO_RECORD: TurnRecord = _NoRecord()


class UpstreamRecord(Protocol):
    """The sink the upstream client reports a request's timings to (`Upstream.send`'s `record`)."""

    def upstream_left(self, at: float) -> None: ...

    def upstream_answered(self, status: int, ttfb: float) -> None: ...


class SummaryRecord(UpstreamRecord, Protocol):
    """The sink a summary made for a request is counted in, its calls' timings too
    (`SummaryContext.record`)."""

    def count_summary(self, ok: bool, seconds: float) -> None: ...

    def add_summary_bill(self, bill: Bill) -> None: ...


class Metrics:
    """The proxy's metrics, in a registry of their own (or the multi-process one)."""

    def __init__(self, tenant_label: bool = False) -> None:
        self.multiprocess = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
        self.registry = CollectorRegistry()
        self.tenant_label = tenant_label
        self._tenants: set[str] = set()  # label values given so far
        tenant = ("tenant",) if tenant_label else ()
        r = self.registry
        self.requests = Counter(
            "offload_requests_total", "Requests by route and status.", ("route", "status", *tenant), registry=r
        )
        self.duration = Histogram(
            "offload_request_seconds",
            "Whole request time, streams included.",
            ("route",),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.overhead = Histogram(
            "offload_overhead_seconds",
            "Proxy time before the upstream request left.",
            ("route",),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_ttfb = Histogram(
            "offload_upstream_ttfb_seconds",
            "Upstream time to response headers.",
            ("route",),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_latency = Histogram(
            "offload_upstream_seconds",
            "Upstream time, first send to response end.",
            ("route",),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens_before = Counter(
            "offload_tokens_before_total", "Chat tokens as sent by clients.", tenant, registry=r
        )
        self.tokens_after = Counter(
            "offload_tokens_after_total", "Chat tokens as forwarded upstream.", tenant, registry=r
        )
        self.offloaded_bytes = Counter("offload_offloaded_bytes_total", "Bytes newly stored.", registry=r)
        self.refs_created = Counter("offload_refs_created_total", "References newly stored.", registry=r)
        self.reload_calls = Counter("offload_reload_calls_total", "Injected tool calls run.", ("tool",), registry=r)
        self.reload_rounds = Counter("offload_reload_rounds_total", "Extra upstream rounds for reloads.", registry=r)
        self.holdout_turns = Counter(
            "offload_holdout_turns_total",
            "Turns of the holdout's sessions by arm (control: "
            "forwarded unchanged) and how they ended (ok, error, context_error).",
            ("arm", "outcome"),
            registry=r,
        )
        self.summaries = Counter("offload_summaries_total", "Summarisation calls by outcome.", ("outcome",), registry=r)
        self.summary_seconds = Histogram(
            "offload_summary_seconds", "Summarisation call time.", buckets=LATENCY_BUCKETS, registry=r
        )
        self.summaries_queued = Gauge(
            "offload_summaries_queued",
            "Background summaries waiting for a slot.",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.summaries_running = Gauge(
            "offload_summaries_in_flight", "Background summaries being made.", registry=r, multiprocess_mode="livesum"
        )
        self.summaries_oldest = Gauge(
            "offload_summaries_oldest_seconds",
            "Age of the oldest background summary queued or in flight.",
            registry=r,
            multiprocess_mode="livemax",
        )
        self.summaries_dropped = Gauge(
            "offload_summaries_dropped",
            "Background summaries never started (queue full, waited too long, shut down).",
            registry=r,
            multiprocess_mode="livesum",
        )
        self._summaries_state: Callable[[], Any] | None = None
        self.store_errors = Counter("offload_store_errors_total", "Store operations that failed.", registry=r)
        self.store_seconds = Histogram(
            "offload_store_seconds", "Store operation time.", ("op",), buckets=LATENCY_BUCKETS, registry=r
        )
        self.store_up = Gauge(
            "offload_store_up",
            "1 while the store answers, 0 while it is skipped as down (requests then go out without offloading).",
            registry=r,
            multiprocess_mode="livemin",
        )
        # the label: the known header closest to the unknown one (proxy.core.settings), never the client's name
        self.unknown_headers = Counter(
            "offload_unknown_headers_total",
            "X-Offload-* request headers the proxy "
            "does not read (ignored, answered with X-Offload-Warning), by the known "
            "header closest to each: none, or unchecked past a request's first 8.",
            ("closest",),
            registry=r,
        )
        self.billed_tokens = Counter(
            "offload_billed_tokens_total",
            "Tokens the upstream billed, as it reported "
            "them: by kind (uncached, cache_read, cache_write_5m, cache_write_1h, output) "
            "and by call (turn: a client's answer and its reload rounds; summary: the "
            "proxy's summary calls; keepalive: cache keep-alive pings).",
            ("kind", "call"),
            registry=r,
        )
        self.turns_without_usage = Counter(
            "offload_turns_without_usage_total",
            "Upstream answers (a turn's, a "
            "summary call's) that reported no usage the proxy could read: "
            "counted, not billed.",
            ("call",),
            registry=r,
        )
        self.keepalive_pings = Counter(
            "offload_keepalive_pings_total",
            "Keep-alive requests sent to keep a session's prompt cache warm, by outcome (ok: answered 200).",
            ("outcome",),
            registry=r,
        )
        self.keepalive_cost = Counter(
            "offload_keepalive_cost_tokens_total",
            "What the keep-alive requests cost, in uncached input tokens (estimated at the provider's cache prices).",
            registry=r,
        )
        self.keepalive_avoided = Counter(
            "offload_keepalive_writes_avoided_tokens_total",
            "Prefix tokens a session's next turn read from a cache only keep-alive requests kept warm.",
            registry=r,
        )
        self.stats_dropped = Counter(
            "offload_stats_dropped_total",
            "Turns (and background summaries) the usage "
            "statistics lost: more held while the store was down than they keep.",
            registry=r,
        )

    def summaries_state(self, state: Any) -> None:
        """The background summaries' scheduler state (proxy.offload.summarizer.SchedulerState)."""
        self.summaries_queued.set(state.queued)
        self.summaries_running.set(state.running)
        self.summaries_oldest.set(round(state.oldest_seconds, 3))
        self.summaries_dropped.set(state.dropped)

    def count_summary(self, ok: bool, seconds: float) -> None:
        self.summaries.labels("ok" if ok else "failed").inc()
        self.summary_seconds.observe(seconds)

    def count_bill(self, bill: Bill, call: str) -> None:
        """`call`: one of `proxy.core.answers.KINDS`."""
        for part in PARTS:
            if tokens := getattr(bill, part):
                self.billed_tokens.labels(part, call).inc(tokens)
        if bill.unreported:
            self.turns_without_usage.labels(call).inc(bill.unreported)

    def count_unknown_headers(self, labels: dict[str, int]) -> None:
        for label, count in labels.items():
            self.unknown_headers.labels(label).inc(count)

    def watch_summaries(self, state: Callable[[], Any]) -> None:
        """Read the scheduler's state at every scrape too (the age of the oldest job grows between changes)."""
        self._summaries_state = state

    def render(self) -> bytes:
        if self._summaries_state is not None:
            self.summaries_state(self._summaries_state())
        if self.multiprocess:
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]  # prometheus_client leaves its __init__ unannotated
            return generate_latest(registry)
        return generate_latest(self.registry)

    def _tenant(self, namespace: str) -> str:
        """`namespace` as a label value: each is a series kept for the process's life."""
        if namespace not in self._tenants:
            if len(self._tenants) >= MAX_TENANT_LABELS:
                return "other"
            self._tenants.add(namespace)
        return namespace

    def observe(self, rec: RequestRecord, elapsed: float) -> None:
        tenant = (self._tenant(rec.tenant or ""),) if self.tenant_label else ()
        self.requests.labels(rec.route, str(rec.status), *tenant).inc()
        self.duration.labels(rec.route).observe(elapsed)
        if rec.upstream_sent is not None:
            self.overhead.labels(rec.route).observe(rec.upstream_sent - rec.started)
            self.upstream_latency.labels(rec.route).observe(time.perf_counter() - rec.upstream_sent)
        if rec.upstream_ttfb is not None:
            self.upstream_ttfb.labels(rec.route).observe(rec.upstream_ttfb)
        if rec.tokens_before is not None and rec.route != "count_tokens":  # counting sends nothing to the model
            before, after = (m.labels(*tenant) if tenant else m for m in (self.tokens_before, self.tokens_after))
            before.inc(rec.tokens_before)
            after.inc(rec.tokens_after or 0)
        self.offloaded_bytes.inc(rec.offloaded_bytes)
        self.refs_created.inc(rec.refs_created)
        self.reload_rounds.inc(rec.reload_rounds)
        if rec.arm is not None and rec.tokens_before is not None:
            outcome = "context_error" if rec.context_error else "error" if rec.answer_error else "ok"
            self.holdout_turns.labels(rec.arm, outcome).inc()
        self.count_bill(rec.bill.total, "turn")
        self.count_bill(rec.summary_bill, "summary")
