"""`replay --live`: recorded turns sent to a real model, raw and through the proxy, and its next
actions compared.

For each selected turn of each selected trace (`--sample N` traces chosen with `--seed`, the
first `--max-turns` turns of each), the recorded request (`proxy.replay._runner`) is sent,
non-streamed, to the upstream with the caller's key (the raw arm), then the same body through
the proxy (the proxy arm): an in-process proxy served by uvicorn on a loopback port in front of
that upstream (its store in the output folder), or `--target URL` a running one. The offload
settings given go as X-Offload-* headers of the proxy arm; each trace is one X-Offload-Session.
One request at a time, in order.

Before anything is sent: the number of requests and an estimate of their cost (the requests'
tokens at the input price, the recorded answers' tokens at the output price, the price table's
entry for the model; no cache discount), and a question on a terminal (`--yes` skips it; without
a terminal, `--yes` is needed). Each answer is appended to the journal (`proxy.replay._live`)
as it comes; a rerun skips what it holds. 401 and 403 stop the run (one line); 429 and 5xx are
retried RETRIES times (after Retry-After, else 1, 2, 4 s), then the turn is counted as failed.
An answer larger than MAX_ANSWER_BYTES, or not whole within ANSWER_SECONDS, is a failed turn.
The key is sent, never printed nor written.

`replay --live`'s journal: one JSON line per turn and arm, appended as each answer comes.

Each record is keyed by the trace (its position in the file and its id), the turn (1-based), the
arm ("raw" or "proxy") and that arm's configuration (`arm_config`: a short hash of what decides
its answers: format, upstream, model, and for the proxy arm its settings or target; never the
key). A rerun with the same output folder skips the turns whose key is there; a record of
another configuration is kept in the file, apart: not skipped, not counted, reported. A line that
is not a record (a run killed mid-write) is skipped and counted.

Beside the turns, a "session" record per trace holds the tokens the proxy's statistics billed
in that trace's session, per call (`turn`, `summary`, `keepalive`; the last one read wins).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import random
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

import httpx2

from proxy.core.answers import KINDS, PARTS, Bill, Price
from proxy.core.settings import OffloadSettings
from proxy.core.tokens import counter_for_model
from proxy.replay._live_report import Action, AnswerError, TracePairs, action_of, report_of, table
from proxy.replay._runner import (
    WIRES,
    answers_of,
    load_conversations,
    message_tokens,
    request_body,
    requests_of,
    system_of,
)
from proxy.replay._target import (
    MAX_SESSION,
    PATHS,
    SESSION_HEADER,
    api_root,
    error_message,
    one_line,
    session_id,
    turn_headers,
)
from proxy.stats import PriceTable
from proxy.upstream.base_url import anthropic_base, base_url_problem, openai_base

DEFAULT_UPSTREAMS = {
    "chat": "https://api.openai.com/v1",
    "responses": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
}
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504, 529})  # 529: Anthropic's "overloaded"
REFUSED = frozenset({401, 403})
RETRIES = 3
BACKOFF = (1.0, 2.0, 4.0)
MAX_RETRY_AFTER = 60.0
TIMEOUT = httpx2.Timeout(600.0, connect=10.0)  # a turn through the proxy may wait for its summary
MAX_ANSWER_BYTES = 64 * 1024 * 1024  # of one answer, decoded: a larger one is a failed turn
ANSWER_SECONDS = 1800.0  # for one answer whole (an upstream trickling bytes forever is a failed turn)
STATS_WAIT = 10.0  # s the proxy's statistics are waited for (its recorder writes about once a second)


class LiveError(RuntimeError):
    """`replay --live` cannot go on; the message is one line."""


def upstream_of(args: argparse.Namespace, format: str) -> str:
    """`--upstream`, else the provider's API for `format`."""
    return getattr(args, "upstream", None) or DEFAULT_UPSTREAMS[format]


def upstream_problem(url: str, format: str) -> str | None:
    return base_url_problem(url, "anthropic" if format == "anthropic" else "openai")


def raw_url(upstream: str, format: str) -> str:
    """Where the raw arm POSTs a turn: the upstream's endpoint of `format`."""
    if format == "anthropic":
        return anthropic_base(upstream) + "/messages"
    return openai_base(upstream) + PATHS[format][len("/v1") :]


