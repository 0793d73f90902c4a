"""What a replay simulates around the pipeline (the summariser, the requests it receives) and what
a replayed conversation is billed on the clock of its turns.

What a replay simulates around the pipeline: the summariser, and the requests it receives.

- `fake_summarizer(delay_ms)`: a deterministic stand-in for the summarisation model (a snapshot
  built from its input), answering after `delay_ms` (an `asyncio.sleep`, so the event loop runs
  other work meanwhile, as while a real model thinks).
- `SummaryRecorder`: a transport wrapper that records every summary request (its history items
  and tools) for the turn that triggered it. The replayer names the turn with `recording(sink, k)`
  before the turn's pipeline runs; the name is a context variable, so a summary made by a task
  the pipeline starts is still attributed to that turn.
- `TurnScheduler`: the server's scheduler of background summaries, whose jobs (run in a context
  of their own) keep the turn that started them.

What a replayed conversation is billed, on the clock of its turns (`proxy.replay._simulation`), by
the provider-cache model (`proxy.core.prompt_cache`) at `--pricing`'s profile.

Six figures per conversation, each in input-token equivalents (an uncached input token = 1):

- `raw_uncached`: the raw history, every token at the input price (a client caching nothing);
- `raw_cached`: the raw history with the client's own caching (Anthropic: the caching the proxy
  would add, `proxy.formats.messages`; OpenAI: its automatic cache);
- `proxy_uncached`: the forwarded turns and the proxy's summary calls, the proxy adding no cache
  control (`--cache-control off`, a client setting none: on Anthropic nothing is cached);
- `proxy_cached`: the same with the proxy's cache control (`--cache-control auto`);
- `proxy_keepalive`: that, plus the keep-alive pings the server would send between the turns
  (`--cache-keepalive`: `keepalive_pings`, at the server's default limits unless given), each a
  read of the turn's prefix and its few output tokens (at `keepalive.OUTPUT_PRICE`);
  `keepalive_sweep` gives it at each of `KEEPALIVE_SWEEP`'s smallest prefixes kept warm;
- `floor`: every token new to the raw history paid once at the write price, the rest free.

The proxy's caching is applied to the forwarded bodies here (the same pure function the server
applies before the turn's summaries are made, so the summary calls' bodies get it the same way),
which leaves every other replay figure as it was. A summary call is sent a second after the turn
that started it. Requests of one conversation share one cache; conversations do not. Whether the
forwarded turns were cut with the session's cache in mind (cold-cache cuts, a newer cut that
would not pay for itself waiting: `proxy.core.prompt_cache`) is the replay's (`Replayer.cache_cuts`).

When a replayed turn is sent: the trace's own timestamps, else `--turn-gaps`.

A provider's prompt cache expires after an idle gap (5 minutes by default), so what a
conversation is billed depends on the time between its requests. A trace whose messages carry
a `timestamp` (seconds since the epoch, or ISO 8601) is replayed on it: turn k is sent when the
last message of its request was written. Otherwise the gaps between turns come from a spec:

- `30s` (or `90`, `5m`, `1h`): every gap that long;
- `exp:45s`: exponentially distributed, that mean;
- `mix:30s,0.1@600s`: 30 s, except that a gap is an idle pause of 600 s with probability 0.1
  (several `p@duration` terms may follow, their probabilities summing to at most 1).

Random gaps are drawn from a generator seeded with `seed` and the conversation's position, so a
replay is reproducible and conversations do not share their draws.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import math
import random
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import httpx2

from proxy.core import prompt_cache as ka
from proxy.core import prompt_cache as pc
from proxy.core.texts import INJECTED_TOOLS, SUMMARY_INSTRUCTION
from proxy.errors import Failure, Kind
from proxy.formats import chat
from proxy.formats import messages as messages_cache
from proxy.formats import prompt_cache as openai_cache
from proxy.formats.messages import MESSAGES, instruction_message, message_answer
from proxy.formats.responses import ResponsesView, instruction_item, items_from_message
from proxy.offload.summarizer import SummaryScheduler

Sink = list[
    tuple[int, dict[str, Any], str]
]  # (turn, body, URL path): the summary requests of one replayed conversation
_UNSET: Any = object()
_TURN: contextvars.ContextVar[tuple[Sink, int] | None] = contextvars.ContextVar("replay_turn", default=_UNSET)
_current: list[tuple[Sink, int] | None] = [None]  # for a task started outside any turn's context


def recording(sink: Sink | None, turn: int = 0) -> None:
    """Attribute the summary requests made from now on (in this task and those it starts) to
    `turn`, appended to `sink`; None: record nothing (e.g. the steady pass)."""
    value = None if sink is None else (sink, turn)
    _TURN.set(value)
    _current[0] = value


def _target() -> tuple[Sink, int] | None:
    target = _TURN.get()
    return _current[0] if target is _UNSET else target


def keep_turn(run: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
    """`run`, attributing what it sends to the turn current now, whatever context it runs in."""
    target = _target()

    async def attributed() -> None:
        _TURN.set(target)
        await run()

    return attributed


class TurnScheduler(SummaryScheduler):
    """The server's scheduler of background summaries; each job records for the turn that started it."""

    def submit(self, key: str, run: Callable[[], Awaitable[None]], **kwargs: Any) -> bool:
        return super().submit(key, keep_turn(run), **kwargs)


