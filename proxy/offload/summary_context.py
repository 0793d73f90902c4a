"""What a summarisation call needs from its request (`SummaryContext`), what compressing a
history gives back (`Compressed`), and where a summary is counted: once, in the request's
record or, made in the background, in the metrics and the tenant's statistics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy import telemetry
from proxy.core.answers import NONE, Bill
from proxy.core.compaction import Offload
from proxy.core.jsonio import JsonObject
from proxy.core.prompt_cache import CutContext
from proxy.core.view import ItemView
from proxy.core.wire import WireFormat
from proxy.offload.background import SummaryScheduler
from proxy.offload.records import RefStore
from proxy.offload.summarizer import DEFAULT_INSTRUCTION
from proxy.upstream.client import Headers, Upstream


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


@dataclass(kw_only=True)
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