def setting_headers(args: argparse.Namespace) -> dict[str, str]:
    """The offload settings given (`--max-total-tokens 3000` …) as the proxy arm's X-Offload-* headers,
    checked as the proxy checks them (LiveError when one is invalid)."""
    values = {
        name: getattr(args, f"setting_{name}")
        for name in OffloadSettings.model_fields
        if getattr(args, f"setting_{name}", None) is not None
    }
    try:
        OffloadSettings(**values)
    except ValueError as exc:  # pydantic's ValidationError
        raise LiveError(one_line(f"invalid offload setting: {exc}")) from None
    return {"X-Offload-" + "-".join(p.capitalize() for p in name.split("_")): str(v) for name, v in values.items()}


# ---------------------------------------------------------------- what is sent


@dataclass(frozen=True)
class PlannedTurn:
    number: int  # 1-based
    body: dict[str, Any]
    input_tokens: int  # of the request, as the model's encoding counts its items and tools
    output_tokens: int  # of the recorded answer


@dataclass(frozen=True)
class PlannedTrace:
    position: int  # in the file, from 0
    id: str
    model: str
    turns: tuple[PlannedTurn, ...]


def chosen(count: int, *, sample: int | None, seed: int) -> list[int]:
    """The positions of the traces replayed: all, or `sample` of them drawn with `seed`, in file order."""
    if sample is None or sample >= count:
        return list(range(count))
    return sorted(random.Random(seed).sample(range(count), sample))


def plan(
    conversations: list[dict[str, Any]],
    *,
    format: str,
    model: str | None,
    sample: int | None,
    seed: int,
    max_turns: int | None,
) -> list[PlannedTrace]:
    """The traces and turns to send, each turn's body in `format` and its token counts."""
    traces = []
    for position in chosen(len(conversations), sample=sample, seed=seed):
        conv = conversations[position]
        trace_model = model or conv.get("model")
        if not isinstance(trace_model, str) or not trace_model:
            raise LiveError(f"trace {conv['id']!r} (line {position + 1}) names no model: pass --model")
        requests, tools = requests_of(conv, format)
        history, answers = answers_of(conv, format)
        system = system_of(conv, format)
        counter = counter_for_model(trace_model)
        tool_tokens = counter.text(json.dumps(tools)) if tools else 0
        last = min(len(requests), max_turns or len(requests))
        counted = message_tokens(history[: answers[last - 1][1]] if last else [], counter)  # once, not per turn
        before = [0]
        for n in counted:
            before.append(before[-1] + n)
        turns = []
        for k, (request, (start, end)) in enumerate(zip(requests[:last], answers), 1):
            body = request_body(request, format=format, model=trace_model, tools=tools, system=system)
            # turn k's request is the history before its answer (`proxy.replay._runner.answers_of`)
            turns.append(PlannedTurn(k, body, before[start] + tool_tokens, max(1, before[end] - before[start])))
        traces.append(PlannedTrace(position, str(conv["id"]), trace_model, tuple(turns)))
    return traces


@dataclass(frozen=True)
class Estimate:
    requests: int
    input_tokens: int
    output_tokens: int
    usd_per_arm: float  # the raw arm's turns to send, at the full input price
    skipped: int  # turn × arm already in the journal
    proxy_input_tokens: int = 0  # the raw history of the proxy arm's turns to send: its bound
    proxy_output_tokens: int = 0
    proxy_usd: float = 0.0


def estimate(traces: list[PlannedTrace], journal: Journal, prices: PriceTable) -> Estimate:
    requests = input_tokens = output_tokens = skipped = proxy_input = proxy_output = 0
    usd = proxy_usd = 0.0
    for trace in traces:
        price: Price = prices.price(trace.model)
        for turn in trace.turns:
            for arm in ("raw", "proxy"):
                if _answered(journal.done(position=trace.position, trace=trace.id, turn=turn.number, arm=arm)):
                    skipped += 1
                    continue
                requests += 1
                if arm == "raw":
                    input_tokens += turn.input_tokens
                    output_tokens += turn.output_tokens
                    usd += (turn.input_tokens * price.input + turn.output_tokens * price.output) / 1e6
                else:  # bounded by the raw history of the same turn (it forwards no more)
                    proxy_input += turn.input_tokens
                    proxy_output += turn.output_tokens
                    proxy_usd += (turn.input_tokens * price.input + turn.output_tokens * price.output) / 1e6
    return Estimate(requests, input_tokens, output_tokens, usd, skipped, proxy_input, proxy_output, proxy_usd)