def request_items(body: dict[str, Any], path: str = "") -> tuple[list[Any], Any]:
    """The history a summary request carries (chat `messages`, Anthropic `messages` as the
    Messages view's items when `path` is `…/messages`, or Responses `instructions` and `input`),
    and its tools."""
    if is_anthropic(path):
        return MESSAGES.history(body), body.get("tools")
    if "messages" in body:
        items = body["messages"] if isinstance(body["messages"], list) else []
    else:
        value = body.get("input")
        items = [{"role": "user", "content": value}] if isinstance(value, str) else list(value or [])
        if isinstance(body.get("instructions"), str):
            items = [*items_from_message({"role": "system", "content": body["instructions"]}), *items]
    return items, body.get("tools")


class SummaryRecorder(httpx2.AsyncBaseTransport):
    """Wraps the summariser's transport; records each request's body for the current turn."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self.inner = inner
        self.in_flight = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        target = _target()
        if target is not None:
            body = json.loads(await request.aread())
            target[0].append((target[1], body, request.url.path))
        self.in_flight += 1
        try:
            return await self.inner.handle_async_request(request)
        finally:
            self.in_flight -= 1

    async def idle(self, poll: float = 0.002) -> None:
        """Return once no summary request is under way (one the pipeline left running)."""
        while self.in_flight:
            await asyncio.sleep(poll)

    async def aclose(self) -> None:
        await self.inner.aclose()


def is_anthropic(path: str) -> bool:
    return path.rstrip("/").endswith("/messages")


def _transcript(body: dict[str, Any], path: str = "") -> str:
    """What the fake summarises: in the prefix shape (its last message or item is the instruction,
    exactly), the items before the instruction, rendered as the transcript shape renders them; in
    the transcript shape, the transcript (its last message, after the system prompt)."""
    items, _ = request_items(body, path)
    if items and items[-1] in (
        {"role": "user", "content": SUMMARY_INSTRUCTION},
        instruction_item(SUMMARY_INSTRUCTION),
        instruction_message(SUMMARY_INSTRUCTION),
    ):
        items = items[:-1]
    elif len(items) == 2 and isinstance(items[-1], dict) and isinstance(items[-1].get("content"), str):
        text: str = items[-1]["content"]
        return text
    view = MESSAGES.view if is_anthropic(path) else chat.VIEW if "messages" in body else ResponsesView(INJECTED_TOOLS)
    lines = [view.transcript(item) for item in items if view.role(item) != "system"]
    return "\n\n".join(f"{header}\n{text}".rstrip() for header, text in lines)


def fake_summarizer(delay_ms: float = 0) -> httpx2.MockTransport:
    """A deterministic stand-in for the summarisation model: a snapshot built from its input,
    answered after `delay_ms` (chat completions, or a Responses answer on .../responses)."""

    async def handler(request: httpx2.Request) -> httpx2.Response:
        if delay_ms:
            await asyncio.sleep(delay_ms / 1e3)
        transcript = _transcript(json.loads(request.content), request.url.path)
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
        tokens_in, tokens_out = len(transcript) // 4, len(snapshot) // 4
        if is_anthropic(request.url.path):
            return httpx2.Response(
                200, json=message_answer(snapshot, model="replay", input_tokens=tokens_in, output_tokens=tokens_out)
            )
        if request.url.path.rstrip("/").endswith("/responses"):
            return httpx2.Response(
                200,
                json={
                    "object": "response",
                    "status": "completed",
                    "output": [
                        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": snapshot}]}
                    ],
                    "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out},
                },
            )
        return httpx2.Response(
            200,
            json={
                "choices": [{"message": {"role": "assistant", "content": snapshot}}],
                "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out},
            },
        )

    return httpx2.MockTransport(handler)


SUMMARY_DELAY = 1.0  # seconds after its turn a summary call is sent
FIGURES = ("raw_uncached", "raw_cached", "proxy_uncached", "proxy_cached", "proxy_keepalive", "floor")
KEEPALIVE_SWEEP = (1024, 4096, 8192, 16384, 20000)  # --cache-keepalive-min-tokens priced besides the replay's
PING_OUTPUT = {"anthropic": 1, "chat": 1, "responses": 16}  # tokens a ping may generate (`keepalive_pings`)
Tokens = Callable[[str], int]
Marker = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class Sent:
    at: float
    body: dict[str, Any]


@dataclass(frozen=True)
class Ping:
    """A keep-alive ping: at `at`, the prefix turn `turn` forwarded."""

    at: float
    turn: int


def keepalive_pings(
    *, times: Sequence[float], tokens: Sequence[int], limits: ka.Limits, profile: pc.Profile, output_tokens: int = 1
) -> list[Ping]:
    """The pings the server's keep-alive (`proxy.core.prompt_cache.next_ping`) sends after each turn
    (sent at times[k], its forwarded prefix tokens[k] as the proxy counted them) until the next
    one, or after the last until the limits stop them: a session that ended is pinged too."""
    profile = replace(profile, ttl=limits.ttl)
    out: list[Ping] = []
    for k, at in enumerate(times):
        end = times[k + 1] if k + 1 < len(times) else math.inf
        held = ka.Held(tokens[k], turn_at=at, sent_at=at, output_tokens=output_tokens)
        while (due := ka.next_ping(held, limits, profile)) is not None and due < end:
            out.append(Ping(due, k))
            held = replace(held, sent_at=due, pings=held.pings + 1)
    return out


def stripped(value: Any) -> Any:
    """`value` without any `cache_control` (a body as a client that sets none sends it)."""
    if isinstance(value, dict):
        return {k: stripped(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [stripped(v) for v in value]
    return value


def explicit_marks(body: dict[str, Any]) -> dict[str, Any]:
    """Measured against the request-level caching: explicit breakpoints after the tools and
    system, on the proxy's summary block and on the last block (`bench/cache_control.py`)."""
    marked = messages_cache.with_caching(body, "system+automatic")
    out = {k: v for k, v in marked.items() if k != "cache_control"}
    messages = [dict(m) for m in out.get("messages") or [] if isinstance(m, dict)]
    control = dict(messages_cache.EPHEMERAL)
    for message in messages:
        content = message.get("content")
        if isinstance(content, list) and any(
            isinstance(b, dict) and "[offloaded history: " in str(b.get("text")) for b in content
        ):
            message["content"] = [
                {**b, "cache_control": control}
                if isinstance(b, dict) and "[offloaded history: " in str(b.get("text"))
                else b
                for b in content
            ]
            break
    if messages:
        last = messages[-1]
        content = last.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if isinstance(content, list) and content and isinstance(content[-1], dict):
            last["content"] = [*content[:-1], {**content[-1], "cache_control": control}]
    return {**out, "messages": messages}


