"""A compaction asked now: `POST /v1/responses/compact` emulated, the history summarised now by
the proxy's own summariser, and a token of the proxy's standing for what the client may drop.
A `/v1/responses` request ending in a `compaction_trigger` (`proxy.formats.responses`)
is compacted by the same `compact` (`compact_now`, for the turn).

The history (the request's `input`, the proxy's own newest token in it already replaced by
what it stands for: `proxy.turn._context_tokens.begin`) is folded whole (`Compressor.fold`,
keep_recent 0): what stays is the head (system items, the task), the summary item, and the
system items and later user messages `proxy.core.compression.assemble` keeps. All of that is
the compaction's record (`CompactionRecords.save`), and the summarised originals are stored
under the summary's `ref=`, so a later request carrying the token gets, in its place, the
task, the summary (every byte behind it reloadable) and the kept user messages, in their
order. The client is answered, as OpenAI answers, the user messages (the task and the kept
ones) followed by one compaction item carrying the token.

Nothing to fold (the history is the task alone, or empty): the record is the history as it is
(the token stands for it unchanged). A summary that cannot be made, or a store that cannot
keep the record, fails the compaction (`CompactionFailed`): a compaction that cannot compact
says so rather than answer a token standing for nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.core.compaction import COMPACTION_ACTION, Plan, present_refs
from proxy.core.settings import OffloadSettings
from proxy.core.tokens import TokenCounter
from proxy.core.view import ItemView
from proxy.core.wire import ProviderCompaction
from proxy.errors import Failure, Kind, ProxyError
from proxy.offload.cpu_pool import CPU
from proxy.offload.pipeline import Prepared
from proxy.offload.records import CompactionRecords, RefStore, event
from proxy.offload.summaries import Compressor
from proxy.store import StoreUnavailable
from proxy.turn._context_compaction import Inline

ENDPOINT = "responses/compact"


class CompactionFailed(Failure):
    """No summary could be made of this history (the summariser's reason in the message)."""

    kind = Kind.COMPACTION_FAILED
    code = "compaction_failed"


@dataclass
class Compaction:
    token: str
    record: list[Any]  # what the token stands for
    kept_users: list[Any]  # the user messages of the record, in order: what the client keeps
    tokens_before: int  # of the history compacted
    tokens_after: int  # of the record
    tokens_in: int = 0  # what the summary calls used (0: a summary of this history was made before)
    tokens_out: int = 0
    ref: str | None = None  # the summary's, when there is one
    written: set[str] = field(default_factory=set)  # refs stored for the first time
    events: list[dict[str, Any]] = field(default_factory=list)


async def compact(
    items: list[Any],
    *,
    view: ItemView,
    compressor: Compressor,
    refs: RefStore,
    records: CompactionRecords,
    settings: OffloadSettings,
    counter: TokenCounter,
    endpoint: str = ENDPOINT,
) -> Compaction:
    """Summarise `items` and store what the token stands for. CompactionFailed when the summary
    could not be made; the store's and the quota's exceptions as they come (StoreUnavailable,
    QuotaExceeded, CredentialRejected). `endpoint`: what asked for it, as the event says
    (`responses/compact`, or `responses` for a `compaction_trigger`, `compact_now`)."""
    cpu = CPU.for_messages(items)
    folded = await compressor.fold(items, items, settings, counter=counter, keep_recent=0, cpu=cpu)
    if folded.items is None and folded.warning:
        raise CompactionFailed(folded.warning)
    record = folded.items if folded.items is not None else list(items)
    at = folded.summary_at if folded.items is not None else None
    written: set[str] = set()
    ref = None
    await records.admit()  # a record is stored whatever the refs: the caller admitted first
    if at is not None:
        if folded.offload is not None:  # newly made: its originals behind the ref
            ref = folded.offload.ref
            written = await refs.save(folded.stored, [ref], settings.session, cpu=cpu)
        else:  # made before (and stored then): kept alive as long as the record
            found = present_refs([record[at]], view)
            ref = found[0] if found else None
            if found:
                written = await refs.save([], [*found, *folded.kept], settings.session, cpu=cpu)
    token = await records.save(record)
    kept = [m for i, m in enumerate(record) if i != at and view.role(m) == "user"]
    tokens_before = await cpu(counter.messages, items)  # new strings (a loaded record's) are hashed for their count
    tokens_after = await cpu(counter.messages, record)
    done = event(
        "provider_compaction",
        emulated=True,
        endpoint=endpoint,
        messages=len(items) - len(record) + (1 if at is not None else 0),
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        ref=ref,
    )
    return Compaction(
        token,
        record,
        kept,
        tokens_before,
        tokens_after,
        folded.usage_in,
        folded.usage_out,
        ref,
        written,
        [*folded.events, done],
    )


async def compact_now(
    items: list[Any],
    *,
    compaction: ProviderCompaction,
    view: ItemView,
    endpoint: str,
    settings: OffloadSettings,
    counter: TokenCounter,
    refs: RefStore,
    records: CompactionRecords,
    compressor: Callable[[], Compressor | None],
) -> tuple[Prepared, Inline]:
    """Compact the history `items` (the input as planned, its trigger last): the turn's figures
    (`Prepared`: the action, the tokens before and after, the refs written, the events) and its
    answer (`Inline`: the format's compaction, paused). CompactionFailed when no summary could be
    made; ProxyError 503 when the store is unavailable; the quota's exceptions as they come."""
    history = items[:-1]
    if not history:
        raise ProxyError(
            Kind.BAD_REQUEST,
            "input holds nothing before its compaction_trigger: there is no history to compact.",
            code="invalid_value",
            param="input",
        )
    folder = compressor()  # made inline, with the request's summariser
    if folder is None:
        raise CompactionFailed("no summariser")
    try:
        done = await compact(
            history,
            view=view,
            compressor=folder,
            refs=refs,
            records=records,
            settings=settings,
            counter=counter,
            endpoint=endpoint,
        )
    except StoreUnavailable as exc:
        raise ProxyError(
            Kind.STORE_UNAVAILABLE,
            f"The compaction failed: the proxy's store is unavailable ({exc}); try again.",
            code="store_unavailable",
        ) from exc
    plan = Plan(
        done.record,
        refs=[done.ref] if done.ref else [],
        tokens_before=done.tokens_before,
        tokens_after=done.tokens_after,
    )
    prepared = Prepared(
        plan,
        action=COMPACTION_ACTION,
        summary_tokens=done.tokens_in + done.tokens_out,
        events=done.events,
        written=done.written,
    )
    lead = compaction.lead("", done.token)
    return prepared, Inline(
        [lead], paused=True, tokens_in=done.tokens_in, tokens_out=done.tokens_out, made_by=compaction
    )