def estimate_text(e: Estimate, *, traces: int, turns: int, upstream: str, proxy: str) -> str:
    lines = [
        f"replay --live: {traces} traces, {turns} turns: {e.requests} requests to send "
        f"(each turn raw to {upstream} and through {proxy}, the first of the two alternating; non-streamed, one at a time)"
    ]
    if e.skipped:
        lines.append(f"  {e.skipped} already answered in the journal: skipped")
    lines.append(
        f"  estimate, raw arm: ${e.usd_per_arm:.4f} ({e.input_tokens} input tokens at the full input "
        f"price, {e.output_tokens} output tokens as recorded; the price table's entry for the model)"
    )
    lines.append(
        f"  estimate, proxy arm: at most about ${e.proxy_usd:.4f} ({e.proxy_input_tokens} input tokens of "
        f"the raw history it forwards no more than, {e.proxy_output_tokens} output tokens), plus its "
        "summary calls and reload rounds"
    )
    return "\n".join(lines)


def confirm(text: str, *, yes: bool, stdin: TextIO, stdout: TextIO) -> None:
    """Print `text`; go on with `yes`, else ask on a terminal; LiveError when not confirmed."""
    print(text, file=stdout, flush=True)
    if yes:
        return
    if not stdin.isatty():
        raise LiveError("not a terminal, so not asked: pass --yes to send these requests (nothing was sent)")
    print("Send them? [y/N] ", end="", file=stdout, flush=True)
    answer = stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise LiveError("not confirmed: nothing was sent")


# ---------------------------------------------------------------- sending


@dataclass(frozen=True)
class Sent:
    """One POST's outcome after its retries: the response (None: no answer), the attempts made."""

    response: httpx2.Response | None
    attempts: int
    error: str | None = None
    unreachable: bool = False  # no connection could be made at all


def retry_delay(response: httpx2.Response | None, attempt: int) -> float:
    """Retry-After (seconds, capped) when the upstream said, else BACKOFF[attempt]."""
    if response is not None:
        try:
            return min(MAX_RETRY_AFTER, max(0.0, float(response.headers.get("retry-after", ""))))
        except ValueError:
            pass
    return BACKOFF[min(attempt, len(BACKOFF) - 1)]


class AnswerTooLarge(Exception):
    """An answer past MAX_ANSWER_BYTES (decoded)."""


async def _bounded(
    client: httpx2.AsyncClient, url: str, *, body: dict[str, Any], headers: dict[str, str]
) -> httpx2.Response:
    """The answer to one POST, read whole (its content coding undone) up to MAX_ANSWER_BYTES."""
    async with client.stream("POST", url, json=body, headers=headers) as response:
        kept = bytearray()
        async for chunk in response.aiter_bytes():
            kept += chunk
            if len(kept) > MAX_ANSWER_BYTES:
                raise AnswerTooLarge(f"the answer is larger than {MAX_ANSWER_BYTES} bytes")
    plain = [
        (k, v) for k, v in response.headers.multi_items() if k.lower() not in ("content-encoding", "content-length")
    ]
    return httpx2.Response(response.status_code, headers=plain, content=bytes(kept), request=response.request)


async def post(
    client: httpx2.AsyncClient,
    url: str,
    *,
    body: dict[str, Any],
    headers: dict[str, str],
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
) -> Sent:
    """POST `body`, retrying 429, 5xx and failed connections RETRIES times. An answer larger than
    MAX_ANSWER_BYTES, or not whole within ANSWER_SECONDS, is none (not retried)."""
    for attempt in range(RETRIES + 1):
        response: httpx2.Response | None = None
        try:
            response = await asyncio.wait_for(_bounded(client, url, body=body, headers=headers), ANSWER_SECONDS)
        except AnswerTooLarge as exc:
            return Sent(None, attempt + 1, one_line(f"no answer: {exc}"))
        except (TimeoutError, asyncio.TimeoutError):
            return Sent(None, attempt + 1, f"no answer: not whole within {ANSWER_SECONDS:g} s")
        except httpx2.TransportError as exc:
            error = one_line(f"no answer: {type(exc).__name__}: {exc}")
            if attempt == RETRIES:
                return Sent(None, attempt + 1, error, unreachable=isinstance(exc, httpx2.ConnectError))
        else:
            if response.status_code not in RETRY_STATUSES or attempt == RETRIES:
                return Sent(response, attempt + 1)
        await sleep(retry_delay(response, attempt))
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Arm:
    name: str  # "raw" or "proxy"
    url: str
    headers: dict[str, str]  # the credential (and for the proxy, the settings)
    config: str  # its configuration's hash (`live_journal.arm_config`)