MARKERS: dict[str, Marker] = {
    "automatic": lambda body: messages_cache.with_caching(body, "automatic"),
    "system+automatic": lambda body: messages_cache.with_caching(body, "system+automatic"),
    "explicit": explicit_marks,
}


class Biller:
    """Bills sequences of bodies of one wire format at one profile; block token counts memoised."""

    def __init__(self, profile: pc.Profile, *, format: str, tokens: Tokens) -> None:
        self.profile, self.format = profile, format
        self._tokens, self._memo = tokens, {}  # type: ignore[var-annotated]

    def tokens(self, text: str) -> int:
        found = self._memo.get(text)
        if found is None:
            found = self._memo[text] = self._tokens(text)
        return found

    def request(self, sent: Sent, *, caching: Marker | None) -> pc.Request:
        """What the provider sees of `sent`, with `caching` applied to the body (None: none at all)."""
        body = stripped(sent.body)
        if self.format == "anthropic":
            return messages_cache.cached_request(caching(body) if caching else body, sent.at, self.tokens)
        request = openai_cache.cached_request(body, sent.at, self.tokens)
        return pc.Request(request.at, request.blocks, automatic=pc.FIVE_MINUTES if caching else None)

    def bill(self, sent: Sequence[Sent], *, caching: Marker | None) -> pc.Billed:
        return pc.total(pc.bill_all(self.profile, [self.request(s, caching=caching) for s in sent]))

    def cost(self, sent: Sequence[Sent], *, caching: Marker | None) -> float:
        return self.bill(sent, caching=caching).cost(self.profile)


