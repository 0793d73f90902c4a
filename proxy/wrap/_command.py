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
import contextlib
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

from proxy.config import (
    ServerSettings,
    add_settings_options,
    from_environment,
    listen_problem,
    option,
    secret_settings,
    settings_error,
    variables_for,
)
from proxy.wrap import _proxy as proxy_child
from proxy.wrap._agents import AGENTS, Agent, Upstream, environment, names
from proxy.wrap._proxy import ProxyChild, WrapError, check_reusable, die_with_parent, no_core_dump, redact

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
USAGE = "%(prog)s [-h] AGENT [--proxy-url URL] [--keep] [--quiet] [proxy options] [-- AGENT ARGS]"
# what wrap does without these options, unlike serve (Session.start)
DEFAULTS = {"port": "a free one", "data_dir": "a temporary folder, removed at exit"}
UPSTREAMS = ("upstream", "anthropic_upstream")
# The proxy's secrets, never in the agent's environment (it runs commands a model chose): the user's
# variables of these, in every spelling the settings read, are the proxy's, or those of the proxy at --proxy-url.
SECRET_SETTINGS = secret_settings()
EPILOG = (
    "The agent's own arguments go after --: offload-proxy wrap codex -- exec 'fix the tests'. "
    "Every serve option is accepted before it (--upstream, --anthropic-upstream, --mode, …); the proxy "
    "listens on a free loopback port with a store of its own for the run (docs/wrap.md)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.usage, parser.epilog = USAGE, EPILOG
    parser.add_argument("agent", metavar="AGENT", help=f"The agent to run: {names()}.")
    parser.add_argument(
        "--proxy-url",
        default=None,
        help="Run the agent through the proxy already serving at this "
        "URL (http://127.0.0.1:8080) instead of starting one; its --admin-token, if given, "
        "reads the statistics of the exit line.",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="Leave the proxy running after the agent exits "
        "(the exit line says where, its dashboard and how to stop it).",
    )
    parser.add_argument("--quiet", action="store_true", help="Print nothing when the agent exits.")
    add_settings_options(parser, defaults=DEFAULTS)


def unknown_arguments(agent: str, unknown: Sequence[str]) -> str:
    """What to say of the arguments before `--` that wrap does not know (argparse left them over):
    the agent's own arguments belong after `--`; one that looks like a misspelt proxy option gets
    its likely spelling, and an agent argparse took from an option's value gets no example."""
    given = " ".join(unknown)
    if agent in AGENTS:
        text = (
            f"unrecognized arguments {given}: the agent's own arguments go after --, "
            f"as in: offload-proxy wrap {agent} -- {given}"
        )
    else:  # e.g. `--keep-recnt 2 codex`: the value `2` was taken for the agent
        text = (
            f"unrecognized arguments {given}: proxy options go before the agent (offload-proxy wrap --help "
            f"lists them), the agent's own arguments after --"
        )
    known = ["--proxy-url", "--keep", "--quiet", *(option(name) for name in ServerSettings.model_fields)]
    close = [
        match
        for item in unknown
        if item.startswith("--")
        for match in difflib.get_close_matches(item.partition("=")[0], known, n=1, cutoff=0.8)
    ]
    return text + (f" (a proxy option? did you mean {' or '.join(close)}?)" if close else "")


def split_agent_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """`wrap …` up to `--`, and what follows it (the agent's arguments, passed unchanged)."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def free_port(host: str) -> int:
    """A port free on `host` now; WrapError when nothing can listen on `host`."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            return int(sock.getsockname()[1])
    except socket.gaierror as exc:
        raise WrapError(f"--host {host}: cannot be resolved ({exc.strerror})", 1) from exc
    except OSError as exc:
        raise WrapError(f"cannot listen on {host}: {exc.strerror} (choose another --host)", 1) from exc


def proxy_root(url: str) -> str:
    """--proxy-url checked (else WrapError), without its trailing `/`: http(s), a host, a port if
    any, no user name or password (never shown back), no query or fragment, no spaces."""
    shown = redact(url)
    if any(char.isspace() or not char.isprintable() for char in url):
        raise WrapError(f"--proxy-url {shown!r} is not a URL (it holds spaces or control characters)", 2)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port out of range or not a number raises ValueError here)
    except ValueError as exc:
        raise WrapError(f"--proxy-url {shown!r} is not a valid URL: {exc}", 2) from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WrapError(f"--proxy-url {shown!r} is not an http:// or https:// URL", 2)
    if parts.username is not None or parts.password is not None:
        raise WrapError(
            f"--proxy-url {shown!r}: no user name or password in it (the proxy's admin token goes in --admin-token)", 2
        )
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise WrapError(f"--proxy-url {shown!r}: no query or fragment (the proxy's root: http://127.0.0.1:8080)", 2)
    return url.rstrip("/")


