"""`offload-proxy demo` (scripts/demo): the proxy at work with no key and no network.

Starts the bundled fake upstream (`proxy.demo.fake_upstream --reload-once`: no model behind it;
it answers "ok", and calls `context_reload` once for each offloaded tool result it sees) and a
proxy on the embedded store in a temporary folder, both on free loopback ports, with an admin
token made for this run. It then replays the bundled agent conversation (`conversation.jsonl`)
into the proxy in each wire format, as `replay --target` sends turns (`proxy.replay._target`),
one session per format; prints each turn's raw and forwarded tokens, the proxy's action and the
reload rounds (read back from the statistics API), then the totals; and leaves the proxy and
its dashboard running until Ctrl-C or SIGTERM (`--no-wait`: stops after the tables, and prints
no dashboard URL nor token). Its servers run in sessions of their own (a terminal's Ctrl-C
reaches the demo only, which stops them); on Linux they also get SIGTERM when the demo dies,
even killed (PR_SET_PDEATHSIG).

What `offload-proxy demo` prints: a turn-by-turn table per format and the totals.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import functools
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import httpx2

from proxy.replay import PATHS, TurnResult, answer_positions, load_conversations, send_all, turns_of

STEP_WIDTH = 34  # the "last step" column


@dataclass
class FormatRun:
    """One format's replay of the conversation: what each turn's answer said, and the statistics' rows."""

    format: str
    path: str
    session: str
    turns: list[TurnResult]
    reloads: list[int | None] = field(default_factory=list)  # per turn, from the statistics (None: not read)


def steps(messages: list[Any]) -> list[str]:
    """Per turn, what the agent had just done: the tool call the turn's request ends with the result of."""
    out = []
    for k in answer_positions(messages):
        last = messages[k - 1]
        out.append(_step(messages, k - 1) if last.get("role") == "tool" else f"(the {last.get('role')}'s message)")
    return out


def _step(messages: list[Any], index: int) -> str:
    call_id = messages[index].get("tool_call_id")
    for message in reversed(messages[:index]):
        for call in message.get("tool_calls") or ():
            if call.get("id") == call_id:
                arguments = json.loads(call["function"]["arguments"] or "{}")
                shown = arguments.get("command") or arguments.get("path") or ""
                return f"{call['function']['name']} {shown}"
    return "tool"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _ratio(after: int, before: int) -> str:
    return f"{after / before:.3f}" if before else "-"


def _action(turn: TurnResult) -> str:
    return turn.action or (f"HTTP {turn.status}" if turn.status != 200 else "-")


def _reloads(run: FormatRun, k: int) -> str:
    return str(run.reloads[k]) if k < len(run.reloads) and run.reloads[k] is not None else "?"


# What each part of an action (`X-Offload-Action`, split at `+`) means, for the legend under the table
ACTION_MEANINGS = {
    "none": "forwarded as received",
    "compact": "large tool results stored, a preview with ref= forwarded in their place",
    "compress-pending": "a summary of older turns being made in the background, the turn forwarded without it",
    "compress": "older turns forwarded as their summary",
    "emulated-compaction": "the provider's compaction applied by the proxy",
    "context-edits": "the provider's clearing edits applied by the proxy",
    "HTTP": "the proxy's answer was not a 200",
    "-": "answered without an X-Offload-Action",
}
LEGEND_WIDTH = 110


def legend(actions: list[str], formats: list[str]) -> list[str]:
    """The lines under the turn table: its first format's columns, the actions shown (only
    those), the reloads."""
    parts = {part.split(" ")[0] for action in actions for one in action.split(" | ") for part in one.split("+")}
    said = [f"{name} = {meaning}" for name, meaning in ACTION_MEANINGS.items() if name in parts]
    if any("+" in action for action in actions):
        said.append("a+b = both")
    if any(" | " in action for action in actions):
        said.append(
            f"a | b = the formats' actions differ at that turn (in the order {', '.join(formats)}, each "
            "once): a summary made in the background may land a turn apart in one of them"
        )
    wrap = functools.partial(textwrap.wrap, width=LEGEND_WIDTH, subsequent_indent="  ", break_on_hyphens=False)
    return [
        *wrap(
            f"raw, {formats[0]}/raw: the {formats[0]} format's raw tokens and its forwarded / raw (each "
            "format counts its own: TOTALS below)"
        ),
        *wrap("action: " + "; ".join(said)),
        *wrap(f"reloads: the reload rounds the (fake) model ran, per format ({'/'.join(formats)})"),
    ]