def conversation_bill(
    biller: Biller,
    *,
    raw: Sequence[Sent],
    forwarded: Sequence[Sent],
    pings: Sequence[Sent] = (),
    sweep: Mapping[int, Sequence[Sent]] | None = None,
    strategy: str = messages_cache.STRATEGY,
) -> dict[str, Any]:
    """The figures (`FIGURES`) of one conversation, the proxy's bill split by kind, and what the
    proxy's turns cost with each way of caching (`MARKERS`) for the bench's choice. `pings`:
    the keep-alive pings, each with the body it repeats; `sweep`: other pings by their limits'
    smallest prefix, priced the same way."""
    caching = MARKERS[strategy]
    uncached = biller.bill(raw, caching=None)
    proxy = biller.bill(forwarded, caching=caching)

    def with_pings(sent: Sequence[Sent]) -> float:
        output = ka.OUTPUT_PRICE * PING_OUTPUT.get(biller.format, 1) * len(sent)
        return biller.cost(sorted([*forwarded, *sent], key=lambda s: s.at), caching=caching) + output

    kept = with_pings(pings)
    floor, seen = 0.0, 0
    for s in raw:
        blocks = biller.request(s, caching=None).blocks
        floor += sum(b.tokens for b in blocks[seen:]) * biller.profile.write
        seen = len(blocks)
    return {
        "raw_uncached": float(uncached.total),
        "raw_cached": biller.cost(raw, caching=caching),
        "proxy_uncached": biller.cost(forwarded, caching=None),
        "proxy_cached": proxy.cost(biller.profile),
        "proxy_keepalive": kept,
        "pings": len(pings),
        "floor": floor,
        "keepalive_sweep": {str(m): with_pings(p) for m, p in (sweep or {}).items()},
        "proxy_billed": {
            "uncached": proxy.uncached,
            "read": proxy.read,
            "write_5m": proxy.write_5m,
            "write_1h": proxy.write_1h,
        },
        "strategies": {name: biller.cost(forwarded, caching=marker) for name, marker in MARKERS.items()},
    }


def replayed(
    biller: Biller,
    *,
    times: Sequence[float],
    raw: Sequence[dict[str, Any]],
    forwarded: Sequence[dict[str, Any]],
    summaries: Sequence[tuple[int, dict[str, Any]]],
    pings: Sequence[Ping] = (),
    sweep: Mapping[int, Sequence[Ping]] | None = None,
) -> dict[str, Any]:
    """`conversation_bill` of a replay: turn k's raw and forwarded bodies sent at times[k], its
    summary calls (turn, body) SUMMARY_DELAY later, the keep-alive `pings` as they fall."""
    sent = [
        *(Sent(at, b) for at, b in zip(times, forwarded)),
        *(Sent(times[k] + SUMMARY_DELAY, b) for k, b in summaries),
    ]
    return conversation_bill(
        biller,
        raw=[Sent(at, b) for at, b in zip(times, raw)],
        forwarded=sorted(sent, key=lambda s: s.at),
        pings=[Sent(p.at, forwarded[p.turn]) for p in pings],
        sweep={m: [Sent(p.at, forwarded[p.turn]) for p in ps] for m, ps in (sweep or {}).items()},
    )


