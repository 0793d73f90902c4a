"""`replay --target URL`: send every turn of the conversations to a running proxy over HTTP.

The turns are the requests the in-process replay builds (`proxy.replay._runner`), POSTed
non-streaming to the proxy's `/v1/chat/completions`, `/v1/responses` or `/v1/messages` with the
caller's key and `X-Offload-Session: <conversation id>`, so the traffic lands on that proxy's
statistics and dashboard, one session per conversation. The proxy's own upstream answers them.

Conversations run concurrently (`--concurrency`); the turns of one run in order. What the proxy
did is read from its response headers (`X-Offload-Tokens-Before`, `X-Offload-Tokens-After`,
`X-Offload-Action`, `X-Offload-Reload-Rounds`); a turn answered with another status than 200 is
counted and reported, never fatal. A proxy that cannot be reached at all, or a run in which every turn failed, is a
`TargetError` (one line, exit status 1).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx2

from proxy.core.settings import IDENT_PATTERN
from proxy.replay._report import NAME_WIDTH, progress_bar, unique_labels
from proxy.replay._runner import load_conversations, request_body, requests_of, system_of, turns_of

PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}
ANTHROPIC_VERSION = "2023-06-01"
SESSION_HEADER = "X-Offload-Session"
DEFAULT_CONCURRENCY = 4
MAX_SESSION = 128  # IDENT_PATTERN's length limit
TIMEOUT = httpx2.Timeout(600.0, connect=10.0)  # a turn may wait for its summary upstream
MAX_ERROR = 300  # characters of an error message kept
_session = re.compile(IDENT_PATTERN)


class TargetError(RuntimeError):
    """The replay against a running proxy cannot run or wholly failed; the message is one line."""


def target_url(value: str) -> str:
    """argparse type of `--target`: an http(s) URL with a host."""
    url = value.strip()
    if not re.match(r"^https?://[^/\s]+", url):
        raise argparse.ArgumentTypeError(f"expected the proxy's URL, e.g. http://127.0.0.1:8080, got {value!r}")
    return url


def api_root(target: str) -> str:
    """The proxy's root URL: `target` without trailing slashes and without a trailing `/v1`."""
    root = target.strip().rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")].rstrip("/")
    return root


def endpoint(root: str, format: str) -> str:
    """The URL a turn of `format` is POSTed to."""
    return api_root(root) + PATHS[format]


