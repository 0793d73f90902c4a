"""The proxy `wrap` runs the agent through: a child `python -m proxy serve` on a loopback port, or
one already serving at `--proxy-url`.

The child runs in a session of its own, so the terminal's Ctrl-C (SIGINT to the foreground process
group) reaches the agent and never the proxy; its banner and logs go to a file, never to the
agent's terminal. It gets its settings as `OFFLOAD_*` variables (so a generated admin token never
shows in `ps`). On Linux it dies with the wrapper, also when the wrapper is SIGKILLed: the
parent-death signal (`prctl(PR_SET_PDEATHSIG, SIGTERM)`), set between fork and exec; with `--keep`
it is left running on purpose.

The one line `wrap` prints when the agent exits, from the proxy's own statistics API
(`GET /v1/offload/stats`, read with the admin token).

The run's numbers are the difference between the totals after the run and before it (a fresh
proxy's store starts empty; a reused one, or a `--data-dir` of earlier runs, does not): requests
(managed turns), tokens as the agent sent them → as forwarded, what the upstream billed (measured:
its usage, priced; split into uncached input, cache reads, cache writes and output), beside it
the ratio to what the raw history would have been billed (an estimate, docs/billing.md), the
reload rounds the proxy ran, and the turns whose upstream reported no usage. The statistics are written by a background task about once a second: the
line waits (a few seconds at most) until the proxy holds no unwritten turn, then reads them.
"""

from __future__ import annotations

import ctypes
import http.client
import json
import math
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import proxy
from proxy.config import ENV_PREFIX, variables_for

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
MAX_ANSWER = 1 << 20  # bytes of a JSON answer read from a proxy (its statistics are a few kB)
READY_WITHIN = 90.0  # seconds the proxy may take to answer /readyz (a first start on a busy machine)
STOP_WITHIN = 15.0  # seconds it may take to stop after SIGTERM before it is killed
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via HTTP(S)_PROXY


class WrapError(Exception):
    """A one-line reason `wrap` cannot go on (what is wrong and what to do), with its exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that has the child receive SIGTERM when this process dies (Linux), else None.

    PR_SET_PDEATHSIG follows the thread that forked: this is called from the main thread. If the
    parent is already gone by the time the child sets it, the child ends itself."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before the fork, not in the child
    parent = os.getpid()

    def set_signal() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return set_signal


def no_core_dump() -> None:
    """This process dumps no core file when a signal ends it: the wrapper ending itself with the
    signal that ended a crashed agent (SIGABRT, SIGSEGV) must not leave a core of its own in the
    user's folder (as GNU timeout does)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    if sys.platform.startswith("linux"):  # also where core_pattern pipes to a collector
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def redact(url: str) -> str:
    """`url` as it may be shown: a user name and password in it replaced by `***`."""
    return re.sub(r"(?<=//)[^/?#]*@", "***@", url)


def _fetch(url: str, token: str | None, timeout: float) -> Any:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with _opener.open(request, timeout=timeout) as answer:
            body = answer.read(MAX_ANSWER + 1)
    except http.client.HTTPException as exc:  # not HTTP, or cut short: not an answer
        raise ConnectionError(f"no valid HTTP answer ({type(exc).__name__})") from exc
    if len(body) > MAX_ANSWER:
        raise ValueError(f"an answer over {MAX_ANSWER >> 20} MB, not JSON of the proxy's")
    try:
        return json.loads(body)
    except RecursionError as exc:
        raise ValueError("JSON nested too deep") from exc


def get_json(url: str, *, token: str | None = None, timeout: float = 5.0) -> Any:
    """GET `url` (no HTTP proxy in between) and its JSON answer; OSError or ValueError on failure,
    within `timeout` seconds in all: a server answering a byte at a time or without end is left
    to a daemon thread, never waited for."""
    outcome: list[tuple[bool, Any]] = []

    def fetch() -> None:
        try:
            outcome.append((True, _fetch(url, token, timeout)))
        except Exception as exc:  # handed to the caller as is
            outcome.append((False, exc))

    worker = threading.Thread(target=fetch, name="wrap-get", daemon=True)
    worker.start()
    worker.join(timeout)
    if not outcome:
        raise TimeoutError(f"no whole answer within {timeout:g} s")
    done, value = outcome[0]
    if not done:
        raise value
    return value