def record_of(
    sent: Sent, *, arm: Arm, trace: PlannedTrace, turn: PlannedTurn, format: str, price: Price, api_key: str = ""
) -> dict[str, Any]:
    """The journal's record of one arm's answer to one turn: status, next action, bill, cost
    (`api_key`: the key sent, never kept, not even the part of it an error message cut leaves)."""
    record: dict[str, Any] = {
        "kind": "turn",
        "position": trace.position,
        "trace": trace.id,
        "turn": turn.number,
        "arm": arm.name,
        "config": arm.config,
        "model": trace.model,
        "attempts": sent.attempts,
        "status": 0,
        "action": None,
        "error": sent.error,
    }
    response = sent.response
    if response is None:
        return record
    record["status"] = response.status_code
    headers = response.headers
    for name, key in (
        ("x-offload-action", "offload_action"),
        ("x-offload-tokens-before", "tokens_before"),
        ("x-offload-tokens-after", "tokens_after"),
        ("x-offload-reload-rounds", "reload_rounds"),
    ):
        if headers.get(name) is not None:
            record[key] = headers[name]
    if response.status_code != 200:
        record["error"] = f"HTTP {response.status_code}: {error_message(response, secret=api_key)}"
        return record
    try:
        answer = response.json()
        record["action"] = action_of(answer, format).as_dict()
    except (ValueError, AnswerError) as exc:
        record["status"], record["error"] = -1, one_line(f"unreadable answer: {exc}")
        return record
    bill = WIRES[format].usage.of_answer(answer)
    record["bill"] = {**bill.tokens(), "answers": bill.answers}
    record["usd"] = round(bill.cost(price).total, 8)
    return record


def without_key(value: Any, key: str) -> Any:
    """`value` (a record: JSON values) with every occurrence of `key` in its strings replaced."""
    if not key:
        return value
    if isinstance(value, str):
        return value.replace(key, "[the key]")
    if isinstance(value, list):
        return [without_key(v, key) for v in value]
    if isinstance(value, dict):
        return {without_key(k, key): without_key(v, key) for k, v in value.items()}
    return value


def _answered(record: dict[str, Any] | None) -> bool:
    return record is not None and record.get("status") == 200


def proxy_session(proxy_config: str, trace: PlannedTrace) -> str:
    """The trace's X-Offload-Session: its id, prefixed by the configuration (a rerun continues it)."""
    return session_id(f"live-{proxy_config[:8]}-{trace.position}-{trace.id}"[:MAX_SESSION])


async def session_bill(
    client: httpx2.AsyncClient, root: str, *, session: str, headers: dict[str, str], turns: int
) -> dict[str, dict[str, int]] | None:
    """The tokens the proxy's statistics billed in `session`, per call (`turn`, `summary`,
    `keepalive`: `GET /v1/offload/sessions/{id}`'s `bill.calls`), once they hold `turns` turns
    of it; None when they do not within STATS_WAIT s."""
    # every `/` escaped: a trace id's `/../` segments would otherwise be resolved by the client,
    # sending the caller's key to any path of the target's host (its path prefix escaped too);
    # the server decodes the path before routing, so `{session:path}` still reads the whole id
    url = f"{root}/v1/offload/sessions/{quote(session, safe=':@')}"
    deadline = asyncio.get_running_loop().time() + STATS_WAIT
    while True:
        try:
            response = await client.get(url, headers=headers, timeout=10.0)
            body = response.json() if response.status_code == 200 else None
            if isinstance(body, dict) and isinstance(body.get("turns"), int) and body["turns"] >= turns:
                calls = body["bill"]["calls"]
                return {call: {part: int(calls[call]["tokens"].get(part, 0)) for part in PARTS} for call in KINDS}
        except (httpx2.TransportError, ValueError, KeyError, TypeError, AttributeError):
            pass
        if asyncio.get_running_loop().time() > deadline:
            return None
        await asyncio.sleep(0.25)