def turn_table(runs: list[FormatRun], labels: list[str]) -> str:
    """Turn by turn: the raw tokens (the first format's), the tokens forwarded in each format (the
    proxy's X-Offload-Tokens-Before/-After), the first format's ratio, the action it took (one
    when the formats agree) and the reload rounds the (fake) model ran in each format; then a
    legend of the actions shown."""
    names = [r.format for r in runs]
    first = names[0]
    ratio = f"{first[:9]}/raw"
    count = max(len(r.turns) for r in runs)
    cells = [[r.turns[k] if k < len(r.turns) else TurnResult(0) for r in runs] for k in range(count)]
    shown = [" | ".join(dict.fromkeys(_action(t) for t in turns)) for turns in cells]
    width = max([24, *map(len, shown)])  # the formats' actions may differ: the column as wide as the widest
    header = (
        f"{'turn':>4}  {'the agent had just run':{STEP_WIDTH}} {'raw':>6} "
        + " ".join(f"{n[:9]:>9}" for n in names)
        + f" {ratio:>{len(ratio)}}  {'action':{width}} reloads"
    )
    rows = [
        "forwarded tokens per format (" + ", ".join(f"{r.format}: POST {r.path}" for r in runs) + ")",
        header,
        "-" * len(header),
    ]
    for k, (turns, action) in enumerate(zip(cells, shown)):
        before = turns[0].tokens_before or 0
        label = labels[k] if k < len(labels) else ""
        rows.append(
            f"{k + 1:>4}  {_clip(label, STEP_WIDTH):{STEP_WIDTH}} {before:>6} "
            + " ".join(f"{t.tokens_after or 0:>9}" for t in turns)
            + f" {_ratio(turns[0].tokens_after or 0, before):>{len(ratio)}}  {action:{width}} "
            + "/".join(_reloads(r, k) for r in runs)
        )
    return "\n".join([*rows, *legend(shown, names)])


def totals(run: FormatRun) -> dict[str, Any]:
    before = sum(t.tokens_before or 0 for t in run.turns)
    after = sum(t.tokens_after or 0 for t in run.turns)
    actions = [t.action or "" for t in run.turns]
    known = [r for r in run.reloads if r is not None]
    return {
        "format": run.format,
        "turns": len(run.turns),
        "errors": sum(1 for t in run.turns if t.status != 200),
        "raw": before,
        "forwarded": after,
        "ratio": _ratio(after, before),
        "compacted": sum(1 for a in actions if "compact" in a),
        "compressed": sum(1 for a in actions if "compress" in a and "pending" not in a),
        "reloads": sum(known) if len(known) == len(run.turns) else "?",
    }


def totals_table(runs: list[FormatRun], tenant: dict[str, Any] | None = None) -> str:
    """One row per format, then the sum: the figures the dashboard shows for these sessions; and
    the tenant's totals from the statistics API (`tenant`: its `totals`), when read."""
    header = (
        f"{'TOTALS':10} {'turns':>5} {'errors':>6} {'raw':>9} {'forwarded':>9} {'ratio':>6} {'compacted':>9} "
        f"{'compressed':>10} {'reloads':>7}"
    )
    rows = [header, "-" * len(header)]
    for t in map(totals, runs):
        rows.append(
            f"{t['format']:10} {t['turns']:>5} {t['errors']:>6} {t['raw']:>9} {t['forwarded']:>9} "
            f"{t['ratio']:>6} {t['compacted']:>9} {t['compressed']:>10} {t['reloads']:>7}"
        )
    raw, forwarded = sum(totals(r)["raw"] for r in runs), sum(totals(r)["forwarded"] for r in runs)
    rows += [
        "-" * len(header),
        f"{'all':10} {sum(len(r.turns) for r in runs):>5} {sum(totals(r)['errors'] for r in runs):>6} "
        f"{raw:>9} {forwarded:>9} {_ratio(forwarded, raw):>6}",
    ]
    if tenant:
        summaries = tenant.get("summaries") or {}
        rows.append(
            f"the statistics API: {tenant.get('requests')} requests, {tenant.get('tokens_saved')} tokens "
            f"saved, summaries made {summaries.get('made', 0)} (reused {summaries.get('reused', 0)}), "
            f"reload rounds {tenant.get('reload_rounds')}, prefix reuse {tenant.get('prefix_reuse')}"
        )
    return "\n".join(rows)


CONVERSATION = Path(__file__).with_name("conversation.jsonl")
MODELS = {"chat": "gpt-4o", "responses": "gpt-4o", "anthropic": "claude-sonnet-4"}
STARTUP_SECONDS = 60.0
STATS_SECONDS = 15.0  # the recorder writes about once a second


