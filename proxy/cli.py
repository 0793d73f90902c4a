"""Command line: `offload-proxy serve …` (also `python -m proxy serve …`), `replay`, `demo`, `wrap`.

What `serve` says once at startup (`banner_lines`): where it listens, where each API goes, where
content is stored, what it offloads, who may call it, and where its dashboard and metrics are.
Built from the settings alone (no store, no network), so it goes out before the first worker
starts. A Redis URL is shown without its password; no key or token is ever shown."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from email.utils import formatdate
from typing import Any, TextIO, cast
from urllib.parse import urlsplit, urlunsplit

from proxy import __version__
from proxy.config import (
    ServerSettings,
    add_settings_options,
    listen_problem,
    resolve_settings,
    settings_error,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="offload-proxy",
        description=(
            "Context-offload proxy for the OpenAI (Chat Completions, Responses) and Anthropic (Messages) APIs. "
            "Point the OpenAI SDK's base_url at http://HOST:PORT/v1, the Anthropic SDK's at http://HOST:PORT."
        ),
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="Run the proxy server.")
    add_settings_options(serve)
    replay = commands.add_parser(
        "replay", help="Replay conversations (JSONL) turn by turn through the offload pipeline and report."
    )
    replay.add_argument("file", help="JSONL: one conversation per line with 'messages' and optional 'tools'.")
    replay.add_argument(
        "--out",
        default=None,
        help="Directory for report.json and charts (default replay-out; with --target: report.json, only when given).",
    )
    replay.add_argument(
        "--upstream",
        default=None,
        help="Real summariser upstream (default: a built-in fake); with "
        "--live, the model's API (default OpenAI's; Anthropic's for "
        "--format anthropic).",
    )
    replay.add_argument(
        "--api-key",
        default=None,
        help="Key for --upstream, or for --target and --live the caller's "
        "key (default: $OPENAI_API_KEY; $ANTHROPIC_API_KEY for "
        "--format anthropic with --target or --live).",
    )
    replay.add_argument(
        "--model",
        default=None,
        help="Model of the replayed requests (token counting, summaries; "
        "default gpt-4o; with --live, each trace's own).",
    )
    replay.add_argument("--redis-url", default=None, help="Replay against this Redis instead of an embedded store.")
    replay.add_argument("--data-dir", default=None, help="Embedded store location (default: a temporary one).")
    from proxy.replay import add_format_argument, add_live_arguments, add_target_arguments

    add_format_argument(replay)
    add_target_arguments(replay)
    add_live_arguments(replay)
    from proxy.core.settings import OffloadSettings

    for name, field in OffloadSettings.model_fields.items():
        if name not in ("tenant", "session"):
            replay.add_argument(
                f"--{name.replace('_', '-')}",
                dest=f"setting_{name}",
                default=None,
                help=f"Offload setting (default {field.default}).",
            )
    demo = commands.add_parser(
        "demo",
        help="See it work with no key and no network: a bundled fake upstream, a bundled agent "
        "conversation replayed in each format, a table, and the dashboard until Ctrl-C.",
    )
    from proxy.demo import add_arguments as add_demo_arguments

    add_demo_arguments(demo)
    wrap = commands.add_parser(
        "wrap",
        help="Run a coding agent (claude, codex, opencode, aider) through a proxy of its own: "
        "offload-proxy wrap claude [proxy options] [-- claude's arguments].",
    )
    from proxy.wrap import add_arguments as add_wrap_arguments

    add_wrap_arguments(wrap)
    return parser


def serve(settings: ServerSettings, *, notes: Sequence[str] = ()) -> None:
    """`notes`: warnings shown after the banner, in the log format."""
    import logging

    import uvicorn

    if settings.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # prometheus-client's multi-process mode: every worker writes its samples here.
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="offload-metrics-")
    # Worker processes rebuild their settings from the environment, so export the resolved ones.
    for name, value in settings.model_dump(exclude_none=True).items():
        os.environ[f"OFFLOAD_{name.upper()}"] = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
    json_logs = settings.log_format == "json"
    from proxy.http import telemetry

    telemetry.install()  # the supervisor's lines too (the workers install it in create_app)
    if json_logs:  # uvicorn's own messages as JSON lines too
        from proxy.http.telemetry import configure_logging

        configure_logging(settings.log_level)
    plain = show_banner(settings)
    for note in notes:
        if plain:
            print(f"offload-proxy: warning: {note}", file=sys.stderr, flush=True)
        else:
            logging.getLogger("proxy.startup").warning(note)
    from proxy.http.app import frame_limit

    uvicorn.run(
        **uvicorn_options(
            "proxy.cli:create_served_app",
            factory=True,
            host=settings.host,
            port=settings.port,
            workers=settings.workers,
            log_level=settings.log_level,
            timeout_graceful_shutdown=settings.shutdown_grace,
            log_config=None if json_logs else uvicorn.config.LOGGING_CONFIG,
            access_log=False,  # the proxy's own access line (proxy.http.telemetry) is the one line per request
            ws_max_size=frame_limit(settings),
        )
    )


def show_banner(settings: ServerSettings) -> bool:
    """The startup banner (`banner_lines`), once, from the process that starts the workers, on
    stderr (where the logs go): an aligned block of plain lines with --log-format text, or when
    stderr is a terminal (a person reads it); else, with --log-format json, one log record per
    line, as the log collector reads the rest. Whether it was plain."""
    import logging

    from proxy.http.caller import load_tenants_file

    lines = banner_lines(settings, load_tenants_file(settings.tenants_file))
    plain = settings.log_format == "text" or _is_terminal(sys.stderr)
    if plain:
        print("\n".join(lines), file=sys.stderr, flush=True)
    else:
        for line in lines:
            logging.getLogger("proxy.startup").info(line.strip())
    return plain


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced by an object without one, or closed
        return False


def uvicorn_options(app: Any, **overrides: Any) -> dict[str, Any]:
    """The keyword arguments of uvicorn.run / uvicorn.Config for serving `app`: used by `serve` and
    by the test harness alike, so the tests run the server as it is deployed.

    uvicorn's own Date and Server headers are off: it would add them to every response, so a
    relayed one would carry two of each (the upstream's and uvicorn's). `DateHeader` gives a Date
    to the responses that have none (the proxy's own); a relayed response keeps the upstream's
    Date and Server. An import string names a factory that wraps its app itself."""
    options: dict[str, Any] = {
        "app": app if isinstance(app, str) else DateHeader(app),
        "server_header": False,
        "date_header": False,
        "lifespan": "on",
        "loop": "auto",  # uvloop when installed
        "http": "auto",  # httptools when installed
        "timeout_keep_alive": 75,
        # uvicorn's WebSocket protocol, bounding the pongs owed to a client that does not read
        "ws": "proxy.http.websocket.wire:Protocol",
        # no permessage-deflate: uvicorn would inflate each frame on the event loop, 60 MiB from 62 KB
        # on the wire (`proxy.http.websocket.wire`, docs/websocket.md)
        "ws_per_message_deflate": False,
        # the largest WebSocket frame read (`proxy.http.app.frame_limit`); uvicorn pings every 20 s
        "ws_max_size": getattr(getattr(app, "state", None), "ws_max_size", 64 * 1024 * 1024 + 64 * 1024),
    }
    options.update(overrides)
    return options


def create_served_app() -> Any:
    """uvicorn factory of `serve`: the app from OFFLOAD_* variables, with DateHeader."""
    from proxy.http.app import create_app_from_env

    return DateHeader(create_app_from_env())


_date_cache: list[Any] = [0, b""]


def http_date() -> bytes:
    """The current time as an HTTP Date value, formatted once per second."""
    now = int(time.time())
    if now != _date_cache[0]:
        _date_cache[:] = [now, formatdate(now, usegmt=True).encode()]
    return cast(bytes, _date_cache[1])  # [second, its Date value]


class DateHeader:
    """ASGI wrapper: a response without a Date header gets one (RFC 9110 §6.6.1: an origin server
    with a clock sends Date); a response that has one (a relayed upstream answer) keeps it as is."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_date(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or ())
                if not any(name.lower() == b"date" for name, _ in headers):
                    message = {**message, "headers": [*headers, (b"date", http_date())]}
            await send(message)

        await self.app(scope, receive, send_with_date)


def replay(args: argparse.Namespace) -> None:
    import asyncio

    from proxy.replay import LiveError, ReplayInputError, TargetError, live_run, run_live, run_replay, run_target

    try:
        if args.live:
            asyncio.run(run_live(live_run(args)))
            return
        asyncio.run(run_target(args) if args.target else run_replay(args))
    except (ReplayInputError, TargetError, LiveError) as exc:  # one line (the input's line, the proxy), not a traceback
        sys.exit(f"offload-proxy replay: {exc}")
    except KeyboardInterrupt:
        sys.exit("offload-proxy replay: interrupted" + (" (a rerun with the same --out resumes)" if args.live else ""))


def subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of the subcommand `name` (argparse keeps them in its subparsers action's choices)."""
    action: argparse._SubParsersAction[argparse.ArgumentParser] = next(
        a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
    )
    return action.choices[name]


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["wrap"]:  # the agent's own arguments, after `--`, are not ours to parse
        from proxy.wrap import run_wrap, split_agent_args, unknown_arguments

        ours, agent_args = split_agent_args(argv)
        args, unknown = parser.parse_known_args(ours)
        if unknown:  # wrap's own usage line above the message, not the top-level one
            subcommand(parser, "wrap").error(unknown_arguments(args.agent, unknown))
        run_wrap(args, agent_args)
        return
    args = parser.parse_args(argv)
    if args.command == "replay":
        from proxy.replay import compare_usage_error, live_usage_error, target_usage_error

        problem = live_usage_error(args) or (
            None if args.live else target_usage_error(args) or compare_usage_error(args)
        )
        if problem is not None:
            parser.error(f"replay: {problem}")  # exit status 2, as argparse's own errors
    from proxy.core.tokens import discover_tiktoken_cache

    discover_tiktoken_cache()  # offline encodings in ../shared/tiktoken, for serve and replay alike
    if args.command == "replay":
        replay(args)
    elif args.command == "demo":
        from proxy.demo import run_demo

        sys.exit(run_demo(args))
    elif args.command == "serve":
        try:
            settings = resolve_settings(args)
        except Exception as exc:  # pydantic ValidationError: show it, not a traceback
            sys.exit(settings_error(exc))
        try:
            check_tenants_file(settings)
        except (OSError, ValueError) as exc:  # tomllib/yaml errors are ValueErrors too
            sys.exit(f"offload-proxy: invalid --tenants-file {settings.tenants_file}: {exc}")
        if settings.redis_url is None:
            try:
                settings.data_dir.mkdir(parents=True, exist_ok=True)
                (settings.data_dir / ".writable").touch()
            except OSError as exc:
                sys.exit(f"offload-proxy: --data-dir {settings.data_dir} is not a writable folder: {exc.strerror}")
        if (problem := listen_problem(settings.host, settings.port)) is not None:
            sys.exit(f"offload-proxy: {problem}")
        from proxy.offload.canary import CanaryMismatch, after_serve, startup_check

        try:  # replicas sharing a store share its secrets (proxy.offload.canary)
            note = startup_check(settings)
        except CanaryMismatch as exc:
            sys.exit(f"offload-proxy: {exc}")
        serve(settings, notes=[note] if note else [])
        after_serve(settings)  # a mismatch the workers found once the store answered: status 1


def check_tenants_file(settings: ServerSettings) -> None:
    """Read and check the tenants file before any worker starts (a worker would die on it)."""
    from proxy.http.caller import Gatekeeper, load_tenants_file

    Gatekeeper(
        load_tenants_file(settings.tenants_file),
        server_key=settings.upstream_api_key,
        anthropic_key=settings.anthropic_api_key,
        anthropic_upstream=settings.anthropic_upstream,
        allow_anonymous=settings.allow_anonymous,
        upstream_allowlist=settings.upstream_allowlist,
    )


def redacted_url(url: str) -> str:
    """`url` without its password (`redis://user:***@host`) nor its query's values (redis-py
    also reads `?password=`); the rest as written."""
    parts = urlsplit(url)
    if parts.password is not None:
        host = parts.netloc.rpartition("@")[2]
        parts = parts._replace(netloc=f"{parts.username or ''}:***@{host}")
    if parts.query:
        parts = parts._replace(query="&".join(f"{pair.partition('=')[0]}=***" for pair in parts.query.split("&")))
    return urlunsplit(parts)


def listen_url(settings: ServerSettings) -> str:
    host = settings.host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{settings.port}"


def _store(settings: ServerSettings) -> str:
    if settings.redis_url:
        cluster = " (cluster)" if settings.redis_cluster or "+cluster://" in settings.redis_url else ""
        return f"Redis {redacted_url(settings.redis_url)}{cluster}"
    return f"SQLite {(settings.data_dir / 'offload.sqlite3').resolve()}"


def _offload(settings: ServerSettings, tenants: int) -> str:
    defaults = settings.request_defaults()
    compacted = (
        f"its tool results over {defaults.tool_result_limit()} tokens compacted (the newest too over "
        f"{defaults.max_fresh_tool_message_tokens})"
    )
    what = {
        "auto": f"{compacted}, then older turns summarised if still too large",
        "compact": compacted,
        "compress": "its older turns summarised",
    }.get(defaults.mode)
    if defaults.mode == "observe":
        line = "mode observe (requests go upstream unchanged; what auto would have done recorded beside them)"
    elif what is None:
        line = "mode off (requests go upstream unchanged)"
    else:
        line = (
            f"mode {defaults.mode}: a history over {defaults.max_total_tokens} tokens gets {what}; reload tools "
            f"{'on' if defaults.reload_tools else 'off'} (at most {defaults.max_reload_rounds} rounds)"
        )
    if defaults.holdout > 0 and defaults.mode not in ("off", "observe"):
        line += (
            f"; holdout: {defaults.holdout:.0%} of sessions forwarded unchanged as a control, the arms "
            "compared in the statistics"
        )
    overrides = (
        f"; {tenants} tenant(s) and X-Offload-* headers may change them"
        if tenants
        else "; X-Offload-* headers may change them"
    )
    return line + overrides


def _auth(settings: ServerSettings, tenants: Mapping[str, Mapping[str, Any]]) -> str:
    keyed = sum(1 for entry in tenants.values() if entry.get("api_keys"))
    held = [
        name
        for name, key in (
            ("--upstream-api-key", settings.upstream_api_key),
            ("--anthropic-api-key", settings.anthropic_api_key),
        )
        if key
    ]
    if held:
        line = (
            f"proxy keys required ({keyed} tenant(s) with api_keys); the upstream gets the operator's key "
            f"({', '.join(held)}) or a tenant's own"
        )
    else:
        line = "client keys relayed: each caller's own provider key goes upstream and is its namespace"
        if keyed:
            line += f"; proxy keys of {keyed} tenant(s) accepted too"
    if settings.allow_anonymous:
        line += "; anonymous requests served too (--allow-anonymous: one shared namespace)"
    return line


def _context_management(settings: ServerSettings) -> str:
    """Who applies the providers' context management, for each of the server's upstreams."""
    from proxy.upstream.base_url import emulates

    setting = settings.request_defaults().context_management
    who = {
        base: "emulated by the proxy" if emulates(setting, base) else "relayed to the provider"
        for base in (settings.upstream_base, settings.anthropic_base)
    }
    return (
        f"{setting}: openai {who[settings.upstream_base]}, anthropic {who[settings.anthropic_base]} "
        "(--context-management)"
    )


def _websocket(settings: ServerSettings) -> str:
    """The Responses WebSocket mode: served, and how its responses reach the upstream."""
    per_tenant = settings.ws_connections_per_tenant or "no limit"
    root = listen_url(settings).replace("http://", "ws://", 1)
    return (
        f"{root}/v1/responses served (Responses WebSocket mode; the upstream reached over HTTP/SSE); "
        f"{per_tenant} connection(s) per tenant, {settings.ws_connections or 'no limit'} per worker, "
        f"idle {settings.ws_idle_timeout:g} s"
    )


def banner_lines(settings: ServerSettings, tenants: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
    """The startup banner, one string per line. `tenants`: the tenants file's tables."""
    tenants = tenants or {}
    root = listen_url(settings)
    metrics = f"{root}/metrics" + (" (admin token required)" if settings.admin_token else "")
    return [
        f"offload-proxy {__version__}",
        f"  listening   {root}  (OpenAI SDKs: base_url {root}/v1; Anthropic SDKs and Claude Code: {root})",
        f"  openai      {settings.upstream_base}/…  (chat/completions and responses managed, the rest relayed)",
        f"  websocket   {_websocket(settings)}",
        f"  anthropic   {settings.anthropic_base}/…  (messages managed, the rest relayed)",
        f"  store       {_store(settings)}",
        f"  offload     {_offload(settings, len(tenants))}",
        f"  context     {_context_management(settings)}",
        f"  auth        {_auth(settings, tenants)}",
        f"  dashboard   {root}/dashboard",
        f"  metrics     {metrics}",
        f"  workers     {settings.workers}; logs {settings.log_format} at {settings.log_level}",
    ]