def _loopback(host: str) -> bool:
    return host in ("", "localhost", "::1", "0.0.0.0", "::") or host.startswith("127.")


def same_address(url: str, host: str, port: int) -> bool:
    """Does `url` reach a proxy listening on host:port (any loopback name for a loopback or wildcard host)?"""
    try:
        parts = urlsplit(url)
        target, target_port = (parts.hostname or "").lower(), parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return False
    host = host.lower().strip("[]")
    return target_port == port and (target == host or (_loopback(target) and _loopback(host)))


def connect_host(host: str) -> str:
    """Where the agent reaches a proxy listening on `host` (a wildcard address: the loopback)."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def drop_secrets(env: dict[str, str]) -> None:
    """Remove from `env` every variable the settings would read as one of SECRET_SETTINGS."""
    for variable in variables_for(env, SECRET_SETTINGS):
        del env[variable]


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
        self.given = {
            name: getattr(args, name) for name in ServerSettings.model_fields if getattr(args, name, None) is not None
        }
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
            raise WrapError(
                f"{agent.title} is not installed ({agent.executable} is not on PATH): install it with {agent.install}",
                127,
            )
        return agent, executable

    def reuse(self, url: str) -> None:
        url = proxy_root(url)
        ignored = [option(name) for name in self.given if name != "admin_token"]
        if ignored or self.args.keep:
            raise WrapError(
                f"{', '.join(ignored + (['--keep'] if self.args.keep else []))}: not with --proxy-url "
                "(the proxy there runs with its own settings)",
                2,
            )
        self.url = url
        check_reusable(self.url)
        self.token = self.given.get("admin_token") or from_environment(os.environ, "admin_token") or None

    def start(self, agent: Agent) -> None:
        env = os.environ
        settings: dict[str, Any] = dict(self.given)
        derived = {
            name: found
            for name, found in agent.upstreams(env).items()  # where the agent went before
            if name not in settings and from_environment(env, name) is None
        }
        settings.update({name: found.url for name, found in derived.items()})
        self.scratch = Path(tempfile.mkdtemp(prefix="offload-wrap-"))
        if "data_dir" not in settings and from_environment(env, "data_dir") is None:
            settings["data_dir"] = str(self.scratch / "store")
            self.fresh = "redis_url" not in settings and from_environment(env, "redis_url") is None
        if "admin_token" not in settings and not from_environment(env, "admin_token"):
            settings["admin_token"] = secrets.token_urlsafe(24)
            self.own_token = True
        try:
            resolved = ServerSettings(**settings)
        except Exception as exc:  # pydantic's ValidationError: one line per setting
            raise WrapError(settings_problem(exc, derived, agent), 2) from exc
        if "port" in settings or from_environment(env, "port") is not None:
            if (problem := listen_problem(resolved.host, resolved.port)) is not None:
                hint = (
                    (
                        f", or run through the proxy serving there with --proxy-url "
                        f"http://{connect_host(resolved.host)}:{resolved.port}"
                    )
                    if "in use" in problem
                    else ""
                )
                raise WrapError(problem + hint, 1)
        else:
            for _ in range(10):  # never the port an upstream of the loopback is at
                settings["port"] = resolved.port = free_port(resolved.host)
                if not any(same_address(getattr(resolved, name), resolved.host, resolved.port) for name in UPSTREAMS):
                    break
        for name in UPSTREAMS:
            if same_address(value := getattr(resolved, name), resolved.host, resolved.port):
                source, value = (
                    (derived[name].source, derived[name].url)
                    if name in derived
                    else (option(name), self.given[name])
                    if name in self.given
                    else (f"OFFLOAD_{name.upper()}", from_environment(env, name) or value)
                )
                raise WrapError(
                    f"{source} {value!r} is this proxy's own address: it would send every request to "
                    f"itself; choose another --port, or another {option(name)}",
                    2,
                )
        self.token = resolved.admin_token
        self.url = f"http://{connect_host(resolved.host)}:{resolved.port}"
        variables = {
            f"OFFLOAD_{name.upper()}": (str(value).lower() if isinstance(value, bool) else str(value))
            for name, value in settings.items()
        }
        try:
            self.child = ProxyChild.start(
                url=self.url, settings=variables, log=self.scratch / "proxy.log", keep=self.args.keep
            )
        except WrapError:
            self.keep_scratch = True  # the message names its log, which says why the proxy did not start
            raise
        self.keep_scratch = bool(self.args.keep)

    def run(self) -> int:
        agent, executable = self.agent()
        try:
            if self.args.proxy_url:
                self.reuse(self.args.proxy_url)
            else:
                self.start(agent)
            before_args, env = environment(agent, self.url)
            drop_secrets(env)
            bypass_proxies(env, urlsplit(self.url).hostname or "")
            quiet = self.args.quiet
            before: tuple[dict[str, float] | None, str] = (None, "")
            if not (quiet or self.fresh):  # a store with earlier turns: the run is the difference
                before = proxy_child.safe_read(self.url, self.token)
            status = foreground([executable, *before_args, *self.agent_args], env, agent.title)
            if not quiet:
                say(self.exit_line(agent, status, before))
            return status
        finally:
            self.close()

    def exit_line(self, agent: Agent, status: int, before: tuple[dict[str, float] | None, str]) -> str:
        after, unavailable = proxy_child.safe_read(self.url, self.token)
        run = None
        if after is not None and (self.fresh or before[0] is not None):
            run = proxy_child.difference(before[0], after)
        elif after is not None:  # the totals before it unknown: a difference would count earlier runs too
            unavailable = f"the totals before the run could not be read: {before[1]}"
        kept = None
        if self.args.keep and self.child is not None:
            kept = proxy_child.describe_kept(
                self.url,
                self.child.process.pid,
                self.token,
                own_token=self.own_token,
                scratch=str(self.scratch) if self.scratch is not None else None,
            )
        shown = status if status >= 0 else 128 - status
        return proxy_child.line(title=agent.title, status=shown, run=run, kept=kept, unavailable=unavailable)

    def close(self) -> None:
        if self.child is not None and not self.args.keep:
            self.child.stop()
        if self.scratch is not None and not self.keep_scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)


def settings_problem(exc: Exception, derived: dict[str, Upstream], agent: Agent) -> str:
    """The settings' one-line message; for an upstream taken from the agent's environment, that
    variable or file named, not an option the user never gave."""
    from pydantic import ValidationError

    for error in exc.errors() if isinstance(exc, ValidationError) else ():
        if error.get("loc") and (found := derived.get(str(error["loc"][0]))) is not None:
            return (
                f"{found.source} {found.url!r} sends {agent.title} somewhere that cannot be the proxy's upstream "
                f"({error['msg']}): correct it, or give {option(str(error['loc'][0]))}"
            )
    return settings_error(exc).removeprefix("offload-proxy: ")


def say(text: str) -> None:
    """A line on stderr; nothing when stderr is gone (the terminal closed, the reader of a pipe
    gone): the agent's exit status still stands, and nothing is left to fail when Python exits."""
    try:
        print(text, file=sys.stderr, flush=True)
    except OSError:
        with contextlib.suppress(OSError):
            nothing = os.open(os.devnull, os.O_WRONLY)
            os.dup2(nothing, sys.stderr.fileno())
            os.close(nothing)