def wait_up(url: str, process: subprocess.Popen[bytes] | None = None, *, timeout: float = STARTUP_SECONDS) -> bool:
    """Does `url` answer within `timeout` seconds (False as soon as `process` exits)? Also the benchmarks'."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            return False
        try:
            httpx2.get(url, timeout=2)
            return True
        except httpx2.TransportError:
            time.sleep(0.05)
    return False


class DemoError(RuntimeError):
    """The demo cannot go on; the message says why (one paragraph)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port", type=int, default=0, help="The proxy's (and the dashboard's) port on 127.0.0.1 (default: a free one)."
    )
    parser.add_argument(
        "--upstream-port",
        type=int,
        default=0,
        help="The bundled fake upstream's port on 127.0.0.1 (default: a free one).",
    )
    parser.add_argument(
        "--no-wait",
        action="store_true",
        help="Stop after printing the tables instead of keeping the dashboard up until Ctrl-C.",
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Progress:
    """Turns sent so far, on one line of stderr (a line per format when stderr is not a terminal)."""

    def __init__(self, label: str, total: int) -> None:
        self.label, self.total, self.done = label, total, 0
        self.live = sys.stderr.isatty()

    def tick(self) -> None:
        self.done += 1
        if self.live:
            filled = 30 * self.done // max(self.total, 1)
            print(
                f"\r  {self.label:10} [{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} turns",
                end="",
                file=sys.stderr,
                flush=True,
            )

    def close(self, seconds: float) -> None:
        if self.live:
            print(f" ({seconds:.1f} s)", file=sys.stderr, flush=True)
        else:
            print(f"  {self.label:10} {self.done}/{self.total} turns ({seconds:.1f} s)", file=sys.stderr, flush=True)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that has the child sent SIGTERM when this process dies, however it dies
    (Linux's PR_SET_PDEATHSIG); None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # died before the prctl: no signal would come
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


class Servers:
    """The fake upstream and the proxy, as child processes; `stop` ends both and removes the data."""

    def __init__(self, port: int, admin_token: str, *, upstream_port: int = 0) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="offload-demo-"))
        self.upstream_port, self.port = upstream_port or free_port(), port or free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        self.log = self.folder / "servers.log"
        self.admin_token = admin_token
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        out = self.log.open("ab")
        upstream = f"http://127.0.0.1:{self.upstream_port}"
        commands = [
            [sys.executable, "-m", "proxy.demo.fake_upstream", str(self.upstream_port), "--reload-once", "--bill"],
            [
                sys.executable,
                "-m",
                "proxy",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--upstream",
                f"{upstream}/v1",
                "--anthropic-upstream",
                upstream,
                "--data-dir",
                str(self.folder / "store"),
                "--log-level",
                "warning",
            ],
        ]
        # the admin token by environment: not in argv (`ps` shows argv; a token_urlsafe starting with
        # "-" was taken for an option there)
        env = {**os.environ, "OFFLOAD_ADMIN_TOKEN": self.admin_token}
        for command in commands:  # a session of their own: Ctrl-C reaches the demo, which stops them
            self.processes.append(
                subprocess.Popen(
                    command,
                    stdout=out,
                    stderr=out,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    preexec_fn=die_with_parent(),
                    env=env,
                )
            )
        self._wait_up(f"{upstream}/", self.processes[0])
        self._wait_up(f"{self.root}/healthz", self.processes[1])

    def _wait_up(self, url: str, process: subprocess.Popen[bytes]) -> None:
        if not wait_up(url, process, timeout=STARTUP_SECONDS):
            state = (
                "exited at startup" if process.poll() is not None else f"did not answer within {STARTUP_SECONDS:g} s"
            )
            raise DemoError(f"{url}: the server {state}:\n{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def exited(self) -> subprocess.Popen[bytes] | None:
        return next((p for p in self.processes if p.poll() is not None), None)

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


async def replay(root: str, key: str, conversation: dict[str, Any]) -> list[FormatRun]:
    """The conversation in each format, one after the other, one session each (named format
    first: a dashboard that shortens a long name still tells them apart)."""
    runs = []
    for format, model in MODELS.items():
        session = f"{format}-{conversation['id']}"
        progress = Progress(format, len(turns_of(conversation["messages"])))
        start = time.monotonic()
        [sent] = await send_all(
            [{**conversation, "id": session}],
            target=root,
            format=format,
            model=model,
            api_key=key,
            concurrency=1,
            tick=progress.tick,
        )
        progress.close(time.monotonic() - start)
        runs.append(FormatRun(format, PATHS[format], sent.session, sent.turns))
    return runs


async def read_statistics(root: str, key: str, runs: list[FormatRun]) -> dict[str, Any] | None:
    """Each run's reload rounds per turn, from the statistics API, once the recorder has written
    every turn (else they stay unknown, shown as "?"); the tenant's totals (None: not read)."""
    deadline = time.monotonic() + STATS_SECONDS
    async with httpx2.AsyncClient(timeout=10, headers={"authorization": f"Bearer {key}"}) as client:
        for run in runs:
            while True:
                response = await client.get(f"{root}/v1/offload/sessions/{run.session}")
                body = response.json() if response.status_code == 200 else {}
                rows = body.get("data") or []
                if len(rows) >= len(run.turns) or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.3)
            if len(rows) >= len(run.turns):
                run.reloads = [int(row.get("reload_rounds", 0)) for row in rows[-len(run.turns) :]]
        response = await client.get(f"{root}/v1/offload/stats", params={"window": "1h"})
        return response.json().get("totals") if response.status_code == 200 else None