def summed(bills: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The figures of several conversations summed, each also as a share of `raw_uncached`, and
    the conversations billed more through the proxy than their raw history with caching."""
    out: dict[str, Any] = {k: sum(b[k] for b in bills) for k in FIGURES}
    out["pings"] = sum(b.get("pings", 0) for b in bills)
    base = out["raw_uncached"] or 1.0
    out["ratios"] = {k: out[k] / base for k in FIGURES}
    out["proxy_vs_raw_cached"] = out["proxy_cached"] / out["raw_cached"] if out["raw_cached"] else 1.0
    out["keepalive_vs_cached"] = out["proxy_keepalive"] / out["proxy_cached"] if out["proxy_cached"] else 1.0
    out["above_raw"] = sum(1 for b in bills if b["proxy_cached"] > b["raw_cached"] + 1e-9)
    return out


def table(bill: dict[str, Any], *, pricing: str, gaps: str) -> str:
    r = bill["ratios"]
    return (
        f"billed ({pricing} prompt cache, turn gaps {gaps}), in input tokens and as a share of the raw history "
        f"uncached: raw uncached {bill['raw_uncached']:,.0f} (1.000), raw with client caching "
        f"{bill['raw_cached']:,.0f} ({r['raw_cached']:.3f}), through the proxy without cache control "
        f"{bill['proxy_uncached']:,.0f} ({r['proxy_uncached']:.3f}), with the proxy's cache control "
        f"{bill['proxy_cached']:,.0f} ({r['proxy_cached']:.3f}), and keep-alive pings ({bill['pings']}) "
        f"{bill['proxy_keepalive']:,.0f} ({r['proxy_keepalive']:.3f}), floor {r['floor']:.3f}; "
        f"{bill['above_raw']} conversation(s) billed above their raw history with caching"
    )


DEFAULT = "30s"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
MAX_SECONDS = 7 * 24 * 3600.0


class GapsError(Failure, ValueError):
    kind = Kind.BAD_REQUEST

    """A `--turn-gaps` spec that cannot be read; the message says what is expected."""


def duration(text: str) -> float:
    match = _DURATION.match(text.strip())
    if not match:
        raise GapsError(f"{text!r} is not a duration (e.g. 30s, 90, 5m, 1h)")
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if not 0 <= seconds <= MAX_SECONDS:
        raise GapsError(f"{text!r}: a gap is at most 7 days")
    return seconds


@dataclass(frozen=True)
class Gaps:
    """A parsed spec: a base gap (`exp`: its mean, drawn exponentially), and idle pauses
    (probability, seconds) replacing it."""

    text: str
    base: float
    exponential: bool = False
    pauses: tuple[tuple[float, float], ...] = ()

    def draw(self, rng: random.Random) -> float:
        roll = rng.random()
        for probability, seconds in self.pauses:
            if roll < probability:
                return seconds
            roll -= probability
        if self.exponential:
            return -self.base * math.log(1.0 - rng.random())
        return self.base

    def times(self, turns: int, *, seed: int = 0, index: int = 0) -> list[float]:
        """When each of `turns` turns is sent: the first at 0, then one gap after another."""
        rng = random.Random(f"{seed}:{index}")
        out, now = [], 0.0
        for k in range(turns):
            if k:
                now += self.draw(rng)
            out.append(now)
        return out


def parse(text: str) -> Gaps:
    spec = text.strip()
    if spec.startswith("exp:"):
        return Gaps(spec, duration(spec[4:]), exponential=True)
    if spec.startswith("mix:"):
        base, *terms = spec[4:].split(",")
        pauses = []
        for term in terms:
            probability, at, seconds = term.partition("@")
            try:
                p = float(probability)
            except ValueError:
                p = -1.0
            if not at or not 0 <= p <= 1:
                raise GapsError(f"{term!r}: expected probability@duration, e.g. 0.1@600s")
            pauses.append((p, duration(seconds)))
        if sum(p for p, _ in pauses) > 1 + 1e-9:
            raise GapsError(f"{spec!r}: the pauses' probabilities sum to more than 1")
        return Gaps(spec, duration(base), pauses=tuple(pauses))
    return Gaps(spec, duration(spec))


def _seconds(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def trace_times(messages: Sequence[Any], positions: Sequence[int]) -> list[float] | None:
    """The trace's own send times of the turns whose answers stand at `positions` (the last
    message before each answer carries a `timestamp`), from 0; None unless every turn has one
    and they never go back."""
    out: list[float] = []
    for k in positions:
        before = messages[k - 1] if k > 0 else None
        at = _seconds(before.get("timestamp")) if isinstance(before, dict) else None
        if at is None or (out and at < out[-1]):
            return None
        out.append(at)
    return [t - out[0] for t in out] if out else []
