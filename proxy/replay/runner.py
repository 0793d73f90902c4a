"""`python -m proxy replay FILE.jsonl`: replay conversations turn by turn through the offload pipeline.

Turn k is the request the agent sent before its k-th assistant message. Every turn runs the
same pipeline the server runs (compaction, compression, the real store), with a built-in
deterministic fake summariser unless --upstream names a real one. Writes DIR/report.json and
PNG charts, and prints a table.

With format "responses", each chat trace is first converted to the Responses API input items a
client would send for it (`proxy.formats.responses.from_chat`) and replayed through the
Responses view; every figure is then computed the same way on items instead of messages.

Definitions: tokens are o200k_base tokens of each message's (or item's) JSON. prefix_reuse = Σ over
consecutive turns of the tokens of the longest common prefix of whole forwarded messages of
turn k and k+1, divided by Σ tokens of forwarded turn k. reload_exact_fraction = share of
references created during the replay whose context_reload returns the original byte-for-byte.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

from proxy.core import compression as cp
from proxy.core.view import ItemView
from proxy.formats import chat
from proxy.formats.responses.from_chat import items_with_offsets, tools_from_chat
from proxy.formats.responses.items import ResponsesView
from proxy.core.markers import INJECTED_TOOLS, history_ref
from proxy.offload.summaries import Compressor, SummaryContext
from proxy.config import ServerSettings
from proxy.core.settings import OffloadSettings
from proxy.offload.pipeline import prepare
from proxy.offload.refs import RefStore
from proxy.reload.tools import ReloadTools
from proxy.store import Store
from proxy.offload.summarizer import DEFAULT_PROMPT
from proxy.offload.tenant import key, tenant_namespace
from proxy.core.tokens import TokenCounter, counter_for_encoding, counter_for_model, counting_method
from proxy.upstream.client import Upstream

NEXT_OFFSET = re.compile(r"offset=(\d+)\)\.\]$")
FORMATS = ("chat", "responses")  # the wire format conversations are replayed in


def fake_summarizer() -> httpx2.MockTransport:
    """A deterministic stand-in for the summarisation model: a snapshot built from its input."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        transcript = json.loads(request.content)["messages"][-1]["content"]
        lines = [line for line in transcript.splitlines() if line.strip()]
        errors = [line[:200] for line in lines if re.search(r"error|fail|exception", line, re.I)][:8]
        recent = [line[:200] for line in lines if line.startswith("[")][-6:]
        snapshot = (
            "<state_snapshot>\n<task_overview>" + " ".join(lines[:6])[:800] + "</task_overview>\n"
            "<current_state>" + "\n".join(recent) + "</current_state>\n"
            "<important_discoveries>" + "\n".join(errors) + "</important_discoveries>\n"
            "<next_steps>Continue from the current state.</next_steps>\n"
            "<context_to_preserve></context_to_preserve>\n</state_snapshot>"
        )
        usage = {"prompt_tokens": len(transcript) // 4, "completion_tokens": len(snapshot) // 4}
        return httpx2.Response(200, json={"choices": [{"message": {"role": "assistant", "content": snapshot}}],
                                          "usage": usage})

    return httpx2.MockTransport(handler)


def turns_of(messages: list[Any]) -> list[list[Any]]:
    return [messages[:k] for k, m in enumerate(messages) if k > 0 and isinstance(m, dict)
            and m.get("role") == "assistant"]


def message_tokens(messages: list[Any], counter: TokenCounter) -> list[int]:
    return [counter.text(json.dumps(m, ensure_ascii=False)) for m in messages]


def common_prefix(a: list[Any], b: list[Any]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def prefix_reuse(forwarded: list[list[Any]], tokens: list[list[int]]) -> float:
    reused = total = 0
    for k in range(len(forwarded) - 1):
        reused += sum(tokens[k][: common_prefix(forwarded[k], forwarded[k + 1])])
        total += sum(tokens[k])
    return reused / total if total else 1.0


def budget(forwarded: list[Any], tools: Any, settings: OffloadSettings, counter: TokenCounter,
           view: ItemView = chat.VIEW) -> int:
    """max_total_tokens plus what is never compressed: system, tool schemas, summary, kept tail."""
    head, tail = cp.split(forwarded, view, settings.keep_recent_for(cp.COMPRESS_KEEP_RECENT))
    fixed = forwarded[:head] + forwarded[tail:]
    summary = [m for m in forwarded[head:tail] if history_ref(view.text(m) or "")]
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
    raw_per_turn: list[int] = field(default_factory=list)
    forwarded_per_turn: list[int] = field(default_factory=list)


def replay_namespace(index: int, conversation_id: str) -> str:
    """The tenant namespace a replayed conversation runs in: a function of its position and id only."""
    return tenant_namespace("replay", f"{index}:{conversation_id}")


def view_for(format: str) -> ItemView:
    """How the pipeline sees the replayed history in this wire format."""
    if format == "chat":
        return chat.VIEW
    if format == "responses":
        return ResponsesView(INJECTED_TOOLS)
    raise ValueError(f"unknown format {format!r} (expected one of {', '.join(FORMATS)})")


def requests_of(conv: dict, format: str) -> tuple[list[list[Any]], Any]:
    """The requests replayed for a conversation, one per turn (`turns_of` its messages), and its
    tools, both in the wire format. Responses turns are slices of one conversion of the whole
    conversation, so consecutive turns share their items as chat turns share their messages."""
    requests = turns_of(conv["messages"])
    if format == "chat":
        return requests, conv.get("tools")
    items, offsets = items_with_offsets(conv["messages"])
    return [items[:offsets[len(request)]] for request in requests], tools_from_chat(conv.get("tools"))


def forget_process_summaries(namespace: str) -> None:
    """Drop this process's memo of summary records of `namespace` (left by an earlier replay in the
    same process, e.g. on another store), so every replay counts the summaries it makes itself."""
    from proxy.offload import summaries as compression

    tag = "{" + namespace + "}"
    for summary_key in [k for k in compression._records if tag in k]:
        compression._records.pop(summary_key, None)


class Replayer:
    def __init__(self, store: Store, settings: OffloadSettings, upstream: Upstream, headers: list, model: str,
                 ttl: int = 7 * 24 * 3600, format: str = "chat") -> None:
        self.store, self.settings, self.upstream, self.headers, self.model = store, settings, upstream, headers, model
        self.ttl, self.format, self.view = ttl, format, view_for(format)
        self.json_counter = counter_for_encoding("o200k_base")

    def token_counting(self) -> dict[str, Any]:
        """How the report's tokens were counted: "tiktoken", or "estimate" when an encoding could
        not be loaded (then every token figure is approximate)."""
        counters = {c.encoding_name: c for c in (self.json_counter, counter_for_model(self.model))}
        encodings = [counting_method(c) for c in counters.values()]
        method = "estimate" if any(e["method"] == "estimate" for e in encodings) else "tiktoken"
        return {"method": method, "encodings": encodings}

    async def _prepare(self, request: list[Any], namespace: str, counter: TokenCounter):
        refs = RefStore(self.store, namespace, self.ttl)
        ctx = SummaryContext(upstream=self.upstream, headers=self.headers, model=self.model, prompt=DEFAULT_PROMPT,
                             timeout=120.0, wait=30.0, view=self.view)
        return await prepare(request, self.settings, counter=counter, namespace=namespace, refs=refs,
                             compressor=Compressor(self.store, namespace, self.ttl, ctx), view=self.view)

    async def conversation(self, conv: dict, tick=lambda: None, index: int = 0) -> Conversation:
        out = Conversation(str(conv.get("id", "conversation")))
        # The same namespace on every run (refs are hashes of it, so their strings and token counts
        # are stable); the position keeps two conversations with the same id apart.
        namespace = replay_namespace(index, out.id)
        forget_process_summaries(namespace)
        out.store_was_fresh = await self.store.put_if_absent(key(namespace, "replay", "started"), b"1", self.ttl)
        counter = counter_for_model(self.model)
        requests, tools = requests_of(conv, self.format)
        forwarded: list[list[Any]] = []
        tokens: list[list[int]] = []
        created: dict[str, str] = {}
        cold = 0.0
        for request in requests:
            start = time.perf_counter()
            prepared = await self._prepare(request, namespace, counter)
            cold += time.perf_counter() - start
            sent = prepared.plan.items
            out.summaries += sum(1 for e in prepared.events if e["type"] == "compression")
            for o in prepared.plan.offloads:
                created.setdefault(o.ref, o.text)
            forwarded.append(sent)
            tokens.append(message_tokens(sent, self.json_counter))
            out.raw_per_turn.append(sum(message_tokens(request, self.json_counter)))
            out.forwarded_per_turn.append(sum(tokens[-1]))
            if counter.messages(sent) > budget(sent, tools, self.settings, counter, self.view):
                out.turns_over_budget += 1
            tick()
        steady = 0.0
        for request in requests:  # the same requests again: caches warm, summaries stored
            start = time.perf_counter()
            await self._prepare(request, namespace, counter)
            steady += time.perf_counter() - start
        out.turns = len(requests)
        out.raw_tokens, out.forwarded_tokens = sum(out.raw_per_turn), sum(out.forwarded_per_turn)
        out.max_forwarded_turn = max(out.forwarded_per_turn, default=0)
        out.prefix_reuse = prefix_reuse(forwarded, tokens)
        out.refs = len(created)
        tools = ReloadTools(RefStore(self.store, namespace, self.ttl), counter,
                            max_tokens=self.settings.max_reload_tokens, request_refs=[], session=None)
        exact = [await reload_all(tools, ref) == text for ref, text in created.items()]
        out.reload_exact_fraction = sum(exact) / len(exact) if exact else 1.0
        out.ms_per_turn_cold = cold * 1e3 / max(out.turns, 1)
        out.ms_per_turn_steady = steady * 1e3 / max(out.turns, 1)
        return out


async def reload_all(tools: ReloadTools, ref: str) -> str | None:
    """What the model gets by calling context_reload until the last page."""
    first = await tools.reload(ref)
    if not first.endswith("this is the end.]") and NEXT_OFFSET.search(first) is None:
        return first  # it fit: the original, nothing added
    pages, page = [], first
    while True:
        body, note = page.rsplit("\n", 1)
        pages.append(body)
        match = NEXT_OFFSET.search(note)
        if match is None:
            return "".join(pages)
        page = await tools.reload(ref, int(match.group(1)))


def overall(conversations: list[Conversation]) -> dict[str, Any]:
    raw = sum(c.raw_tokens for c in conversations)
    fwd = sum(c.forwarded_tokens for c in conversations)
    turns = sum(c.turns for c in conversations)
    refs = sum(c.refs for c in conversations)
    weight = sum(c.raw_tokens for c in conversations) or 1
    return {
        "conversations": len(conversations),
        "turns": turns,
        "raw_tokens": raw,
        "forwarded_tokens": fwd,
        "forwarded_ratio": fwd / raw if raw else 1.0,
        "prefix_reuse": sum(c.prefix_reuse * c.raw_tokens for c in conversations) / weight,
        "max_forwarded_turn": max((c.max_forwarded_turn for c in conversations), default=0),
        "turns_over_budget": sum(c.turns_over_budget for c in conversations),
        "summaries": sum(c.summaries for c in conversations),
        "refs": refs,
        "reload_exact_fraction": (sum(c.reload_exact_fraction * c.refs for c in conversations) / refs) if refs else 1.0,
        "ms_per_turn_cold": sum(c.ms_per_turn_cold * c.turns for c in conversations) / max(turns, 1),
        "ms_per_turn_steady": sum(c.ms_per_turn_steady * c.turns for c in conversations) / max(turns, 1),
    }


def upstream_for(url: str | None) -> Upstream:
    if url:
        return Upstream(ServerSettings(upstream=url, read_timeout=120))
    return Upstream(ServerSettings(upstream="http://fake-summariser.invalid/v1"), transport=fake_summarizer())


class ReplayInputError(ValueError):
    """The conversations file cannot be replayed; the message names the file and line."""


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def load_conversations(path: Path) -> list[dict]:
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


def report_dict(conversations: list[Conversation], settings: OffloadSettings,
                token_counting: dict[str, Any] | None = None, format: str = "chat") -> dict[str, Any]:
    per = []
    for c in conversations:
        entry = dict(c.__dict__)
        per.append(entry)
    report = {"format": format, "settings": settings.model_dump(), "overall": overall(conversations),
              "conversations": per}
    if token_counting is not None:
        report["token_counting"] = token_counting
    return report


def estimate_warning(token_counting: dict[str, Any]) -> str | None:
    """The line printed to stderr when the report's tokens are estimates, else None."""
    if token_counting.get("method") != "estimate":
        return None
    failed = [e for e in token_counting["encodings"] if e["method"] == "estimate"]
    names = ", ".join(e["encoding"] for e in failed)
    reason = "; ".join(f"{e['encoding']}: {str(e['error'])[:160]}" for e in failed)
    where = failed[0]["cache_dir"] or "unset"
    return (f"offload-proxy replay: WARNING: token counts are ESTIMATES (about 4 bytes per token), not {names} "
            f"tokens: tiktoken could not load the encoding ({reason}). Point TIKTOKEN_CACHE_DIR at a folder "
            f"holding the tiktoken files (TIKTOKEN_CACHE_DIR={where}).")


def write_outputs(report: dict[str, Any], out: Path) -> list[Path]:
    from proxy.replay.report import write_charts

    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2))
    return [out / "report.json", *write_charts(report, out)]