def session_id(conversation_id: str) -> str:
    """`conversation_id` as an `X-Offload-Session` value (IDENT_PATTERN): itself when it fits,
    else its characters outside the pattern as `_`, cut to fit, with a short hash of the original
    so two ids that clean up alike stay two sessions."""
    if _session.match(conversation_id):
        return conversation_id
    clean = "".join(c if _session.match(c) else "_" for c in conversation_id)
    digest = hashlib.sha256(conversation_id.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{clean[: MAX_SESSION - len(digest) - 1]}-{digest}"


def session_ids(conversation_ids: list[str]) -> list[str]:
    """One session per conversation: `session_id` of each, a repeated one numbered (`-2`, `-3`…)."""
    seen: set[str] = set()
    out = []
    for cid in conversation_ids:
        base = session_id(cid)
        name, n = base, 1
        while name in seen:
            n += 1
            suffix = f"-{n}"
            name = base[: MAX_SESSION - len(suffix)] + suffix
        seen.add(name)
        out.append(name)
    return out


def turn_headers(format: str, api_key: str, session: str) -> dict[str, str]:
    """The headers of every turn: the credential as the format's clients send it, and the session."""
    if format == "anthropic":
        headers = {"x-api-key": api_key, "anthropic-version": ANTHROPIC_VERSION}
    else:
        headers = {"Authorization": f"Bearer {api_key}"}
    return {**headers, SESSION_HEADER: session}


def api_key_of(args: argparse.Namespace) -> str | None:
    """`--api-key`, else $ANTHROPIC_API_KEY (format anthropic) or $OPENAI_API_KEY."""
    env = "ANTHROPIC_API_KEY" if getattr(args, "format", "chat") == "anthropic" else "OPENAI_API_KEY"
    return args.api_key or os.environ.get(env) or None


@dataclass
class TurnResult:
    status: int  # 0: no answer (the connection failed or timed out)
    tokens_before: int | None = None
    tokens_after: int | None = None
    action: str | None = None
    error: str | None = None
    reload_rounds: int | None = None  # X-Offload-Reload-Rounds: absent when nothing was reloadable


@dataclass
class Sent:
    """One conversation as sent."""

    id: str
    session: str
    turns: list[TurnResult] = field(default_factory=list)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def error_message(response: httpx2.Response, *, secret: str = "") -> str:
    """The message of an error answer (OpenAI's and Anthropic's `error.message`), else its text;
    `secret` (the key sent) replaced before the message is cut, so no part of it is kept."""
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else error if isinstance(error, str) else None
    text = str(message or response.text.strip() or response.reason_phrase)
    return one_line(text.replace(secret, "[the key]") if secret else text)


def one_line(text: str) -> str:
    """`text` on one line, at most MAX_ERROR characters."""
    return " ".join(text.split())[:MAX_ERROR]


def turn_result(response: httpx2.Response) -> TurnResult:
    headers = response.headers
    result = TurnResult(
        response.status_code,
        _int(headers.get("x-offload-tokens-before")),
        _int(headers.get("x-offload-tokens-after")),
        headers.get("x-offload-action"),
        reload_rounds=_int(headers.get("x-offload-reload-rounds")),
    )
    if response.status_code != 200:
        result.error = f"HTTP {response.status_code}: {error_message(response)}"
    return result


class Sender:
    """Sends the turns of conversations to one proxy."""

    def __init__(
        self,
        client: httpx2.AsyncClient,
        *,
        target: str,
        format: str,
        model: str,
        api_key: str,
        concurrency: int,
        tick: Callable[[], object] = lambda: None,
    ) -> None:
        self.client, self.url, self.format, self.model = client, endpoint(target, format), format, model
        self.api_key, self.tick = api_key, tick
        self.slots = asyncio.Semaphore(concurrency)

    async def conversation(self, conv: dict[str, Any], session: str) -> Sent:
        """Its turns in order, one request each."""
        sent = Sent(str(conv["id"]), session)
        requests, tools = requests_of(conv, self.format)
        system = system_of(conv, self.format)
        headers = turn_headers(self.format, self.api_key, session)
        async with self.slots:
            for request in requests:
                body = request_body(request, format=self.format, model=self.model, tools=tools, system=system)
                sent.turns.append(await self.turn(body, headers))
                self.tick()
        return sent

    async def turn(self, body: dict[str, Any], headers: dict[str, str]) -> TurnResult:
        try:
            response = await self.client.post(self.url, json=body, headers=headers)
        except httpx2.TransportError as exc:
            return TurnResult(0, error=one_line(f"no answer: {type(exc).__name__}: {exc}"))
        return turn_result(response)


async def check_reachable(client: httpx2.AsyncClient, target: str) -> None:
    """A connection to the proxy (any answer to `GET /healthz` will do), else TargetError."""
    url = api_root(target) + "/healthz"
    try:
        await client.get(url, timeout=10.0)
    except httpx2.TransportError as exc:
        reason = str(exc) or type(exc).__name__
        raise TargetError(one_line(f"cannot reach the proxy at {api_root(target)} ({reason})")) from None


def _totals(turns: list[TurnResult]) -> dict[str, Any]:
    raw = sum(t.tokens_before or 0 for t in turns)
    forwarded = sum(t.tokens_after or 0 for t in turns)
    failed = [t for t in turns if t.status != 200]
    # answered with no X-Offload-Tokens-Before: forwarded unchanged and unreported (observe mode, a
    # holdout's control session, X-Offload-Mode: off): not in raw/forwarded, counted apart
    unmanaged = sum(1 for t in turns if t.status == 200 and t.tokens_before is None)
    return {
        "turns": len(turns),
        "answered": len(turns) - len(failed),
        "errors": len(failed),
        "unmanaged": unmanaged,
        "raw_tokens": raw,
        "forwarded_tokens": forwarded,
        "forwarded_ratio": round(forwarded / raw, 4) if raw else None,
        "actions": dict(sorted(Counter(t.action for t in turns if t.action).items())),
        "reload_rounds": sum(t.reload_rounds or 0 for t in turns),
        "errors_by_status": {str(s): n for s, n in sorted(Counter(t.status for t in failed).items())},
        "first_error": failed[0].error if failed else None,
    }


def report_of(sent: list[Sent], *, target: str, format: str, model: str, concurrency: int) -> dict[str, Any]:
    """report.json: overall and per conversation (with each turn's status and headers)."""
    conversations = [
        {
            "id": s.id,
            "session": s.session,
            **_totals(s.turns),
            "per_turn": [{k: v for k, v in asdict(t).items() if v is not None} for t in s.turns],
        }
        for s in sent
    ]
    overall = {"conversations": len(sent), **_totals([t for s in sent for t in s.turns])}
    first = next(((s, k) for s in sent for k, t in enumerate(s.turns) if t.status != 200), None)
    if first is not None:
        overall["first_error"] = f"{first[0].id} turn {first[1] + 1}: {first[0].turns[first[1]].error}"
    return {
        "target": api_root(target),
        "format": format,
        "model": model,
        "concurrency": concurrency,
        "overall": overall,
        "conversations": conversations,
    }


def _actions(actions: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in actions.items()) or "-"


def table(report: dict[str, Any]) -> str:
    """The printed summary: one row per conversation, the totals, the actions and the errors."""
    header = (
        f"{'conversation':{NAME_WIDTH}} {'turns':>5} {'ok':>5} {'raw':>10} {'forwarded':>10} {'ratio':>6} "
        f"{'errors':>6} {'reloads':>7}  actions"
    )
    rows = [header, "-" * len(header)]

    def row(name: str, r: dict[str, Any]) -> str:
        ratio = f"{r['forwarded_ratio']:.3f}" if r["forwarded_ratio"] is not None else "-"
        return (
            f"{name:{NAME_WIDTH}} {r['turns']:>5} {r['answered']:>5} {r['raw_tokens']:>10} "
            f"{r['forwarded_tokens']:>10} {ratio:>6} {r['errors']:>6} {r['reload_rounds']:>7}  {_actions(r['actions'])}"
        )

    names = unique_labels([c["id"] for c in report["conversations"]], NAME_WIDTH)
    rows += [row(name, c) for name, c in zip(names, report["conversations"])]
    o = report["overall"]
    rows += ["-" * len(header), row("OVERALL", o)]
    ratio = f"{o['forwarded_ratio']:.3f}" if o["forwarded_ratio"] is not None else "-"
    rows.append(
        f"{o['conversations']} conversations, {o['turns']} turns to {report['target']} "
        f"({report['format']}, model {report['model']}): raw tokens {o['raw_tokens']}, forwarded tokens "
        f"{o['forwarded_tokens']}, forwarded/raw {ratio} (the proxy's X-Offload-Tokens-Before/-After)"
    )
    rows.append(
        f"actions: {_actions(o['actions'])}; reload rounds the model ran through the proxy: "
        f"{o['reload_rounds']} (X-Offload-Reload-Rounds)"
    )
    if o["unmanaged"]:
        rows.append(
            f"unmanaged: {o['unmanaged']} of {o['answered']} answered turns carried no X-Offload-* headers "
            "(forwarded unchanged: observe mode, a holdout's control sessions, or mode off) and are not in "
            "the raw and forwarded tokens above; the proxy's statistics and dashboard count them"
        )
    if o["errors"]:
        statuses = ", ".join(
            f"{'no answer' if s == '0' else 'HTTP ' + s} × {n}" for s, n in o["errors_by_status"].items()
        )
        rows.append(f"errors: {o['errors']} of {o['turns']} turns ({statuses}); first: {o['first_error']}")
    else:
        rows.append("errors: 0")
    return "\n".join(rows)


async def send_all(
    conversations: list[dict[str, Any]],
    *,
    target: str,
    format: str,
    model: str,
    api_key: str,
    concurrency: int,
    tick: Callable[[], object] = lambda: None,
    transport: httpx2.AsyncBaseTransport | None = None,
) -> list[Sent]:
    """Every conversation's turns to the proxy at `target`, `concurrency` conversations at a time,
    in input order in the result. TargetError when the proxy cannot be reached."""
    limits = httpx2.Limits(max_connections=concurrency + 1, max_keepalive_connections=concurrency + 1)
    async with httpx2.AsyncClient(timeout=TIMEOUT, limits=limits, transport=transport) as client:
        await check_reachable(client, target)
        sender = Sender(
            client, target=target, format=format, model=model, api_key=api_key, concurrency=concurrency, tick=tick
        )
        sessions = session_ids([str(c["id"]) for c in conversations])
        return list(await asyncio.gather(*(sender.conversation(c, s) for c, s in zip(conversations, sessions))))


async def run_target(args: argparse.Namespace) -> dict[str, Any]:
    """The `replay --target` command: send, print the table, write report.json (with --out)."""
    args = argparse.Namespace(**{**vars(args), "model": getattr(args, "model", None) or "gpt-4o"})
    conversations = load_conversations(Path(args.file))
    format = getattr(args, "format", None) or "chat"
    api_key = api_key_of(args)
    if not api_key:  # checked with the arguments; kept here for callers that skip that check
        raise TargetError("--target needs --api-key (or $OPENAI_API_KEY / $ANTHROPIC_API_KEY)")
    concurrency = args.concurrency or DEFAULT_CONCURRENCY
    total = sum(len(turns_of(c["messages"])) for c in conversations)
    bar = progress_bar(total)
    try:
        sent = await send_all(
            conversations,
            target=args.target,
            format=format,
            model=args.model,
            api_key=api_key,
            concurrency=concurrency,
            tick=(lambda: bar.update(1)) if bar else (lambda: None),
        )
    finally:
        if bar:
            bar.close()
    report = report_of(sent, target=args.target, format=format, model=args.model, concurrency=concurrency)
    print(table(report))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps(report, indent=2))
        print(f"wrote {out / 'report.json'}")
    o = report["overall"]
    if o["turns"] and not o["answered"]:
        raise TargetError(f"every turn failed ({o['errors']} of {o['turns']}); first: {o['first_error']}")
    return report
