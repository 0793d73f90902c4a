"""`offload-proxy wrap AGENT [proxy options] [-- AGENT ARGS]`: start the proxy (or reuse one), run
the agent through it in the foreground, print one line of what it saved, stop the proxy.

The agent inherits the terminal as is: no pty in between, so its TTY, colours and window size
are the terminal's own, and the terminal's signals (Ctrl-C, Ctrl-\\, Ctrl-Z, resize) go to the
foreground process group it shares with the wrapper; the wrapper ignores Ctrl-C and Ctrl-\\ while
the agent runs (they are the agent's to handle), forwards SIGTERM and SIGHUP sent to it alone, and
exits with the agent's status (dying of the agent's signal when the agent died of one). The agent
too gets the parent-death signal on Linux: a SIGKILLed wrapper leaves neither a proxy nor an
agent reading a terminal the shell has taken back.
"""

from __future__ import annotations

import argparse
import difflib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

from proxy.config import ServerSettings
from proxy.server_options import add_settings_options, listen_problem, option, settings_error
from proxy.wrap import summary
from proxy.wrap.agents import AGENTS, Agent, environment, names
from proxy.wrap.child import ProxyChild, WrapError, check_reusable, die_with_parent

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
USAGE = "%(prog)s [-h] AGENT [--proxy-url URL] [--keep] [--quiet] [proxy options] [-- AGENT ARGS]"
# what wrap does without these options, unlike serve (Session.start)
DEFAULTS = {"port": "a free one", "data_dir": "a temporary folder, removed at exit"}
EPILOG = ("The agent's own arguments go after --: offload-proxy wrap codex -- exec 'fix the tests'. "
          "Every serve option is accepted before it (--upstream, --anthropic-upstream, --mode, …); the proxy "
          "listens on a free loopback port with a store of its own for the run (docs/wrap.md).")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.usage, parser.epilog = USAGE, EPILOG
    parser.add_argument("agent", metavar="AGENT", help=f"The agent to run: {names()}.")
    parser.add_argument("--proxy-url", default=None, help="Run the agent through the proxy already serving at this "
                        "URL (http://127.0.0.1:8080) instead of starting one; its --admin-token, if given, "
                        "reads the statistics of the exit line.")
    parser.add_argument("--keep", action="store_true", help="Leave the proxy running after the agent exits "
                        "(the exit line says where, its dashboard and how to stop it).")
    parser.add_argument("--quiet", action="store_true", help="Print nothing when the agent exits.")
    add_settings_options(parser, defaults=DEFAULTS)


def unknown_arguments(agent: str, unknown: Sequence[str]) -> str:
    """What to say of the arguments before `--` that wrap does not know (argparse left them over):
    the agent's own arguments belong after `--`; one that looks like a misspelt proxy option gets
    its likely spelling, and an agent argparse took from an option's value gets no example."""
    given = " ".join(unknown)
    if agent in AGENTS:
        text = (f"unrecognized arguments {given}: the agent's own arguments go after --, "
                f"as in: offload-proxy wrap {agent} -- {given}")
    else:  # e.g. `--keep-recnt 2 codex`: the value `2` was taken for the agent
        text = (f"unrecognized arguments {given}: proxy options go before the agent (offload-proxy wrap --help "
                f"lists them), the agent's own arguments after --")
    known = ["--proxy-url", "--keep", "--quiet", *(option(name) for name in ServerSettings.model_fields)]
    close = [match for item in unknown if item.startswith("--")
             for match in difflib.get_close_matches(item.partition("=")[0], known, n=1, cutoff=0.8)]
    return text + (f" (a proxy option? did you mean {' or '.join(close)}?)" if close else "")


def split_agent_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """`wrap …` up to `--`, and what follows it (the agent's arguments, passed unchanged)."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1:]


def free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def connect_host(host: str) -> str:
    """Where the agent reaches a proxy listening on `host` (a wildcard address: the loopback)."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def bypass_proxies(env: dict[str, str], host: str) -> None:
    """An HTTP(S)_PROXY of the user's would carry the agent's loopback requests away: NO_PROXY gets the host."""
    if not any(env.get(name) for name in PROXY_VARIABLES):
        return
    host = host.strip("[]")
    for name in ("NO_PROXY", "no_proxy"):
        listed = [part.strip() for part in env.get(name, "").split(",") if part.strip()]
        if host not in listed:
            env[name] = ",".join([*listed, host])