def measured(calls: dict[str, dict[str, int]], price: Price) -> dict[str, float]:
    """A session's bill per call (`session_bill`) in dollars at `price`."""
    return {
        call: round(Bill(**{p: tokens.get(p, 0) for p in PARTS}).cost(price).total, 8) for call, tokens in calls.items()
    }


@dataclass(frozen=True)
class Proxy:
    """Where the proxy arm goes, and how to let it finish a trace's work (its background
    summaries, its statistics) before they are read."""

    url: str
    settle: Callable[[], Awaitable[None]]


async def _nothing() -> None:
    return None


@contextlib.asynccontextmanager
async def in_process_proxy(*, upstream: str, format: str, data_dir: Path) -> AsyncIterator[Proxy]:
    """A proxy in front of `upstream`, served by uvicorn on a loopback port of its own."""
    import uvicorn

    from proxy.config import ServerSettings
    from proxy.http.app import create_app

    target = {"anthropic_upstream": upstream} if format == "anthropic" else {"upstream": upstream}
    # the server's defaults, not the environment's OFFLOAD_* (the run's configuration would not
    # see them): the settings given go as headers
    settings = ServerSettings(
        **target,  # type: ignore[arg-type]
        data_dir=data_dir,
        log_level="warning",
        _env_prefix="OFFLOAD_REPLAY_LIVE_PROXY_",
    )
    app = create_app(settings)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            log_level="warning",
            access_log=False,
            lifespan="on",
            server_header=False,
            date_header=False,
        )
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()  # its exception
            raise LiveError("the in-process proxy did not start")
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]

    async def settle() -> None:  # the summaries it is making, then its statistics written
        services = app.state.services
        await services.summaries.idle()
        await services.recorder.flush(final=True)

    try:
        yield Proxy(f"http://127.0.0.1:{port}", settle)
    finally:
        server.should_exit = True
        await task


# ---------------------------------------------------------------- the command


@dataclass(frozen=True)
class LiveRun:
    """What one `replay --live` run needs (the arguments, resolved and checked)."""

    file: Path
    out: Path
    format: str
    upstream: str
    target: str | None
    api_key: str
    model: str | None
    settings: dict[str, str]  # X-Offload-* headers of the proxy arm
    sample: int | None
    seed: int
    max_turns: int | None
    yes: bool
    prices: PriceTable

    def configs(self) -> dict[str, str]:
        raw = {"format": self.format, "upstream": self.upstream, "model": self.model or "the trace's"}
        proxy = {**raw, "proxy": api_root(self.target) if self.target else "in-process", "settings": self.settings}
        return {"raw": arm_config(raw), "proxy": arm_config(proxy)}


def _refused(record: dict[str, Any], url: str) -> LiveError:
    return LiveError(
        f"the key was refused ({record['error']}) on the {record['arm']} arm at {url}, "
        f"{record['trace']} turn {record['turn']}: stopped; check --api-key / the key's variable"
    )