def describe(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__


def check_reusable(url: str) -> None:
    """A proxy answers at `url` (`GET /healthz`), else WrapError."""
    try:
        answer = get_json(f"{url}/healthz")
    except OSError as exc:
        raise WrapError(f"no proxy answers at --proxy-url {url} (GET /healthz: {describe(exc)})") from exc
    except ValueError as exc:
        raise WrapError(
            f"--proxy-url {url} is not an offload-proxy (GET /healthz answered no JSON: {describe(exc)[:80]})"
        ) from exc
    if not isinstance(answer, dict) or answer.get("status") != "ok":
        raise WrapError(f"--proxy-url {url} is not an offload-proxy (GET /healthz answered {str(answer)[:80]})")


def last_line(log: Path) -> str:
    """The log's last line worth showing: an `offload-proxy: …` line if any, else the last line."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    own = [line for line in lines if line.startswith("offload-proxy:")]
    chosen = (own or lines or [""])[-1]
    if chosen.startswith("{"):  # a JSON log record: its message
        try:
            record = json.loads(chosen)
            chosen = str(record.get("message") or record.get("msg") or chosen)
        except ValueError:
            pass
    return chosen.removeprefix("offload-proxy: ")[:300]


@dataclass
class ProxyChild:
    """A running `python -m proxy serve`."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    @classmethod
    def start(
        cls, *, url: str, settings: Mapping[str, str], log: Path, keep: bool, ready_within: float = READY_WITHIN
    ) -> "ProxyChild":
        """Start it with `settings` (OFFLOAD_* variables) on top of this environment, its output in
        `log`; return once `GET /readyz` answers 200. WrapError if it exits or never answers."""
        env = dict(os.environ)
        package_root = str(Path(proxy.__file__).resolve().parent.parent)  # the child runs this very code
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (package_root, env.get("PYTHONPATH"))))
        for variable in variables_for(env, [name.removeprefix(ENV_PREFIX).lower() for name in settings]):
            del env[variable]  # another spelling of one (`offload_port`) must not contend with wrap's
        env.update(settings)
        out: IO[bytes] = os.fdopen(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")  # the user's only
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "proxy", "serve"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=None if keep else die_with_parent(),
            )
        finally:
            out.close()
        child = cls(url, process, log)
        try:
            child.wait_ready(ready_within)
        except BaseException:
            child.stop()
            raise
        return child

    def wait_ready(self, within: float) -> None:
        deadline = time.monotonic() + within
        while True:
            if self.process.poll() is not None:
                why = last_line(self.log) or f"it exited with status {self.process.returncode}"
                raise WrapError(f"the proxy did not start: {why} (log: {self.log})")
            try:
                if get_json(f"{self.url}/readyz", timeout=2).get("status") == "ready":
                    return
            except (OSError, ValueError, AttributeError):
                pass
            if time.monotonic() > deadline:
                raise WrapError(f"the proxy did not answer {self.url}/readyz within {within:.0f} s (log: {self.log})")
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it is still there after STOP_WITHIN seconds."""
        if self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(STOP_WITHIN)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


WINDOW = "30d"  # the longest: nothing of a run falls out of it between the two readings
FIELDS = (
    "requests",
    "tokens_before",
    "tokens_after",
    "reload_rounds",
    "billed_usd",
    "uncached_usd",
    "reads_usd",
    "writes_usd",
    "output_usd",
    "turns_without_usage",
    "cf_usd",
    "cf_billed_usd",
)
# where each is in the statistics' totals
_PATHS = {
    "billed_usd": ("bill", "usd", "total"),
    "uncached_usd": ("bill", "usd", "uncached"),
    "reads_usd": ("bill", "usd", "cache_read"),
    "writes_usd": (("bill", "usd", "cache_write_5m"), ("bill", "usd", "cache_write_1h")),
    "output_usd": ("bill", "usd", "output"),
    "turns_without_usage": ("bill", "turns_without_usage"),
    "cf_usd": ("counterfactual", "usd", "total"),
    "cf_billed_usd": ("counterfactual", "billed_usd"),
}
SETTLE_WITHIN = 5.0  # seconds to wait for the proxy's last turns to be written


NO_TOKEN = "the proxy's admin token is needed: --admin-token"


def _number(value: Any) -> float:
    """A statistic: absent is 0; anything but a finite number is not the statistics API's answer."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"not a number: {str(value)[:40]}")
    return float(value)


def read(url: str, token: str) -> tuple[dict[str, float], int]:
    """The totals of FIELDS, and the turns the proxy still holds unwritten (the admin's `recorder`).
    ValueError when the answer is not the statistics API's (a server that is not the proxy)."""
    body = get_json(f"{url}/v1/offload/stats?window={WINDOW}", token=token)
    totals = body.get("totals") if isinstance(body, dict) else None
    recorder = (body.get("recorder") if isinstance(body, dict) else None) or {}
    if not isinstance(totals, dict) or not isinstance(recorder, dict):
        raise ValueError("no totals in the answer")
    return {name: _field(totals, name) for name in FIELDS}, int(_number(recorder.get("queued")))