class Session:
    """One `wrap` run: the proxy it uses, the agent, and what is cleaned up after."""

    def __init__(self, args: argparse.Namespace, agent_args: list[str]) -> None:
        self.args, self.agent_args = args, agent_args
        self.given = {name: getattr(args, name) for name in ServerSettings.model_fields
                      if getattr(args, name, None) is not None}
        self.child: ProxyChild | None = None
        self.scratch: Path | None = None  # the run's temporary folder: the log, and the store unless --data-dir
        self.keep_scratch = False
        self.url = ""
        self.token: str | None = None
        self.own_token = False
        self.fresh = False  # a store that starts empty: the exit line needs no reading before the run

    def agent(self) -> tuple[Agent, str]:
        agent = AGENTS.get(self.args.agent)
        if agent is None:
            raise WrapError(f"unknown agent {self.args.agent!r}: choose {names()}", 2)
        executable = shutil.which(agent.executable)
        if executable is None:
            raise WrapError(f"{agent.title} is not installed ({agent.executable} is not on PATH): "
                            f"install it with {agent.install}", 127)
        return agent, executable

    def reuse(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise WrapError(f"--proxy-url {url!r} is not an http:// or https:// URL", 2)
        ignored = [option(name) for name in self.given if name != "admin_token"]
        if ignored or self.args.keep:
            raise WrapError(f"{', '.join(ignored + (['--keep'] if self.args.keep else []))}: not with --proxy-url "
                            "(the proxy there runs with its own settings)", 2)
        self.url = url.rstrip("/")
        check_reusable(self.url)
        self.token = self.given.get("admin_token") or os.environ.get("OFFLOAD_ADMIN_TOKEN") or None

    def start(self, agent: Agent) -> None:
        env = os.environ
        settings: dict[str, Any] = dict(self.given)
        for name, value in agent.upstreams(env).items():  # where the agent went before: the upstream
            if name not in settings and f"OFFLOAD_{name.upper()}" not in env:
                settings[name] = value
        self.scratch = Path(tempfile.mkdtemp(prefix="offload-wrap-"))
        if "data_dir" not in settings and "OFFLOAD_DATA_DIR" not in env:
            settings["data_dir"] = str(self.scratch / "store")
            self.fresh = "redis_url" not in settings and "OFFLOAD_REDIS_URL" not in env
        if "admin_token" not in settings and not env.get("OFFLOAD_ADMIN_TOKEN"):
            settings["admin_token"] = secrets.token_urlsafe(24)
            self.own_token = True
        try:
            resolved = ServerSettings(**settings)
        except Exception as exc:  # pydantic's ValidationError: one line per setting
            raise WrapError(settings_error(exc).removeprefix("offload-proxy: "), 2) from exc
        if "port" in settings or "OFFLOAD_PORT" in env:
            if (problem := listen_problem(resolved.host, resolved.port)) is not None:
                hint = (f", or run through the proxy serving there with --proxy-url "
                        f"http://{connect_host(resolved.host)}:{resolved.port}") if "in use" in problem else ""
                raise WrapError(problem + hint, 1)
        else:
            settings["port"] = resolved.port = free_port(resolved.host)
        self.token = resolved.admin_token
        self.url = f"http://{connect_host(resolved.host)}:{resolved.port}"
        variables = {f"OFFLOAD_{name.upper()}": (str(value).lower() if isinstance(value, bool) else str(value))
                     for name, value in settings.items()}
        self.keep_scratch = True  # until the proxy is up: its log says why it is not
        self.child = ProxyChild.start(url=self.url, settings=variables, log=self.scratch / "proxy.log",
                                      keep=self.args.keep)
        self.keep_scratch = bool(self.args.keep)

    def run(self) -> int:
        agent, executable = self.agent()
        try:
            if self.args.proxy_url:
                self.reuse(self.args.proxy_url)
            else:
                self.start(agent)
            before_args, env = environment(agent, self.url)
            bypass_proxies(env, urlsplit(self.url).hostname or "")
            quiet = self.args.quiet
            before = None if quiet or self.fresh else summary.safe_read(self.url, self.token)
            status = foreground([executable, *before_args, *self.agent_args], env, agent.title)
            if not quiet:
                print(self.exit_line(agent, status, before), file=sys.stderr, flush=True)
            return status
        finally:
            self.close()

    def exit_line(self, agent: Agent, status: int, before: dict[str, float] | None) -> str:
        after = summary.safe_read(self.url, self.token)
        run = summary.difference(before, after) if after is not None else None
        kept = None
        if self.args.keep and self.child is not None:
            kept = summary.describe_kept(self.url, self.child.process.pid, self.token, own_token=self.own_token)
        shown = status if status >= 0 else 128 - status
        return summary.line(title=agent.title, status=shown, run=run, kept=kept)

    def close(self) -> None:
        if self.child is not None and not self.args.keep:
            self.child.stop()
        if self.scratch is not None and not self.keep_scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)


def foreground(argv: list[str], env: dict[str, str], title: str) -> int:
    """Run the agent with the terminal inherited; its return code (negative: the signal that ended it)."""
    process: subprocess.Popen[bytes] | None = None

    def ignore(signum: int, frame: FrameType | None) -> None:
        """Ctrl-C, Ctrl-\\: the terminal sent them to the agent too, which handles them."""

    def forward(signum: int, frame: FrameType | None) -> None:
        if process is not None and process.poll() is None:
            process.send_signal(signum)

    # Python handlers, not SIG_IGN: an ignored signal would stay ignored in the agent after exec.
    handlers = {signal.SIGINT: ignore, signal.SIGQUIT: ignore, signal.SIGTERM: forward, signal.SIGHUP: forward}
    previous = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}
    try:
        try:
            process = subprocess.Popen(argv, env=env, preexec_fn=die_with_parent())
        except OSError as exc:
            raise WrapError(f"{title} could not be started ({argv[0]}): {exc.strerror or exc}", 126) from exc
        return process.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def exit_as(status: int) -> None:
    """Exit with the agent's status; when a signal ended the agent, end this process with it too."""
    if status < 0:
        signum = -status
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        sys.exit(128 + signum)  # a signal whose default action is not to terminate
    sys.exit(status)


def run_wrap(args: argparse.Namespace, agent_args: list[str]) -> None:
    try:
        status = Session(args, agent_args).run()
    except WrapError as exc:
        print(f"offload-proxy wrap: {exc}", file=sys.stderr, flush=True)
        sys.exit(exc.status)
    except KeyboardInterrupt:  # Ctrl-C before the agent started (the proxy has been stopped)
        sys.exit(130)
    exit_as(status)
