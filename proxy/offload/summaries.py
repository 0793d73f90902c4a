"""Compression at the edges: find a reusable summary, or make one (once, under a lock)."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from proxy.core import compression as cp
from proxy.core.compaction import Offload
from proxy.core.view import ItemView
from proxy.formats import chat
from proxy.http import observe
from proxy.offload.cpu import CPU, INLINE
from proxy.offload.events import event
from proxy.core.markers import make_ref
from proxy.core.settings import OffloadSettings
from proxy.store.sealing import Sealer
from proxy.store import Store
from proxy.offload.summarizer import SummaryFailed, prompt_version, summarize
from proxy.offload.tenant import key
from proxy.core.tokens import TokenCounter
from proxy.upstream.client import Headers, Upstream

CONV_ENTRIES = 8  # summaries remembered per conversation start (forks share a start)
POLL = 0.1
# A summary record never changes once written (its key is the hash of what it summarises), so
# this process keeps the ones it read; it re-reads one a minute to extend its idle TTL.
RECORDS = 10_000
RECORD_REFRESH = 60.0
_records: dict[str, tuple[float, cp.PriorSummary]] = {}
_seen = cp.SeenPrefixes()


def _count_summary(ok: bool, seconds: float) -> None:
    if (rec := observe.current.get()) is not None:
        rec.count_summary(ok, seconds)


def _keep(summary_key: str, record: cp.PriorSummary) -> cp.PriorSummary:
    if len(_records) > RECORDS:
        _records.clear()
    _records[summary_key] = (time.monotonic(), record)
    return record


@dataclass(kw_only=True)
class SummaryContext:
    """What a summarisation call needs from the request."""

    upstream: Upstream
    headers: Headers
    model: str
    prompt: str
    timeout: float
    wait: float
    sealer: Sealer = field(default_factory=lambda: Sealer(None))
    base: str | None = None  # the upstream base URL when not the server's default
    view: ItemView | None = None  # the wire format's history items (chat when None)


@dataclass
class Compressed:
    items: list[Any] | None = None  # None: not compressed
    offload: Offload | None = None  # the summarised originals, when newly made
    summary_tokens: int = 0
    warning: str | None = None
    events: list[dict] = field(default_factory=list)
    usage: dict | None = None  # the summarisation calls' usage, chat-completions shaped


def summary_usage(tokens_in: int, tokens_out: int) -> dict | None:
    if not tokens_in and not tokens_out:
        return None
    return {"prompt_tokens": tokens_in, "completion_tokens": tokens_out, "total_tokens": tokens_in + tokens_out}


class Compressor:
    def __init__(self, store: Store, namespace: str, ttl: int, ctx: SummaryContext) -> None:
        self.store, self.namespace, self.ttl, self.ctx = store, namespace, ttl, ctx
        self.view: ItemView = ctx.view or chat.VIEW
        self.version = prompt_version(ctx.prompt)

    def _summary_key(self, prefix_hash: str) -> str:
        return key(self.namespace, "summary", f"{prefix_hash}:{self.version}")

    async def _prior(self, compacted: list[Any], chain: cp.PrefixHashes, head: int, tail: int,
                     cpu: CPU) -> cp.PriorSummary | None:
        start = await cpu.for_part(compacted[:head + 1])(chain.__getitem__, head + 1)
        raw = await self.store.get(key(self.namespace, "conv", start), ttl=self.ttl)
        entries = [e for e in sorted(json.loads(raw) if raw else [], key=lambda e: e["cut"]) if e["cut"] <= tail]

        def seen() -> list[bool]:  # prefixes this process verified already: recognised by equality
            return [_seen.equal(e["hash"], compacted, e["cut"]) for e in entries]

        def verified(pending: list[dict]) -> list[dict]:  # the others hashed, rising: one pass
            return [e for e in pending if chain.matches(e["cut"], e["hash"], _seen)]

        known = await cpu.light(seen) if entries else []
        pending = [e for e, ok in zip(entries, known) if not ok]
        hashing = cpu.for_part(compacted[:pending[-1]["cut"]]) if pending else cpu  # what is hashed, at most
        matched = {id(e) for e in await hashing(verified, pending)} if pending else set()
        matching = [e for e, ok in zip(entries, known) if ok or id(e) in matched]
        for entry in reversed(matching):  # the longest summarised prefix first
            record = await self._load(entry["hash"])
            if record is not None:
                return record
        return None

    async def _load(self, prefix_hash: str) -> cp.PriorSummary | None:
        summary_key = self._summary_key(prefix_hash)
        known = _records.get(summary_key)
        if known is not None and time.monotonic() - known[0] < RECORD_REFRESH:
            return known[1]
        raw = await self.store.get(summary_key, ttl=self.ttl)
        raw = None if raw is None else self.ctx.sealer.open(raw, summary_key)
        if raw is None:
            return None
        r = json.loads(raw)
        return _keep(summary_key, cp.PriorSummary(r["cut"], r["text"], r["ref"], r["tokens"], r["message"]))

    async def run(
        self, compacted: list[Any], originals: list[Any], settings: OffloadSettings, counter: TokenCounter,
        allow_new: bool, *, cpu: CPU = INLINE,
    ) -> Compressed:
        """`cpu` runs the pure steps (token sums, prefix hashes, the stored history): off the
        event loop for a large request. Token counts are the plan's: `counter` has them all."""
        head, tail = cp.split(compacted, self.view, settings.keep_recent_for(cp.COMPRESS_KEEP_RECENT))
        if tail - head < 2 or await cpu.light(cp.tokens_between, compacted, self.view, head, tail,
                                              counter) <= settings.max_total_tokens:
            return Compressed()
        chain = cp.PrefixHashes(compacted)
        prior = await self._prior(compacted, chain, head, tail, cpu)
        decision = await cpu.light(cp.decide, compacted, self.view, settings, counter, prior)
        if decision.action == "reuse":
            assert prior is not None
            return Compressed(cp.assemble(compacted, self.view, head, prior.cut, prior.message))
        if decision.action != "summarize" or not allow_new:
            return Compressed()
        return await self._summarize_once(compacted, originals, settings, counter, chain, decision, cpu)

    async def _summarize_once(self, compacted, originals, settings, counter, chain, decision, cpu) -> Compressed:
        cut_hash = await cpu.for_part(compacted[:decision.cut])(chain.__getitem__, decision.cut)
        made = await self._load(cut_hash)  # another process may have made it already
        if made is not None:
            return Compressed(cp.assemble(compacted, self.view, decision.head, made.cut, made.message))
        lock = key(self.namespace, "lock", f"{cut_hash}:{self.version}")
        spans = await cpu.light(cp.groups, compacted, self.view, *decision.new_items, settings.group_token_threshold, counter)
        if not await self.store.put_if_absent(lock, b"1", int(self.ctx.timeout * len(spans)) + 5):
            deadline = time.monotonic() + self.ctx.wait
            while time.monotonic() < deadline:
                await asyncio.sleep(POLL)
                record = await self._load(chain[decision.cut])
                if record is not None:
                    return Compressed(cp.assemble(compacted, self.view, decision.head, record.cut, record.message))
            return Compressed(warning="a summary of this history is being made by another request")
        try:
            return await self._summarize(compacted, originals, counter, chain, decision, spans, cpu)
        finally:
            await self.store.delete(lock)

    async def _summarize(self, compacted, originals, counter, chain, decision, spans, cpu) -> Compressed:
        head, cut, prior = decision.head, decision.cut, decision.prior
        start, end = decision.new_items
        started = time.monotonic()
        texts, tokens_in, tokens_out = [], 0, 0
        previous = prior.text if prior else None
        try:
            for g_start, g_end in spans:
                part = [self.view.transcript(m) for m in compacted[g_start:g_end] if self.view.role(m) != "system"]
                summary = await summarize(self.ctx.upstream, self.ctx.headers, self.ctx.model, self.ctx.prompt,
                                          part, previous, self.ctx.timeout, self.ctx.base)
                texts.append(summary.text)
                tokens_in += summary.tokens_in
                tokens_out += summary.tokens_out
                previous = None  # only the first group updates the previous snapshot
        except SummaryFailed as exc:
            _count_summary(False, time.monotonic() - started)
            failed = event("summary_failure", reason=str(exc), messages=end - start,
                           duration_ms=round((time.monotonic() - started) * 1e3))
            return Compressed(warning=f"compression skipped: {exc}", summary_tokens=tokens_in + tokens_out,
                              events=[failed], usage=summary_usage(tokens_in, tokens_out))
        _count_summary(True, time.monotonic() - started)
        text = "\n".join(texts)

        def summarised() -> tuple[str, str, int, int]:
            history = cp.history_lines(originals[head:cut], self.view)
            covered = sum(1 for m in originals[head:cut] if self.view.role(m) != "system")
            return (history, make_ref(self.namespace, "history", history), covered,
                    cp.tokens_between(originals, self.view, head, cut, counter))

        history, ref, covered, covered_tokens = await cpu.for_part(originals[head:cut])(summarised)
        message = cp.summary_item(self.view, text, ref, covered, covered_tokens)
        record = {"cut": cut, "text": text, "ref": ref, "tokens": counter.text(text), "message": message}
        summary_key = self._summary_key(chain[cut])
        await self.store.put(summary_key, self.ctx.sealer.seal(json.dumps(record).encode(), summary_key), self.ttl)
        _keep(self._summary_key(chain[cut]), cp.PriorSummary(**record))
        _seen.add(chain[cut], compacted[:cut])  # the next turn recognises this prefix without hashing
        await self._remember(chain, head, cut)
        done = event("compression", messages=covered, tokens_before=covered_tokens,
                     tokens_after=counter.message(message), summary_tokens_in=tokens_in,
                     summary_tokens_out=tokens_out, duration_ms=round((time.monotonic() - started) * 1e3), ref=ref)
        return Compressed(
            cp.assemble(compacted, self.view, head, cut, message),
            Offload(ref, "history", history, covered_tokens),
            tokens_in + tokens_out,
            events=[done],
            usage=summary_usage(tokens_in, tokens_out),
        )

    async def _remember(self, chain: cp.PrefixHashes, head: int, cut: int) -> None:
        conv = key(self.namespace, "conv", chain[head + 1])
        raw = await self.store.get(conv)
        entries = [e for e in (json.loads(raw) if raw else []) if e["hash"] != chain[cut]]
        entries = [*entries, {"cut": cut, "hash": chain[cut]}][-CONV_ENTRIES:]
        await self.store.put(conv, json.dumps(entries).encode(), self.ttl)