def _field(totals: dict[str, Any], name: str) -> float:
    paths = _PATHS.get(name, (name,))
    total = 0.0
    for path in paths if isinstance(paths[0], tuple) else (paths,):
        value: Any = totals
        for step in path:
            value = value.get(step) if isinstance(value, dict) else None
        total += _number(value)
    return total


def settled(url: str, token: str, within: float = SETTLE_WITHIN) -> dict[str, float]:
    """The totals once every turn served so far is written (or after `within` seconds).

    An answer's `recorder` is taken before its totals are read, so the answer that first says
    nothing is held counts every turn."""
    deadline = time.monotonic() + within
    while True:
        totals, queued = read(url, token)
        if queued == 0 or time.monotonic() > deadline:
            return totals
        time.sleep(0.2)


def difference(before: dict[str, float] | None, after: dict[str, float]) -> dict[str, float]:
    if before is None:
        return dict(after)
    return {name: max(0.0, after[name] - before.get(name, 0.0)) for name in FIELDS}


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def _usd(value: float) -> str:
    return f"${value:,.2f}" if value >= 1 else f"${value:.4f}"


def stats_text(run: dict[str, float]) -> str:
    """`12 requests, 410,200 → 98,450 tokens (0.24), billed $0.0820 (uncached $0.0100, reads
    $0.0500, writes $0.0120, output $0.0100), ×0.41 of the raw history's (est.), 3 reloads`."""
    requests, before, after = int(run["requests"]), int(run["tokens_before"]), int(run["tokens_after"])
    if requests == 0:
        return "no requests went through the proxy"
    parts = [_plural(requests, "request")]
    ratio = f" ({after / before:.2f})" if before else ""
    parts.append(f"{before:,} → {after:,} tokens{ratio}")
    if run["billed_usd"] > 0:
        parts.append(
            f"billed {_usd(run['billed_usd'])} (uncached {_usd(run['uncached_usd'])}, reads "
            f"{_usd(run['reads_usd'])}, writes {_usd(run['writes_usd'])}, output {_usd(run['output_usd'])})"
        )
    if run["cf_usd"] > 0:
        parts.append(f"×{run['cf_billed_usd'] / run['cf_usd']:.2f} of the raw history's (est.)")
    parts.append(_plural(int(run["reload_rounds"]), "reload"))
    if missing := int(run["turns_without_usage"]):
        parts.append(f"{_plural(missing, 'turn')} without usage")
    return ", ".join(parts)


def line(
    *, title: str, status: int, run: dict[str, float] | None, kept: str | None = None, unavailable: str = NO_TOKEN
) -> str:
    """The whole line: what the agent did through the proxy, and, with --keep, where the proxy still is.
    `unavailable`: why there is no `run` (no admin token, the proxy gone)."""
    if run is None:
        text = f"statistics unavailable ({unavailable})"
        if status != 0:
            text = f"{title} exited with status {status}; {text}"
    elif int(run["requests"]) == 0 and status != 0:
        text = f"{title} exited with status {status}; no request went through the proxy"
    else:
        text = stats_text(run)
    return f"offload-proxy: {text}" + (f"; {kept}" if kept else "")


def describe_kept(url: str, pid: int | None, token: str | None, *, own_token: bool, scratch: str | None = None) -> str:
    """The `--keep` tail: the dashboard, how to sign in, how to stop the proxy, and the run's folder
    (its log, and its store of tool results unless --data-dir) that outlives it until removed."""
    sign_in = f" (admin token {token})" if token and own_token else ""
    stop = f", stop it with kill {pid}" if pid else ""
    left = f"; its log and store stay in {scratch} until you remove it" if scratch else ""
    return f"proxy still up at {url}: dashboard {url}/dashboard{sign_in}{stop}{left}"


def safe_read(url: str, token: str | None) -> tuple[dict[str, float] | None, str]:
    """`settled` totals, or None and why they cannot be read (no token, a token refused, the proxy
    gone, a server that is not the proxy)."""
    if not token:
        return None, NO_TOKEN
    try:
        return settled(url, token), ""
    except urllib.error.HTTPError as exc:
        refused = " (a wrong --admin-token?)" if exc.code in (401, 403) else ""
        return None, f"the proxy answered HTTP {exc.code}{refused}"
    except OSError as exc:
        return None, f"the proxy did not answer: {describe(exc)}"
    except ValueError as exc:
        return None, f"no statistics in the proxy's answer: {describe(exc)[:80]}"