async def send_all(
    run: LiveRun, traces: list[PlannedTrace], journal: Journal, *, to: Proxy, tick: Callable[[], None] = lambda: None
) -> None:
    """Every turn not in the journal, raw and through the proxy (which goes first alternates);
    after each trace, what the proxy's statistics billed in the trace's session (a journal record)."""
    configs = run.configs()
    credential = {k: v for k, v in turn_headers(run.format, run.api_key, "").items() if k != SESSION_HEADER}
    raw = Arm("raw", raw_url(run.upstream, run.format), credential, configs["raw"])
    proxy = api_root(to.url)
    async with httpx2.AsyncClient(timeout=TIMEOUT) as client:
        for trace in traces:
            session = proxy_session(configs["proxy"], trace)
            through = Arm(
                "proxy",
                proxy + PATHS[run.format],
                {**turn_headers(run.format, run.api_key, session), **run.settings},
                configs["proxy"],
            )
            price = run.prices.price(trace.model)
            sent_here = 0
            for turn in trace.turns:
                # which arm goes first alternates: the second reads the prompt cache the first wrote
                # for the prefix they share, so neither arm is always the one billed for the writes
                for arm in (raw, through) if turn.number % 2 == 1 else (through, raw):
                    if _answered(journal.done(position=trace.position, trace=trace.id, turn=turn.number, arm=arm.name)):
                        continue
                    sent = await post(client, arm.url, body=turn.body, headers=arm.headers)
                    record = record_of(
                        sent, arm=arm, trace=trace, turn=turn, format=run.format, price=price, api_key=run.api_key
                    )
                    record = without_key(record, run.api_key)  # an upstream may quote the key back: never kept
                    if record["status"] in REFUSED:
                        raise _refused(record, run.upstream if arm.name == "raw" else proxy)
                    if sent.unreachable:  # not this turn's failure: nothing more would get through
                        where = f"the upstream at {run.upstream}" if arm.name == "raw" else f"the proxy at {proxy}"
                        raise LiveError(f"cannot reach {where} ({record['error']}): stopped")
                    journal.append(record)
                    sent_here += arm.name == "proxy"
                tick()
            if sent_here:  # the session's bill so far (a rerun's too: the same session and store)
                answered = sum(
                    1
                    for r in journal.turns.values()
                    if r["arm"] == "proxy"
                    and _answered(r)
                    and (r["position"], r["trace"], r["config"]) == (trace.position, trace.id, through.config)
                )
                await to.settle()
                calls = await session_bill(client, proxy, session=session, headers=credential, turns=answered)
                if calls is not None:
                    journal.append(
                        {
                            "kind": "session",
                            "position": trace.position,
                            "trace": trace.id,
                            "arm": "proxy",
                            "config": through.config,
                            "calls": calls,
                        }
                    )


def pairs_of(traces: list[PlannedTrace], journal: Journal, prices: PriceTable) -> list[TracePairs]:
    """Each selected trace's turns as the journal holds them (this run's configuration), and
    its session's measured bill at the trace model's price."""
    out = []
    proxy_config = journal.configs["proxy"]
    for trace in traces:
        pairs = TracePairs(trace.position, trace.id)
        for turn in trace.turns:
            pairs.turns.append(
                tuple(  # type: ignore[arg-type]
                    journal.done(position=trace.position, trace=trace.id, turn=turn.number, arm=arm)
                    for arm in ("raw", "proxy")
                )
            )
        session = journal.sessions.get((trace.position, trace.id, proxy_config))
        pairs.measured = measured(session["calls"], prices.price(trace.model)) if session else None
        out.append(pairs)
    return out


async def run_live(run: LiveRun, *, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout) -> dict[str, Any]:
    """The `replay --live` command: plan, estimate and ask, send, report (table and report.json)."""
    problem = upstream_problem(run.upstream, run.format)
    if problem:
        raise LiveError(f"--upstream: {problem}")
    conversations = load_conversations(run.file)
    traces = plan(
        conversations, format=run.format, model=run.model, sample=run.sample, seed=run.seed, max_turns=run.max_turns
    )
    try:
        run.out.mkdir(parents=True, exist_ok=True)
        journal = Journal.open(run.out, run.configs())
    except OSError as exc:
        raise LiveError(one_line(f"--out {run.out}: cannot use it ({exc})")) from None
    e = estimate(traces, journal, run.prices)
    turns = sum(len(t.turns) for t in traces)
    proxy_label = run.target or "an in-process proxy"
    if journal.other_configs:
        print(
            f"replay --live: {run.out / 'live.jsonl'} holds {journal.other_configs} answers of another "
            f"configuration: kept apart (neither reused nor counted)",
            file=stdout,
        )
    if e.requests:
        confirm(
            estimate_text(e, traces=len(traces), turns=turns, upstream=run.upstream, proxy=proxy_label),
            yes=run.yes,
            stdin=stdin,
            stdout=stdout,
        )
        from proxy.replay._report import progress_bar

        bar = progress_bar(turns)
        try:
            tick = (lambda: bar.update(1)) if bar else (lambda: None)
            if run.target:
                await send_all(run, traces, journal, to=Proxy(run.target, _nothing), tick=tick)
            else:
                async with in_process_proxy(
                    upstream=run.upstream, format=run.format, data_dir=run.out / f"proxy-store-{run.configs()['proxy']}"
                ) as local:
                    await send_all(run, traces, journal, to=local, tick=tick)
        finally:
            if bar:
                bar.close()
    else:
        print(
            f"replay --live: every selected turn is answered in {run.out / 'live.jsonl'}: nothing to send", file=stdout
        )
    header = {
        "live": True,
        "format": run.format,
        "upstream": run.upstream,
        "proxy": proxy_label,
        "model": run.model or "the trace's",
        "settings": run.settings,
        "sample": run.sample,
        "seed": run.seed,
        "max_turns": run.max_turns,
        "streamed": False,
        "configs": run.configs(),
        "journal": str(run.out / "live.jsonl"),
        "kept_apart": journal.other_configs,
        "unreadable_lines": journal.unreadable,
    }
    report = report_of(pairs_of(traces, journal, run.prices), header=header)
    print(table(report), file=stdout)
    run.out.mkdir(parents=True, exist_ok=True)
    (run.out / "report.json").write_text(json.dumps(report, indent=2))
    print(f"wrote {run.out / 'report.json'}, {run.out / 'live.jsonl'}", file=stdout)
    o = report["overall"]
    if o["turns"] and not o["compared"]:
        raise LiveError(
            f"no turn was answered by both arms ({o['failed']} of {o['turns']} failed); first: {o['first_error']}"
        )
    return report


