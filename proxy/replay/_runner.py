"""`python -m proxy replay FILE.jsonl`: replay conversations turn by turn through the offload pipeline.

Turn k is the request the agent sent before its k-th assistant message. Every turn runs the
same pipeline the server runs (compaction, compression, the real store), with a built-in
deterministic fake summariser unless --upstream names a real one. Writes DIR/report.json and
PNG charts, and prints a table.

With format "responses" (or "anthropic"), each chat trace is first converted to the Responses
API input items (or the Anthropic Messages request) a client would send for it
(`proxy.formats.responses`, `proxy.formats.messages`) and replayed through
that format's view; every figure is then computed the same way on its items instead of messages.

Definitions (see `proxy.replay._metrics`): tokens are o200k_base tokens of each message's (or
item's) JSON. prefix_reuse = Σ over consecutive turns of the tokens of the longest common prefix
of whole forwarded messages of turn k and k+1, divided by Σ tokens of forwarded turn k.
reload_exact_fraction = share of references created during the replay whose context_reload
returns the original byte-for-byte. recall = share of the identifiers the model wrote that only an
earlier tool result had shown and that the forwarded turn still carries. cache_cost_ratio =
input cost with a prompt cache (cached prefix at 10 %) of the forwarded turns and the summary
calls they made, over that of the raw turns. With a summary delay (`summary_delay_ms`, the fake
summariser's answer time; `turn_latency_ms`, the simulated upstream's per turn), `latency` gives
the added latency of each turn (the wall time of its turn, `proxy.turn`) and the turns stalled by a summary.

The requests a replay sends: a chat trace's turns, in the wire format replayed.

Turn k is the request the agent sent before its k-th assistant message. With format
"responses" (or "anthropic") the chat trace is first converted to the Responses API input items
(or the Anthropic Messages history) a client would send for it. Shared by the in-process replay
(`proxy.replay._runner`) and the one that sends the turns to a running proxy (`proxy.replay._target`);
`load_conversations` reads them from a JSONL file.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from proxy.config import ServerSettings
from proxy.core import compression as cp
from proxy.core import jsonio, prompt_cache
from proxy.core import prompt_cache as ka
from proxy.core.compaction import Offload
from proxy.core.media import Reloaded
from proxy.core.prompt_cache import CutContext, LastSent, digest
from proxy.core.settings import OffloadSettings
from proxy.core.texts import RELOAD_TOOL_SCHEMAS, history_ref
from proxy.core.tokens import (
    IMAGE_PARTS,
    TokenCounter,
    counter_for_encoding,
    counter_for_model,
    counting_method,
    part_image_tokens,
)
from proxy.core.view import ItemView
from proxy.core.wire import WireFormat
from proxy.errors import Failure, Kind
from proxy.formats import chat
from proxy.formats import messages as anthropic
from proxy.formats import messages as anthropic_from_chat
from proxy.formats import responses as _responses
from proxy.formats.chat import CHAT
from proxy.formats.responses import RESPONSES, inject_tools
from proxy.offload.cpu_pool import CPU, INLINE
from proxy.offload.records import RefStore, TenantStore
from proxy.offload.summaries import Compressor
from proxy.offload.summarizer import DEFAULT_PROMPT, SummaryContext
from proxy.offload.tenant import ADMITTED, key, tenant_namespace
from proxy.reload.tools import ReloadTools
from proxy.replay import _metrics as metrics
from proxy.replay import _simulation as bill
from proxy.replay._metrics import common_prefix, prefix_reuse  # noqa: F401  (imported from here too)
from proxy.replay._simulation import (
    Gaps,
    Sink,
    SummaryRecorder,
    TurnScheduler,
    fake_summarizer,
    recording,
    request_items,
)
from proxy.store import Store
from proxy.store.sealing import Sealer
from proxy.turn import Exchange, ExchangeContext, Turn
from proxy.upstream.client import Upstream
from proxy.upstream.transport import pooled_transport

NEXT_OFFSET = re.compile(r"offset=(\d+)\)\.\]$")
WIRES: dict[str, WireFormat] = {"chat": CHAT, "responses": RESPONSES, "anthropic": anthropic.MESSAGES}


def message_tokens(messages: list[Any], counter: TokenCounter) -> list[int]:
    """Tokens of each message's JSON; its images and base64 documents as their provider bills
    them, never their base64 tokenised as text."""
    out = []
    for message in messages:
        binary: list[int] = []
        out.append(
            counter.text(json.dumps(_without_binary(message, binary, counter), ensure_ascii=False)) + sum(binary)
        )
    return out


_BINARY_PARTS = frozenset({"file", "input_file", "input_audio", "document"})


def _without_binary(value: Any, costs: list[int], counter: TokenCounter) -> Any:
    """`value` with each image / base64 part replaced by its type alone, its billed tokens in `costs`."""
    if isinstance(value, list):
        return [_without_binary(v, costs, counter) for v in value]
    if not isinstance(value, dict):
        return value
    kind = value.get("type")
    if kind in IMAGE_PARTS:
        costs.append(part_image_tokens(value))
        return {"type": kind}
    if kind in _BINARY_PARTS and len(json.dumps(value)) > 1_000:
        costs.append(counter.content([value]))
        return {"type": kind}
    return {k: _without_binary(v, costs, counter) for k, v in value.items()}


def budget(
    forwarded: list[Any], tools: Any, settings: OffloadSettings, *, counter: TokenCounter, view: ItemView = chat.VIEW
) -> int:
    """max_total_tokens plus what is never compressed: system, the task, tool schemas, summary
    and the messages kept verbatim right after it (system, user), kept tail."""
    head, tail = cp.split(forwarded, view, settings.keep_recent_for(cp.COMPRESS_KEEP_RECENT))
    fixed = forwarded[:head] + forwarded[tail:]
    summary = [m for m in forwarded[head:tail] if history_ref(view.text(m) or "")]
    if summary:
        after = forwarded.index(summary[0], head) + 1
        while after < tail and view.role(forwarded[after]) in ("system", "user"):
            summary.append(forwarded[after])
            after += 1
    return settings.max_total_tokens + counter.messages(fixed + summary) + counter.tools(tools)


@dataclass
class Conversation:
    id: str
    turns: int = 0
    raw_tokens: int = 0
    forwarded_tokens: int = 0
    prefix_reuse: float = 1.0
    max_forwarded_turn: int = 0
    turns_over_budget: int = 0
    summaries: int = 0
    refs: int = 0
    reload_exact_fraction: float = 1.0
    ms_per_turn_cold: float = 0.0
    ms_per_turn_steady: float = 0.0
    store_was_fresh: bool = True  # False: the store already held this replay (summaries reused, fewer counted)
    recall: float = 1.0
    recall_identifiers: int = 0  # Σ over turns of the identifiers only an earlier tool result had shown
    recall_found: int = 0  # of which the forwarded turn carried
    cache_cost_ratio: float = 1.0
    cache_cost: float = 0.0  # forwarded turns + summary calls at the replay's pricing, in tokens
    raw_cache_cost: float = 0.0  # the raw turns, the same way
    cost_breakdown: dict[str, Any] = field(default_factory=dict)  # per pricing: see proxy.replay._metrics
    forwarded_by_part: dict[str, float] = field(default_factory=dict)  # forwarded tokens by part, Σ over turns
    summary_calls: int = 0  # requests the summariser received
    summary_input_tokens: int = 0  # their history's tokens
    latency: dict[str, Any] | None = None  # only with a summary delay: see metrics.latency
    raw_per_turn: list[int] = field(default_factory=list)
    forwarded_per_turn: list[int] = field(default_factory=list)
    added_ms_per_turn: list[float] | None = None  # only with a summary delay
    bill: dict[str, Any] | None = None  # only with turn gaps: see proxy.replay._simulation


def replay_namespace(index: int, conversation_id: str) -> str:
    """The tenant namespace a replayed conversation runs in: a function of its position and id only."""
    return tenant_namespace("replay", f"{index}:{conversation_id}")


def view_for(format: str) -> ItemView:
    """How the pipeline sees the replayed history in this wire format."""
    if format in WIRES:
        return WIRES[format].view
    raise ValueError(f"unknown format {format!r} (expected one of {', '.join(FORMATS)})")


def forget_process_summaries(namespace: str) -> None:
    """Drop this process's memo of summary records of `namespace` (left by an earlier replay in the
    same process, e.g. on another store), so every replay counts the summaries it makes itself."""
    from proxy.offload import records as summary_memo

    tags = ("{" + namespace + "}", "{" + namespace + ":")  # a key's hash tag: the namespace, then its shard
    for memo in list(summary_memo._records.values()):
        for summary_key in [k for k in memo if any(tag in k for tag in tags)]:
            memo.pop(summary_key, None)


class CapturingRefs(RefStore):
    """The store a background summary saves the originals it covers in; remembers them (ref → text)."""

    def __init__(self, store: Store, namespace: str, ttl: int, *, created: dict[str, str]) -> None:
        super().__init__(store, namespace, ttl)
        self.created = created

    async def save(
        self, offloads: Iterable[Offload], refs: Iterable[str], session: str | None = None, *, cpu: CPU = INLINE
    ) -> set[str]:
        offloads = list(offloads)
        for o in offloads:
            self.created.setdefault(o.ref, o.text)
        return await super().save(offloads, refs, session, cpu=cpu)


class Replayer:
    def __init__(
        self,
        store: Store,
        settings: OffloadSettings,
        upstream: Upstream,
        *,
        headers: list[Any],
        model: str,
        ttl: int = 7 * 24 * 3600,
        format: str = "chat",
        summary_delay_ms: float | None = None,
        turn_latency_ms: float = 0.0,
        inline_summaries: bool = False,
        summary_request: str = "prefix",
        pricing: str = metrics.DEFAULT_PRICING,
        gaps: Gaps | None = None,
        gap_seed: int = 0,
        cache_cuts: bool = True,
        keepalive: ka.Limits | None = None,
    ) -> None:
        """Summaries are made in the background as the server makes them (`inline_summaries`: by the
        turn that needs one, none ahead of time, as before background summaries). `summary_delay_ms`
        (the delay `upstream_for` gave the fake summariser) turns on the latency report and lets
        background summaries run while the next turns go (else each is waited for after its turn,
        so figures are deterministic); `turn_latency_ms`: each turn sleeps that long after its
        pipeline (the upstream answering). `summary_request`: the shape summaries are asked for in
        (the server's `--summary-request`: "prefix", the turn's own request, or "transcript").
        `pricing`: the `metrics.PRICINGS` the cache cost is given at (the breakdown has both).
        `gaps`: the turns' clock (`proxy.replay._simulation`; a trace's own timestamps win): the bill
        (`proxy.replay._simulation`) at `pricing`'s provider profile; None: no bill. With a clock, the
        turns are cut as the server cuts them with the session's cache in mind (`cache_cuts`,
        `proxy.core.prompt_cache`: the session's last sent prefix on the replay's clock), and the
        bill prices keep-alive pings at `keepalive`'s limits (None: the server's defaults)."""
        self.store, self.settings, self.upstream, self.headers, self.model = store, settings, upstream, headers, model
        self.ttl, self.format, self.view = ttl, format, view_for(format)
        self.summary_delay_ms, self.turn_latency_ms = summary_delay_ms, turn_latency_ms
        self.inline_summaries, self.summary_request = inline_summaries, summary_request
        self.pricing = metrics.PRICINGS[pricing]
        self.gaps, self.gap_seed, self.cache_cuts = gaps, gap_seed, cache_cuts
        self.keepalive = keepalive or default_keepalive()
        self.profile = prompt_cache.profile_for(self.pricing.name, model)
        self.wire = WIRES[format]
        self.json_counter = counter_for_encoding("o200k_base")
        self._system: str | None = None  # an Anthropic conversation's `system` (its leading system messages)

    def token_counting(self) -> dict[str, Any]:
        """How the report's tokens were counted: "tiktoken", or "estimate" when an encoding could
        not be loaded (then every token figure is approximate)."""
        counters = {c.encoding_name: c for c in (self.json_counter, counter_for_model(self.model))}
        encodings = [counting_method(c) for c in counters.values()]
        method = "estimate" if any(e["method"] == "estimate" for e in encodings) else "tiktoken"
        return {"method": method, "encodings": encodings}

    async def _turn(
        self,
        request: list[Any],
        namespace: str,
        tools: Any = None,
        *,
        scheduler: TurnScheduler | None = None,
        created: dict[str, str] | None = None,
        cuts: CutContext | None = None,
    ) -> Turn:
        """The server's turn (`proxy.turn`) on this request: the same steps, the emulation's too."""
        body = request_body(request, format=self.format, model=self.model, tools=tools, system=self._system)
        capturing = CapturingRefs(self.store, namespace, self.ttl, created={} if created is None else created)
        tenant = TenantStore(self.store, namespace, self.ttl, Sealer(None))

        def compressor(
            body: dict[str, Any], settings: OffloadSettings, refs: RefStore, *, background: bool
        ) -> Compressor:
            ctx = SummaryContext(
                upstream=self.upstream,
                headers=self.headers,
                model=self.model,
                prompt=DEFAULT_PROMPT,
                timeout=120.0,
                wait=30.0,
                view=self.view,
                background=scheduler if background else None,
                request_model=self.model,
                refs=capturing,
                wire=self.wire,
                body=body,
                summary_request=self.summary_request,
                cuts=cuts,
            )
            return Compressor(tenant, ctx)

        headers = self.headers
        context = ExchangeContext(
            fmt=self.wire,
            tenant=tenant,
            admission=ADMITTED,  # the replay's own store: nothing to verify
            upstream=self.upstream,
            upstream_headers=lambda *, body_replaced, emulating: headers,
            compressor=compressor,
            settings=self.settings,
            searches=False,
        )
        # the server's first step of an exchange; as sent without the proxy's prompt caching, as
        # the replay prices the client's own
        return await Exchange(context, raw=jsonio.dumps(body), body=body, history=request).prepare(prompt_cache=False)

    def on_the_wire(self, items: list[Any]) -> list[Any]:
        """The forwarded items as the upstream reads them: an Anthropic summary item merged into
        the user message after it (and parts regrouped) as `with_history` sends them, then split
        again the way the view splits any request (so a summary call's items compare to them)."""
        if self.format != "anthropic":
            return items
        return anthropic.history({"messages": anthropic.messages_of(items)})

    def forwarded_tools(self, tools: Any, turn: Turn) -> Any:
        """The tools the server would forward with this turn: the client's, plus the reload tools
        when the turn offers them and rounds are left to offer them in."""
        if not (turn.inject_reload_tools and turn.settings.max_reload_rounds > 0):
            return tools
        if self.format == "chat":
            return [*(tools or []), *RELOAD_TOOL_SCHEMAS]
        inject = anthropic.inject_tools if self.format == "anthropic" else inject_tools
        return inject({"tools": tools}, RELOAD_TOOL_SCHEMAS)["tools"]

    async def conversation(
        self, conv: dict[str, Any], tick: Callable[[], object] = lambda: None, index: int = 0
    ) -> Conversation:
        out = Conversation(str(conv.get("id", "conversation")))
        # The same namespace on every run (refs are hashes of it, so their strings and token counts
        # are stable); the position keeps two conversations with the same id apart.
        namespace = replay_namespace(index, out.id)
        forget_process_summaries(namespace)
        out.store_was_fresh = await self.store.put_if_absent(key(namespace, "replay", "started"), b"1", self.ttl)
        counter = counter_for_model(self.model)
        self._system = system_of(conv, self.format)
        requests, tools = requests_of(conv, self.format)
        history, answers = answers_of(conv, self.format)
        history_tokens = message_tokens(history, self.json_counter)
        forwarded: list[list[Any]] = []
        tokens: list[list[int]] = []
        sent_tools: list[Any] = []
        created: dict[str, str] = {}
        sink: Sink = []  # the summary requests, by turn
        added: list[float] = []
        plan_tokens: list[int] = []  # each turn's forwarded tokens as the proxy counted them (keep-alive's)
        scheduler = None if self.inline_summaries else TurnScheduler()
        bodies: list[dict[str, Any]] = []  # what each turn forwards (the bill's)
        times = self._times(conv, index, len(requests)) if self.gaps is not None else None
        last: LastSent | None = None  # the session's last sent prefix, on the replay's clock
        for k, request in enumerate(requests):
            recording(sink, k)
            cuts = (
                CutContext(last, times[k], replace(self.profile, ttl=self.keepalive.ttl))
                if (times is not None and self.cache_cuts)
                else None
            )
            start = time.perf_counter()
            turn = await self._turn(request, namespace, tools, scheduler=scheduler, created=created, cuts=cuts)
            prepared = turn.prepared
            added.append((time.perf_counter() - start) * 1e3)
            if self.turn_latency_ms:
                await asyncio.sleep(self.turn_latency_ms / 1e3)  # the upstream answers; background work runs
            await prepared.start_background()  # as the server does once the turn's upstream request has answered
            if scheduler is not None and self.summary_delay_ms is None:
                await scheduler.idle()  # deterministic: a summary started by this turn is ready for the next
            sent = self.on_the_wire(prepared.plan.items)
            out.summaries += sum(1 for e in prepared.events if e["type"] == "compression")
            for o in prepared.plan.offloads:
                created.setdefault(o.ref, o.text)
            forwarded.append(sent)
            if times is not None:
                bodies.append(turn.rounds.request(turn.inject_reload_tools and turn.settings.max_reload_rounds > 0))
                sent_now = LastSent(
                    digest(jsonio.dumps(bodies[-1])),
                    tokens=prepared.plan.tokens_after,
                    at=times[k],
                    summary=prepared.summary_prefix,
                )
                last = last.then(sent_now) if last is not None else sent_now
                plan_tokens.append(prepared.plan.tokens_after)
            sent_tools.append(self.forwarded_tools(tools, turn))
            tokens.append(message_tokens(sent, self.json_counter))
            out.raw_per_turn.append(sum(history_tokens[: len(request)]))
            out.forwarded_per_turn.append(sum(tokens[-1]))
            if counter.messages(sent) > budget(sent, tools, self.settings, counter=counter, view=self.view):
                out.turns_over_budget += 1
            tick()
        await self._settle(scheduler)  # what the last turns left running
        if scheduler is not None:  # summaries made in the background: their events are in the store
            made = await TenantStore(self.store, namespace, self.ttl, Sealer(None)).recent_events(None)
            out.summaries += sum(1 for e in made if e["type"] == "compression")
        recording(None)
        steady = 0.0
        for request in requests:  # the same requests again: caches warm, summaries stored
            start = time.perf_counter()
            steady_turn = await self._turn(request, namespace, tools, scheduler=scheduler)
            steady += time.perf_counter() - start
            await steady_turn.prepared.start_background()
        await self._settle(scheduler)
        if scheduler is not None:
            await scheduler.shutdown(grace=0)
        out.turns = len(requests)
        out.raw_tokens, out.forwarded_tokens = sum(out.raw_per_turn), sum(out.forwarded_per_turn)
        out.max_forwarded_turn = max(out.forwarded_per_turn, default=0)
        out.prefix_reuse = prefix_reuse(forwarded, tokens)
        out.refs = len(created)
        tenant = TenantStore(self.store, namespace, self.ttl, Sealer(None))
        reload_tools = ReloadTools(
            tenant.refs(), counter, max_tokens=self.settings.max_reload_tokens, request_refs=[], session=None
        )
        exact = [await reload_all(reload_tools, ref) == text for ref, text in created.items()]
        out.reload_exact_fraction = sum(exact) / len(exact) if exact else 1.0
        out.ms_per_turn_cold = sum(added) / max(out.turns, 1)
        out.ms_per_turn_steady = steady * 1e3 / max(out.turns, 1)
        self._figures(
            out,
            history=history,
            answers=answers,
            requests=requests,
            history_tokens=history_tokens,
            forwarded=forwarded,
            tokens=tokens,
            sent_tools=sent_tools,
            sink=sink,
        )
        if times is not None:
            out.bill = self._bill(times, requests=requests, tools=tools, bodies=bodies, sink=sink, tokens=plan_tokens)
        if self.summary_delay_ms is not None:
            out.added_ms_per_turn = [round(ms, 3) for ms in added]
            out.latency = metrics.latency(added, self.summary_delay_ms, self.turn_latency_ms)
        return out

    def _times(self, conv: dict[str, Any], index: int, turns: int) -> list[float]:
        """When each turn is sent: the trace's own timestamps, else the replay's gaps."""
        assert self.gaps is not None
        return bill.trace_times(conv["messages"], answer_positions(conv["messages"])) or self.gaps.times(
            turns, seed=self.gap_seed, index=index
        )

    def _bill(
        self,
        times: list[float],
        *,
        requests: list[list[Any]],
        tools: Any,
        bodies: list[dict[str, Any]],
        sink: Sink,
        tokens: list[int],
    ) -> dict[str, Any]:
        raw = [
            request_body(r, format=self.format, model=self.model, tools=tools, system=self._system) for r in requests
        ]

        def pings(limits: ka.Limits) -> list[bill.Ping]:
            return bill.keepalive_pings(
                times=times,
                tokens=tokens,
                limits=limits,
                profile=self.profile,
                output_tokens=bill.PING_OUTPUT.get(self.format, 1),
            )

        sweep = {m: pings(replace(self.keepalive, min_tokens=m)) for m in bill.KEEPALIVE_SWEEP}
        return bill.replayed(
            bill.Biller(self.profile, format=self.format, tokens=self.json_counter.text),
            times=times,
            raw=raw,
            forwarded=bodies,
            summaries=[(k, b) for k, b, _ in sink],
            pings=pings(self.keepalive),
            sweep=sweep,
        )

    async def _settle(self, scheduler: TurnScheduler | None) -> None:
        if scheduler is not None:
            await scheduler.idle()
        if isinstance(self.upstream.transport, SummaryRecorder):
            await self.upstream.transport.idle()

    def _figures(
        self,
        out: Conversation,
        *,
        history: list[Any],
        answers: list[tuple[int, int]],
        requests: list[list[Any]],
        history_tokens: list[int],
        forwarded: list[list[Any]],
        tokens: list[list[int]],
        sent_tools: list[Any],
        sink: Sink,
    ) -> None:
        """recall and the cache cost (`proxy.replay._metrics`)."""
        recall = metrics.Recall()
        for figures in metrics.recall(history, answers, forwarded, is_tool=lambda item: self.view.role(item) == "tool"):
            recall.add(figures)
        out.recall, out.recall_identifiers, out.recall_found = recall.value, recall.kept, recall.found
        calls = []
        for turn, body, path in sink:
            items, call_tools = request_items(body, path)
            calls.append(metrics.SummaryCall(turn, items, call_tools, message_tokens(items, self.json_counter)))
        out.summary_calls = len(calls)
        out.summary_input_tokens = sum(sum(c.tokens) for c in calls)
        raw_tokens = [history_tokens[: len(r)] for r in requests]
        out.cache_cost = metrics.cache_cost(forwarded, tokens, sent_tools, summaries=calls, pricing=self.pricing)
        out.raw_cache_cost = metrics.cache_cost(requests, raw_tokens, pricing=self.pricing)
        out.cache_cost_ratio = out.cache_cost / out.raw_cache_cost if out.raw_cache_cost else 1.0
        windows = [metrics.Window(items, counts, self.view) for items, counts in zip(forwarded, tokens)]
        out.cost_breakdown = metrics.conversation_costs(
            windows, metrics.new_items([len(r) for r in requests]), raw_tokens, tools=sent_tools, summaries=calls
        )
        out.forwarded_by_part = metrics.forwarded_by_part(windows)


async def reload_all(tools: ReloadTools, ref: str) -> str | None:
    """What the model gets by calling context_reload until the last page."""
    first = await tools.reload(ref)
    if isinstance(first, Reloaded):
        return first.data_url  # an image or a document: given back whole
    if not first.endswith("this is the end.]") and NEXT_OFFSET.search(first) is None:
        return first  # it fit: the original, nothing added
    pages, page = [], first
    while True:
        body, note = page.rsplit("\n", 1)
        pages.append(body)
        match = NEXT_OFFSET.search(note)
        if match is None:
            return "".join(pages)
        following = await tools.reload(ref, int(match.group(1)))
        if isinstance(following, Reloaded):  # a later page is text, as the first was
            return None
        page = following


def default_keepalive() -> ka.Limits:
    """The keep-alive limits of a server run with its defaults (`serve --cache-keepalive-*`)."""
    fields = ServerSettings.model_fields
    return ka.Limits(
        fields["cache_keepalive_min_tokens"].default,
        fields["cache_keepalive_max_pings"].default,
        fields["cache_keepalive_idle"].default,
        fields["cache_ttl"].default,
    )


def upstream_for(url: str | None, summary_delay_ms: float = 0) -> Upstream:
    """The summariser's upstream (the built-in fake unless `url`), recording the requests it gets
    (`proxy.replay._simulation`); the fake answers after `summary_delay_ms`."""
    if url:
        settings = ServerSettings(upstream=url, read_timeout=120)
        return Upstream(settings, transport=SummaryRecorder(pooled_transport(settings)))
    return Upstream(
        ServerSettings(upstream="http://fake-summariser.invalid/v1"),
        transport=SummaryRecorder(fake_summarizer(summary_delay_ms)),
    )


FORMATS = ("chat", "responses", "anthropic")  # the wire format conversations are replayed in
ANTHROPIC_MAX_TOKENS = 4096  # `max_tokens` of a replayed Messages request (the API requires one)


def answer_positions(messages: list[Any]) -> list[int]:
    """Where the assistant messages the turns are replayed for stand (never the first message)."""
    return [k for k, m in enumerate(messages) if k > 0 and isinstance(m, dict) and m.get("role") == "assistant"]


def turns_of(messages: list[Any]) -> list[list[Any]]:
    return [messages[:k] for k in answer_positions(messages)]


def requests_of(conv: dict[str, Any], format: str) -> tuple[list[list[Any]], Any]:
    """The requests replayed for a conversation, one per turn (`turns_of` its messages), and its
    tools, both in the wire format. Responses turns are slices of one conversion of the whole
    conversation, so consecutive turns share their items as chat turns share their messages."""
    requests = turns_of(conv["messages"])
    if format == "chat":
        return requests, conv.get("tools")
    convert = anthropic_from_chat if format == "anthropic" else None
    items, offsets = (convert or _responses).items_with_offsets(conv["messages"])
    tools = (convert or _responses).tools_from_chat(conv.get("tools"))
    return [items[: offsets[len(request)]] for request in requests], tools


def answers_of(conv: dict[str, Any], format: str) -> tuple[list[Any], list[tuple[int, int]]]:
    """The whole conversation in the wire format, and where each turn's assistant answer stands in
    it (start, end): the request of turn k is history[:start] (`requests_of`)."""
    positions = answer_positions(conv["messages"])
    if format == "chat":
        return conv["messages"], [(k, k + 1) for k in positions]
    items, offsets = (anthropic_from_chat if format == "anthropic" else _responses).items_with_offsets(conv["messages"])
    return items, [(offsets[k], offsets[k + 1]) for k in positions]


def system_of(conv: dict[str, Any], format: str) -> str | None:
    """An Anthropic request's `system` (the conversation's leading system messages); None in
    the other formats, whose system prompt is a history item."""
    return anthropic_from_chat.system_from_chat(conv["messages"]) if format == "anthropic" else None


def request_body(
    request: list[Any], *, format: str, model: str, tools: Any = None, system: str | None = None
) -> dict[str, Any]:
    """The body a client sends for one turn (`requests_of`): chat `messages`, Responses `input`,
    or an Anthropic Messages request with `system` and `max_tokens`; the tools when there are any."""
    body: dict[str, Any] = {"model": model, ("input" if format == "responses" else "messages"): request}
    if format == "anthropic":
        head = {"system": system} if system else {}
        body = anthropic.MESSAGES.with_history({**head, **body, "max_tokens": ANTHROPIC_MAX_TOKENS}, request)
    if tools:
        body["tools"] = tools
    return body


class ReplayInputError(Failure, ValueError):
    kind = Kind.BAD_REQUEST

    """The conversations file cannot be replayed; the message names the file and line."""


def _kind(value: Any) -> str:
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        type(None): "null",
        int: "a number",
        float: "a number",
    }.get(type(value), type(value).__name__)


def load_conversations(path: Path) -> list[dict[str, Any]]:
    """One conversation per non-blank line: a JSON object with a "messages" list (optional "id", "tools")."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ReplayInputError(f"{path}: cannot read it ({exc})") from None
    conversations = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            conv = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ReplayInputError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(conv, dict):
            raise ReplayInputError(f'{where}: expected a JSON object with a "messages" list, got {_kind(conv)}')
        if "messages" not in conv:
            raise ReplayInputError(f'{where}: the object has no "messages" (expected a list of chat messages)')
        if not isinstance(conv["messages"], list):
            raise ReplayInputError(f'{where}: "messages" is {_kind(conv["messages"])}, expected a list')
        if conv.get("tools") is not None and not isinstance(conv["tools"], list):
            raise ReplayInputError(f'{where}: "tools" is {_kind(conv["tools"])}, expected a list')
        conversations.append(conv if "id" in conv else {**conv, "id": f"line-{number}"})
    if not conversations:
        raise ReplayInputError(f"{path}: no conversations in it (expected one JSON object per line)")
    return conversations
