"""Compression at the edges: find a reusable summary, or make one (once, under a lock).

A summary is made ahead of time in the background when a scheduler is given (the server's):
the turn that crosses the trigger then finds it ready, and a turn that finds nothing ready
goes out without one unless it is above the hard limit (`proxy.core.compression`). Summaries
are keyed by the hash of the client's own (uncompacted) history prefix they cover, so one made
before compaction started is found after it.

A summary is asked for in one of two shapes (`SummaryContext.summary_request`): "prefix" (the
default) sends the conversation as the turns send it, the same tools and the same leading items
byte for byte, then one instruction, in one call, so a provider's prompt cache bills the
history at its cached price; "transcript" sends a system prompt and a rendering of the items to
chat completions, in groups of `group_token_threshold` tokens, for upstreams without a cache.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from proxy import telemetry
from proxy.core import compression as cp
from proxy.core import compression as precompress
from proxy.core import prompt_cache as cache_cuts
from proxy.core.answers import Bill
from proxy.core.compaction import Offload, present_refs
from proxy.core.jsonio import JsonObject
from proxy.core.media import without_media
from proxy.core.settings import OffloadSettings
from proxy.core.summary_index import summary_index
from proxy.core.texts import RELOAD_TOOL_SCHEMAS, make_ref
from proxy.core.tokens import TokenCounter
from proxy.core.view import ItemView
from proxy.formats import chat
from proxy.offload import cache_keepalive as kept_cut
from proxy.offload import records as summary_memo
from proxy.offload import summarizer as lease
from proxy.offload.cpu_pool import CPU, INLINE
from proxy.offload.records import TenantStore, event
from proxy.offload.summarizer import (
    BilledFailure,
    Compressed,
    Summary,
    SummaryContext,
    SummaryFailed,
    bill_summary,
    count_summary,
    estimated,
    prompt_version,
    summarize,
    summarize_prefix,
    summary_usage,
)
from proxy.offload.tenant import CredentialRejected, QuotaExceeded, key
from proxy.store import StoreUnavailable
from proxy.store import sealing as resealing

CONV_ENTRIES = 8  # summaries remembered per conversation start (forks share a start)
POLL = 0.1
_seen = cp.SeenPrefixes()


class Compressor:
    def __init__(self, tenant: TenantStore, ctx: SummaryContext) -> None:
        """`tenant`: where the summaries and their index go (uncharged: a summary replaces
        history the tenant sent, it is not content of its own)."""
        self.tenant, self.ctx, self.cuts = tenant, ctx, ctx.cuts
        self.store, self.namespace, self.ttl, self.sealer = tenant.store, tenant.namespace, tenant.ttl, tenant.sealer
        self.view: ItemView = ctx.view or (ctx.wire.view if ctx.wire is not None else chat.VIEW)
        self.prefix = ctx.summary_request == "prefix" and ctx.wire is not None and ctx.body is not None
        self.version = prompt_version(ctx.instruction if self.prefix else ctx.prompt)
        # background summaries to start once the turn is out
        self.deferred: list[Callable[[], Awaitable[object]]] = []
        # the request's folds (`proxy.core.compaction.Plan.unfold`): undone after a summary hiding their base
        self.unfold: Mapping[int, tuple[int, Any]] = {}

    def with_instruction(self, instruction: str) -> Compressor:
        """A compressor of the same request whose summaries follow `instruction` (a threshold's
        own `instructions`): its summaries versioned by it, so none is taken for another's."""
        return Compressor(self.tenant, dataclasses.replace(self.ctx, instruction=instruction))

    def _name(self, prefix_hash: str) -> str:
        """What a summary of the prefix hashing to `prefix_hash` is stored, locked and leased as."""
        return f"{prefix_hash}:{self.version}:{cp.LAYOUT}"

    def _summary_key(self, prefix_hash: str) -> str:
        return key(self.namespace, "summary", self._name(prefix_hash))

    def _lock_key(self, prefix_hash: str) -> str:
        return key(self.namespace, "lock", self._name(prefix_hash))

    async def _prior(
        self, originals: list[Any], chain: cp.PrefixHashes, head: int, *, tail: int, cpu: CPU
    ) -> cp.PriorSummary | None:
        start = await cpu.for_part(originals[: head + 1])(chain.__getitem__, head + 1)
        raw = await self.store.get(key(self.namespace, "conv", start), ttl=self.ttl)
        entries = [e for e in sorted(json.loads(raw) if raw else [], key=lambda e: e["cut"]) if e["cut"] <= tail]

        def seen() -> list[bool]:  # prefixes this process verified already: recognised by equality
            return [_seen.equal(e["hash"], originals, e["cut"], same=chain.same) for e in entries]

        def verified(pending: list[JsonObject]) -> list[JsonObject]:  # the others hashed, rising: one pass
            return [e for e in pending if chain.matches(e["cut"], e["hash"], _seen)]

        known = await cpu.light(seen) if entries else []
        pending = [e for e, ok in zip(entries, known) if not ok]
        hashing = cpu.for_part(originals[: pending[-1]["cut"]]) if pending else cpu  # what is hashed, at most
        matched = {id(e) for e in await hashing(verified, pending)} if pending else set()
        matching = [e for e, ok in zip(entries, known) if ok or id(e) in matched]
        for entry in reversed(matching):  # the longest summarised prefix first
            record = await self._load(entry["hash"])
            if record is not None:
                return record
        return None

    async def _load(self, prefix_hash: str) -> cp.PriorSummary | None:
        summary_key = self._summary_key(prefix_hash)
        known = summary_memo.memo(self.store).get(summary_key)
        if known is not None and time.monotonic() - known[0] < summary_memo.REFRESH:
            return known[1]
        raw = await self.store.get(summary_key, ttl=self.ttl)
        raw = None if raw is None else await resealing.opened(self.store, summary_key, raw, sealer=self.sealer)
        if raw is None:
            return None
        r = json.loads(raw)
        return summary_memo.keep(
            self.store,
            summary_key,
            cp.PriorSummary(
                r["cut"],
                r["text"],
                r["ref"],
                r["tokens"],
                r["message"],
                tuple(r.get("usage") or (0, 0)),
                bool(r.get("bill")),
                tuple(r.get("refs") or ()),
                prefix_hash,
            ),
        )

    async def run(
        self,
        compacted: list[Any],
        originals: list[Any],
        settings: OffloadSettings,
        *,
        counter: TokenCounter,
        allow_new: bool,
        cpu: CPU = INLINE,
    ) -> Compressed:
        """`cpu` runs the pure steps (token sums, prefix hashes, the stored history): off the
        event loop for a large request. Token counts are the plan's: `counter` has them all.
        `compacted` and `originals` hold the same items in the same places (compaction
        replaces items one for one)."""
        # off the loop for a large request: the split scans every block of every item for a provider
        # compaction block (few messages of many blocks are as slow as many messages)
        head, tail = await cpu(cp.split, compacted, self.view, settings.keep_recent_for(cp.COMPRESS_KEEP_RECENT))
        if tail - head < 2:
            return Compressed()
        trigger = await cpu.light(cp.trigger, compacted, self.view, head, settings=settings, counter=counter)
        foldable = await cpu.light(cp.tokens_between, compacted, self.view, head, end=tail, counter=counter)
        early = self.ctx.background is not None and settings.precompress_ratio > 0
        if foldable <= trigger and not (early and foldable >= settings.precompress_ratio * trigger):
            return Compressed()
        chain = cp.PrefixHashes(originals, same=counter.earlier_prefix)
        prior = await self._prior(originals, chain, head, tail=tail, cpu=cpu)
        if foldable <= trigger:  # below the trigger: what is forwarded stays as it is; prepare the summary
            if (
                prior is not None
                and head <= prior.cut <= tail
                and cache_cuts.early(self.cuts, foldable=foldable, trigger=trigger)
            ):
                reused = self._using(compacted, head, prior)  # the cache is cold anyway: the cut due soon, now
                await self._bill(prior, reused)
                return reused
            await self._ahead(
                compacted, originals, settings, counter=counter, chain=chain, prior=prior, cpu=cpu, bounds=(head, tail)
            )
            kept = await kept_cut.forwarded(self, originals, chain=chain, head=head, tail=tail, cpu=cpu)
            if kept is not None:  # a cut the session forwards already stays (never undone below the trigger)
                reused = self._using(compacted, head, kept)
                await self._bill(kept, reused)
                return reused
            return Compressed()
        decision = await cpu.light(
            cp.decide, compacted, self.view, settings, counter=counter, prior=prior, bounds=(head, tail)
        )
        if decision.action == "reuse":
            assert prior is not None
            previous = await kept_cut.previous(
                self,
                compacted,
                originals,
                chain=chain,
                head=head,
                tail=tail,
                trigger=trigger,
                newer=prior,
                counter=counter,
                cpu=cpu,
            )
            if previous is not None:  # the newer cut costs more than it saves: the one last forwarded stays
                await self._bill(*previous)
                return previous[1]
            reused = self._using(compacted, head, prior)
            await self._bill(prior, reused)
            await self._ahead(
                compacted, originals, settings, counter=counter, chain=chain, prior=prior, cpu=cpu, bounds=(head, tail)
            )
            return reused
        if decision.action != "summarize" or not allow_new:
            return Compressed()
        if self.ctx.background is not None:
            # What goes out without the new summary: the prior one and what follows it, or all.
            fallback = (
                cp.assemble(compacted, self.view, head, cut=prior.cut, summary=prior.message, unfold=self.unfold)
                if prior is not None and decision.prior is prior
                else None
            )
            forwarded = await cpu.light(counter.messages, fallback if fallback is not None else compacted)
            if forwarded <= precompress.hard_limit(settings, self.ctx.request_model):
                pending = Compressed(
                    fallback,
                    pending=True,
                    kept=prior.refs if prior is not None and fallback is not None else (),
                    summary_prefix=prior.prefix if prior is not None and fallback is not None else "",
                )
                if prior is not None and fallback is not None:
                    await self._bill(prior, pending)
                await self._start(
                    compacted, originals, settings, counter=counter, chain=chain, decision=decision, cpu=cpu
                )
                return pending
        return await self._summarize_once(
            compacted, originals, settings, counter=counter, chain=chain, decision=decision, cpu=cpu
        )

    async def fold(
        self,
        compacted: list[Any],
        originals: list[Any],
        settings: OffloadSettings,
        *,
        counter: TokenCounter,
        keep_recent: int,
        cpu: CPU = INLINE,
    ) -> Compressed:
        """Summarise everything between the head and the `keep_recent` last items now, whatever
        the trigger: an emulated provider compaction (`proxy.turn._context_management`). A summary of this very
        prefix made earlier (by a turn, in the background, by an earlier compaction) is used as
        it is, else folded into the new one; made once under the lock, like every summary.
        `items` is None when there is nothing to fold or no summary could be made (`warning`)."""
        head, tail = await cpu(cp.split, compacted, self.view, keep_recent)
        if tail - head < 1:
            return Compressed()
        chain = cp.PrefixHashes(originals, same=counter.earlier_prefix)
        prior = await self._prior(originals, chain, head, tail=tail, cpu=cpu)
        if prior is not None and prior.cut == tail:
            done = self._using(compacted, head, prior, summary_at=head)
            await self._bill(prior, done)
            return done
        start = prior.cut if prior is not None and head <= prior.cut < tail else head
        decision = cp.Decision("summarize", head, tail, prior if start != head else None, (start, tail))
        made = await self._summarize_once(
            compacted, originals, settings, counter=counter, chain=chain, decision=decision, cpu=cpu
        )
        if made.items is not None:
            made.summary_at = head
        return made

    def _using(self, compacted: list[Any], head: int, prior: cp.PriorSummary, **more: Any) -> Compressed:
        """`compacted` with `prior` standing for items[head:prior.cut]."""
        items = cp.assemble(compacted, self.view, head, cut=prior.cut, summary=prior.message, unfold=self.unfold)
        return Compressed(items, kept=prior.refs, summary_prefix=prior.prefix, **more)

    async def _bill(self, prior: cp.PriorSummary, into: Compressed) -> None:
        """A summary made in the background is paid by the first response that uses it."""
        if not prior.bill or not any(prior.usage):
            return
        if await self.store.put_if_absent(key(self.namespace, "billed", prior.ref), b"1", self.ttl):
            into.summary_tokens = sum(prior.usage)
            into.usage = summary_usage(*prior.usage)

    async def _ahead(
        self,
        compacted: list[Any],
        originals: list[Any],
        settings: OffloadSettings,
        *,
        counter: TokenCounter,
        chain: cp.PrefixHashes,
        prior: cp.PriorSummary | None,
        cpu: CPU,
        bounds: tuple[int, int],
    ) -> None:
        if self.ctx.background is None:  # inline only: a summary is made when a turn needs it
            return
        decision = await cpu.light(
            precompress.ahead, compacted, self.view, settings, counter=counter, prior=prior, bounds=bounds
        )
        if decision is not None:
            await self._start(compacted, originals, settings, counter=counter, chain=chain, decision=decision, cpu=cpu)

    async def _start(
        self,
        compacted: list[Any],
        originals: list[Any],
        settings: OffloadSettings,
        *,
        counter: TokenCounter,
        chain: cp.PrefixHashes,
        decision: cp.Decision,
        cpu: CPU,
    ) -> None:
        """Ready the summary for the scheduler, to be handed to it (`deferred`) once this turn's
        own upstream request has gone out and answered: the summary call must not hold the turn
        up nor race it. One per conversation at a time, in this process (the scheduler) and
        across replicas (a lease in the store on the prefix it summarises, `proxy.offload.summarizer`):
        a turn whose history holds a prefix being summarised starts none and finds it once stored;
        another conversation sharing only its opening is not held up by it."""
        scheduler = self.ctx.background
        assert scheduler is not None
        index = key(self.namespace, "leases", await cpu.light(chain.__getitem__, decision.head + 1))

        async def covered(listed: list[tuple[int, str]]) -> list[str]:  # rising cuts: hashed once
            return await cpu.for_part(originals[: listed[-1][0]])(
                lambda: [name for cut, name in listed if chain.matches(cut, name.partition(":")[0], _seen)]
            )

        try:
            if await lease.under_way(
                self.store, index, namespace=self.namespace, suffix=self._name(""), covered=covered
            ):
                return
        except StoreUnavailable:
            return  # no lease to be had: no background summary (it could not be stored either)
        name = self._name(await cpu.for_part(originals[: decision.cut])(chain.__getitem__, decision.cut))
        conversation, listed = f"{self.namespace}:{name}", lease.Listing(index, decision.cut, name)

        async def job() -> None:
            await self._in_background(compacted, originals, settings, counter=counter, chain=chain, decision=decision)

        weight = await cpu.light(counter.messages, originals)  # counted already: what the job holds
        tenant = self.ctx.tenant_scope or self.namespace  # the credential's: sub-tenants share its slots

        def submit(run: Callable[[], Awaitable[None]], on_end: Callable[[], None]) -> bool:
            return scheduler.submit(conversation, run, tenant=tenant, weight=weight, on_end=on_end)

        ttl, lease_key = lease.lease_ttl(self.ctx.timeout), key(self.namespace, "lease", name)
        self.deferred.append(
            lambda: lease.submit_leased(self.store, lease_key, ttl, run=job, submit=submit, listed=listed)
        )

    async def _in_background(
        self,
        compacted: list[Any],
        originals: list[Any],
        settings: OffloadSettings,
        *,
        counter: TokenCounter,
        chain: cp.PrefixHashes,
        decision: cp.Decision,
    ) -> None:
        cpu = CPU.for_messages(originals)
        started = time.monotonic()
        made: list[JsonObject] = []
        try:
            made_before, spans, lock = await self._claim(
                compacted, originals, settings, counter=counter, chain=chain, decision=decision, cpu=cpu
            )
            if made_before is not None:  # made already; where the next turn looks for it
                await self._remember(chain, decision.head, decision.cut)
                return
            if lock is None:
                return  # another request or replica is making it
            try:
                await self._record(
                    [event("summary_started", messages=decision.new_items[1] - decision.new_items[0])], settings
                )
                result = await self._summarize(
                    compacted,
                    originals,
                    settings,
                    counter=counter,
                    chain=chain,
                    decision=decision,
                    spans=spans,
                    cpu=cpu,
                    bill=True,
                    session=settings.session,
                )
            finally:
                await self.store.delete(lock)
        except StoreUnavailable as exc:
            result = Compressed(warning=f"compression skipped: store unavailable ({exc})")
        except (QuotaExceeded, CredentialRejected) as exc:
            result = Compressed(warning=f"compression skipped: {exc}")
        duration = round((time.monotonic() - started) * 1e3)
        if result.items is not None:
            made.append(
                event(
                    "summary_ready",
                    duration_ms=duration,
                    summary_tokens_in=result.usage_in,
                    summary_tokens_out=result.usage_out,
                )
            )
        else:
            made.append(event("summary_failed", reason=result.warning or "", duration_ms=duration))
        try:
            await self._record([*result.events, *made], settings)
        except StoreUnavailable:
            pass  # the events are lost with the store; the summary itself was made or reported above

    async def _record(self, new: list[JsonObject], settings: OffloadSettings) -> None:
        await self.tenant.record_events(self.ctx.session or settings.session, new)

    async def _claim(
        self,
        compacted: list[Any],
        originals: list[Any],
        settings: OffloadSettings,
        *,
        counter: TokenCounter,
        chain: cp.PrefixHashes,
        decision: cp.Decision,
        cpu: CPU,
    ) -> tuple[cp.PriorSummary | None, list[tuple[int, int]], str | None]:
        """(the summary of this cut if one is made already, the ranges to summarise, the store's
        lock on this cut if this request now holds it: None while another request makes it)."""
        cut_hash = await cpu.for_part(originals[: decision.cut])(chain.__getitem__, decision.cut)
        made = await self._load(cut_hash)  # another process may have made it already
        if made is not None:
            return made, [], None
        spans = await self._spans(compacted, settings, counter, decision=decision, cpu=cpu)
        lock = self._lock_key(cut_hash)
        held = await self.store.put_if_absent(lock, b"1", int(self.ctx.timeout * len(spans)) + 5)
        return None, spans, lock if held else None

    async def _summarize_once(
        self,
        compacted: list[Any],
        originals: list[Any],
        settings: OffloadSettings,
        *,
        counter: TokenCounter,
        chain: cp.PrefixHashes,
        decision: cp.Decision,
        cpu: CPU,
    ) -> Compressed:
        made, spans, lock = await self._claim(
            compacted, originals, settings, counter=counter, chain=chain, decision=decision, cpu=cpu
        )
        if made is not None:
            return self._using(compacted, decision.head, made)
        if lock is None:
            deadline = time.monotonic() + self.ctx.wait
            while time.monotonic() < deadline:
                await asyncio.sleep(POLL)
                record = await self._load(chain[decision.cut])
                if record is not None:
                    return self._using(compacted, decision.head, record)
            return Compressed(warning="a summary of this history is being made by another request")
        try:
            return await self._summarize(
                compacted, originals, settings, counter=counter, chain=chain, decision=decision, spans=spans, cpu=cpu
            )
        finally:
            await self.store.delete(lock)

    async def _spans(
        self, compacted: list[Any], settings: OffloadSettings, counter: TokenCounter, *, decision: cp.Decision, cpu: CPU
    ) -> list[tuple[int, int]]:
        """The ranges summarised by one call each: the whole new range in the prefix shape."""
        if self.prefix:
            return [decision.new_items]
        start, end = decision.new_items
        return await cpu.light(
            cp.groups, compacted, self.view, start, end=end, threshold=settings.group_token_threshold, counter=counter
        )

    def summary_request(
        self, compacted: list[Any], settings: OffloadSettings, decision: cp.Decision
    ) -> tuple[str, JsonObject]:
        """The prefix shape's request: what this turn forwards before items[cut] (the prior
        summary folded in as the turns forward it), then the instruction. It carries the reload
        tools when the turns carry them (as `proxy.turn` decides): the reload tools are
        on, with rounds to offer them in, and the history this turn forwards without the new
        summary holds a reference (a compacted result, the prior summary). Only a turn whose
        store failed went without them unknown to this request: a missed cache, not an error."""
        head, cut, prior = decision.head, decision.cut, decision.prior
        whole = (
            cp.assemble(compacted, self.view, head, cut=prior.cut, summary=prior.message, unfold=self.unfold)
            if prior
            else compacted
        )
        prefix = whole[: len(whole) - (len(compacted) - cut)]
        offered = settings.reload_tools and settings.max_reload_rounds > 0 and bool(present_refs(whole, self.view))
        assert self.ctx.wire is not None and self.ctx.body is not None
        return self.ctx.wire.summary_request(
            self.ctx.body,
            prefix,
            self.ctx.instruction,
            tools=RELOAD_TOOL_SCHEMAS if offered else (),
            model=self.ctx.model,
        )

    async def _calls(
        self,
        compacted: list[Any],
        settings: OffloadSettings,
        decision: cp.Decision,
        *,
        spans: list[tuple[int, int]],
        cpu: CPU,
        made: list[Summary],
        record: telemetry.UpstreamRecord | None,
    ) -> None:
        """The summarisation calls, into `made`: one in the prefix shape, one per span in the
        transcript shape (the first updating the prior summary). SummaryFailed at the first that
        fails (`made` then holds those before it)."""
        ctx = self.ctx
        if ctx.estimate is not None:  # an observed turn: what a summary would weigh, no call
            made.append(estimated(ctx.estimate))
            return
        if self.prefix:
            assert ctx.wire is not None
            request = await cpu.for_part(compacted)(self.summary_request, compacted, settings, decision)
            made.append(
                await summarize_prefix(
                    ctx.upstream,
                    ctx.headers,
                    request,
                    read=ctx.wire.summary_answer,
                    timeout=ctx.timeout,
                    base=ctx.base,
                    usage=ctx.wire.usage,
                    record=record,
                )
            )
            return
        previous = decision.prior.text if decision.prior else None
        for g_start, g_end in spans:
            part = [self.view.transcript(m) for m in compacted[g_start:g_end] if self.view.role(m) != "system"]
            made.append(
                await summarize(
                    ctx.upstream,
                    ctx.headers,
                    ctx.model,
                    prompt=ctx.prompt,
                    lines=part,
                    previous=previous,
                    timeout=ctx.timeout,
                    base=ctx.base,
                    record=record,
                )
            )
            previous = None  # only the first group updates the previous snapshot

    async def _summarize(
        self,
        compacted: list[Any],
        originals: list[Any],
        settings: OffloadSettings,
        *,
        counter: TokenCounter,
        chain: cp.PrefixHashes,
        decision: cp.Decision,
        spans: list[tuple[int, int]],
        cpu: CPU,
        bill: bool = False,
        session: str | None = None,
    ) -> Compressed:
        """Make the summary of items[head:cut] and store it. `bill` (made in the background):
        the originals it covers are stored here, before the summary can be found, and its usage
        is reported by the first response that uses it instead of by this one."""
        head, cut = decision.head, decision.cut
        start, end = decision.new_items
        started = time.monotonic()
        made: list[Summary] = []
        sink = None if bill else self.ctx.record  # made in the background: no request's record
        try:
            await self._calls(compacted, settings, decision, spans=spans, cpu=cpu, made=made, record=sink)
        except SummaryFailed as exc:
            tokens_in, tokens_out = sum(s.tokens_in for s in made), sum(s.tokens_out for s in made)
            count_summary(False, time.monotonic() - started, self.ctx, record=sink)
            bill_summary(
                sum((s.bill for s in made), exc.bill if isinstance(exc, BilledFailure) else Bill()),
                self.ctx,
                record=sink,
            )
            failed = event(
                "summary_failure",
                reason=str(exc),
                messages=end - start,
                duration_ms=round((time.monotonic() - started) * 1e3),
            )
            return Compressed(
                warning=f"compression skipped: {exc}",
                summary_tokens=tokens_in + tokens_out,
                events=[failed],
                usage=summary_usage(tokens_in, tokens_out),
            )
        count_summary(True, time.monotonic() - started, self.ctx, record=sink)
        bill_summary(sum((s.bill for s in made), Bill()), self.ctx, record=sink)
        text = "\n".join(summary.text for summary in made)
        tokens_in, tokens_out = sum(s.tokens_in for s in made), sum(s.tokens_out for s in made)

        def summarised() -> tuple[str, str, int, int, str, list[Offload]]:
            # stored with their images and documents as markers, each of those under its own ref
            stored = without_media(originals[head:cut], self.view, namespace=self.namespace)
            history = cp.history_lines(stored.items, self.view)
            covered = sum(1 for m in stored.items if self.view.role(m) != "system")
            return (
                history,
                make_ref(self.namespace, "history", history),
                covered,
                cp.tokens_between(originals, self.view, head, end=cut, counter=counter),
                summary_index(originals[head:cut], self.view, task=cp.task_text(originals, self.view, head)),
                [Offload(o.ref, o.kind, o.text, o.tokens) for o in stored.offloads],
            )

        history, ref, covered, covered_tokens, index, media = await cpu.for_part(originals[head:cut])(summarised)
        kept = tuple(o.ref for o in media)
        # beside the model's snapshot, what exists behind the ref: files, commands, errors, verbatim
        message = cp.summary_item(self.view, text, ref, count=covered, tokens=covered_tokens, index=index)
        offload = Offload(ref, "history", history, covered_tokens)
        if bill and self.ctx.refs is not None:
            await self.ctx.refs.admit()
            await self.ctx.refs.save([offload, *media], [ref], session, cpu=cpu)
        record = {
            "cut": cut,
            "text": text,
            "ref": ref,
            "tokens": counter.text(text),
            "message": message,
            "usage": [tokens_in, tokens_out],
            "bill": bill,
            "refs": list(kept),
        }
        summary_key = self._summary_key(chain[cut])
        await self.store.put(summary_key, self.sealer.seal(json.dumps(record).encode(), summary_key), self.ttl)
        summary_memo.keep(
            self.store,
            summary_key,
            cp.PriorSummary(cut, text, ref, record["tokens"], message, (tokens_in, tokens_out), bill, kept, chain[cut]),
        )
        _seen.add(chain[cut], originals[:cut])  # the next turn recognises this prefix without hashing
        await self._remember(chain, head, cut)
        done = event(
            "compression",
            messages=covered,
            tokens_before=covered_tokens,
            tokens_after=counter.message(message),
            summary_tokens_in=tokens_in,
            summary_tokens_out=tokens_out,
            duration_ms=round((time.monotonic() - started) * 1e3),
            ref=ref,
        )
        return Compressed(
            cp.assemble(compacted, self.view, head, cut=cut, summary=message, unfold=self.unfold),
            offload,
            0 if bill else tokens_in + tokens_out,
            events=[done],
            usage=None if bill else summary_usage(tokens_in, tokens_out),
            usage_in=tokens_in,
            usage_out=tokens_out,
            media=media,
            kept=kept,
            summary_prefix=chain[cut],
        )

    async def _remember(self, chain: cp.PrefixHashes, head: int, cut: int) -> None:
        conv = key(self.namespace, "conv", chain[head + 1])
        raw = await self.store.get(conv)
        entries = [e for e in (json.loads(raw) if raw else []) if e["hash"] != chain[cut]]
        entries = [*entries, {"cut": cut, "hash": chain[cut]}][-CONV_ENTRIES:]
        await self.store.put(conv, json.dumps(entries).encode(), self.ttl)