FILE = "live.jsonl"
ARMS = ("raw", "proxy")


def arm_config(values: dict[str, Any]) -> str:
    """A short, stable hash of an arm's configuration (a JSON object of plain values)."""
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:16]


def turn_key(record: dict[str, Any]) -> tuple[int, str, int, str, str]:
    return (
        int(record["position"]),
        str(record["trace"]),
        int(record["turn"]),
        str(record["arm"]),
        str(record["config"]),
    )


TEXTS = ("error", "offload_action", "tokens_before", "tokens_after", "reload_rounds")  # as `record_of` writes them


def _number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _check_figures(record: dict[str, Any]) -> None:
    """ValueError unless a turn record's figures are of the types the report reads."""
    bill, usd = record.get("bill"), record.get("usd")
    if type(record.get("status")) is not int or (usd is not None and not _number(usd)):
        raise ValueError("not a status or a cost")
    if bill is not None and not (isinstance(bill, dict) and all(type(n) is int for n in bill.values())):
        raise ValueError("not token counts")
    if not all(record.get(name) is None or isinstance(record[name], str) for name in TEXTS):
        raise ValueError("not text")


@dataclass
class Journal:
    """The records of one output folder: those of the configurations of this run, by key."""

    path: Path
    configs: dict[str, str]  # arm → its configuration hash in this run
    turns: dict[tuple[int, str, int, str, str], dict[str, Any]] = field(default_factory=dict)
    sessions: dict[tuple[int, str, str], dict[str, Any]] = field(default_factory=dict)
    other_configs: int = 0  # answers (turn records) of another configuration, kept apart
    unreadable: int = 0  # lines that are not a record

    @classmethod
    def open(cls, out: Path, configs: dict[str, str]) -> Journal:
        journal = cls(out / FILE, configs)
        if journal.path.exists():
            for line in journal.path.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.strip():
                    journal._read(line)
        return journal

    def _read(self, line: str) -> None:
        try:
            record = json.loads(line)
            kind, arm, config = record["kind"], record["arm"], record["config"]
            if self.configs.get(arm) != config:
                self.other_configs += kind == "turn"
            elif kind == "turn":
                if record.get("action") is not None:
                    Action.from_dict(record["action"])  # what the report reads back
                _check_figures(record)
                self.turns[turn_key(record)] = record
            elif kind == "session":
                calls = record["calls"]
                if not all(isinstance(n, int) for c in calls.values() for n in c.values()):
                    raise ValueError("not token counts")
                self.sessions[(int(record["position"]), str(record["trace"]), str(config))] = record
            else:
                self.unreadable += 1
        except (ValueError, KeyError, TypeError, AttributeError):
            self.unreadable += 1

    def done(self, *, position: int, trace: str, turn: int, arm: str) -> dict[str, Any] | None:
        """The record of this turn and arm in this run's configuration, if any."""
        return self.turns.get((position, trace, turn, arm, self.configs[arm]))

    def append(self, record: dict[str, Any]) -> None:
        """Write one record (a line, flushed) and keep it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
        if record["kind"] == "turn":
            self.turns[turn_key(record)] = record
        else:
            self.sessions[(int(record["position"]), str(record["trace"]), str(record["config"]))] = record