def foreground(argv: list[str], env: dict[str, str], title: str) -> int:
    """Run the agent with the terminal inherited; its return code (negative: the signal that ended it)."""
    process: subprocess.Popen[bytes] | None = None

    def ignore(signum: int, frame: FrameType | None) -> None:
        """Ctrl-C, Ctrl-\\: the terminal sent them to the agent too, which handles them."""

    def forward(signum: int, frame: FrameType | None) -> None:
        if process is not None and process.poll() is None:
            process.send_signal(signum)

    # Python handlers, not SIG_IGN: an ignored signal would stay ignored in the agent after exec. A
    # signal ignored already (nohup's SIGHUP, SIGINT in a background job of a script) stays ignored,
    # for the agent too, as it would be without wrap.
    handlers = {signal.SIGINT: ignore, signal.SIGQUIT: ignore, signal.SIGTERM: forward, signal.SIGHUP: forward}
    previous = {
        signum: signal.signal(signum, handler)
        for signum, handler in handlers.items()
        if signal.getsignal(signum) is not signal.SIG_IGN
    }
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
    """Exit with the agent's status; when a signal ended the agent, end this process with it too
    (the shell shows `Killed`, a script's loop stops on SIGINT), with no core file of its own."""
    if status < 0:
        signum = -status
        no_core_dump()
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no disposition to reset
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        sys.exit(128 + signum)  # a signal whose default action is not to terminate
    sys.exit(status)


class Interrupted(BaseException):
    """SIGTERM or SIGHUP while the agent is not running (the proxy starting, the exit line): the
    proxy is stopped and the run folder removed, as on Ctrl-C, then the wrapper dies of it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


def run_wrap(args: argparse.Namespace, agent_args: list[str]) -> None:
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # nohup's SIGHUP stays ignored
            signal.signal(signum, interrupted)
    try:
        status = Session(args, agent_args).run()
    except WrapError as exc:
        say(f"offload-proxy wrap: {exc}")
        sys.exit(exc.status)
    except KeyboardInterrupt:  # Ctrl-C before the agent started or after it (the proxy has been stopped)
        status = -signal.SIGINT
    except Interrupted as exc:
        status = -exc.signum
    exit_as(status)