def token_note() -> str | None:
    """A line when token counts are estimates (tiktoken's encodings cannot be loaded, e.g. offline)."""
    from proxy.core.tokens import counter_for_encoding, counting_method

    method = counting_method(counter_for_encoding("o200k_base"))
    if method["method"] != "estimate":
        return None
    cache = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    where = f"not in TIKTOKEN_CACHE_DIR={cache}" if cache else "offline and no TIKTOKEN_CACHE_DIR"
    return (
        "tokens: ESTIMATES (about 4 bytes a token): tiktoken's o200k_base encoding could not be loaded "
        f"({where}); the ratios are close to the real ones."
    )


def wait_for_ctrl_c(servers: Servers) -> int:
    """Until Ctrl-C or SIGTERM, or until a server exits on its own (status 1). Both handlers are
    installed here: a demo started with SIGINT ignored (in the background from a script, as a CI
    runner does) stops on Ctrl-C all the same."""
    stop: list[int] = []

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        stop.append(signum)

    previous = {signum: signal.signal(signum, request_stop) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stop:
            if (gone := servers.exited()) is not None:
                print(
                    f"offload-proxy demo: a server exited (status {gone.returncode}):\n{servers.log_tail()}",
                    file=sys.stderr,
                )
                return 1
            time.sleep(0.3)
    except KeyboardInterrupt:
        pass
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 0


def run_demo(args: argparse.Namespace) -> int:
    conversation = load_conversations(CONVERSATION)[0]
    admin_token = secrets.token_urlsafe(18)
    key = "demo-" + secrets.token_hex(8)  # the caller's "provider key": relayed to the fake, names the tenant
    servers = Servers(args.port, admin_token, upstream_port=args.upstream_port)
    # Until the tables, SIGTERM (and Ctrl-C, even if ignored at startup) stop the demo as Ctrl-C
    # does: its servers stopped and its data removed.
    previous = {signum: signal.signal(signum, signal.default_int_handler) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        print(
            f"Starting the fake upstream and the proxy (embedded store in {servers.folder}) ...",
            file=sys.stderr,
            flush=True,
        )
        servers.start()
        turns = len(turns_of(conversation["messages"]))
        print(
            f"Replaying the bundled conversation ({conversation['id']}: {turns} turns, an agent fixing a bug) "
            f"in each wire format ...",
            file=sys.stderr,
            flush=True,
        )
        runs = asyncio.run(replay(servers.root, key, conversation))
        tenant = asyncio.run(read_statistics(servers.root, key, runs))
        labels = steps(conversation["messages"])
        print(turn_table(runs, labels) + "\n")
        print(totals_table(runs, tenant))
        if note := token_note():
            print(note)
        if args.no_wait:  # the servers stop now: no dashboard to sign in to
            return 0
        print(
            f"\nDashboard:   {servers.root}/dashboard\nAdmin token: {admin_token}\n"
            f"Proxy:       {servers.root}/v1 (its upstream: the bundled fake, no model behind it)",
            flush=True,
        )
        print(
            "Sign in with the admin token (made for this run). Ctrl-C stops the demo and removes its data.", flush=True
        )
        return wait_for_ctrl_c(servers)
    except DemoError as exc:
        print(f"offload-proxy demo: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # before the tables: stop quietly
        return 130
    finally:
        servers.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
