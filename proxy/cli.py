"""Command line: `offload-proxy serve …` (also `python -m proxy serve …`)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence

from proxy.config import ServerSettings


def _add_settings_options(parser: argparse.ArgumentParser) -> None:
    """One option per ServerSettings field, documented from the field itself."""
    for name, field in ServerSettings.model_fields.items():
        env = f"OFFLOAD_{name.upper()}"
        default = field.default
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            dest=name,
            default=None,
            metavar=name.upper(),
            help=f"{field.description} [env {env}; default {default}]",
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="offload-proxy",
        description="OpenAI-compatible context-offload proxy. Point the OpenAI SDK's base_url at http://HOST:PORT/v1.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="Run the proxy server.")
    _add_settings_options(serve)
    replay = commands.add_parser(
        "replay", help="Replay conversations (JSONL) turn by turn through the offload pipeline and report."
    )
    replay.add_argument("file", help="JSONL: one conversation per line with 'messages' and optional 'tools'.")
    replay.add_argument("--out", default="replay-out", help="Directory for report.json and charts.")
    replay.add_argument("--upstream", default=None, help="Real summariser upstream (default: a built-in fake).")
    replay.add_argument("--api-key", default=None, help="Key for --upstream (default: $OPENAI_API_KEY).")
    replay.add_argument("--model", default="gpt-4o", help="Model of the replayed requests (token counting, summaries).")
    replay.add_argument("--redis-url", default=None, help="Replay against this Redis instead of an embedded store.")
    replay.add_argument("--data-dir", default=None, help="Embedded store location (default: a temporary one).")
    from proxy.offload_settings import OffloadSettings

    for name, field in OffloadSettings.model_fields.items():
        if name not in ("tenant", "session"):
            replay.add_argument(f"--{name.replace('_', '-')}", dest=f"setting_{name}", default=None,
                                help=f"Offload setting (default {field.default}).")
    return parser


def resolve_settings(args: argparse.Namespace) -> ServerSettings:
    """CLI values override the environment, which overrides the defaults."""
    overrides = {
        name: getattr(args, name)
        for name in ServerSettings.model_fields
        if getattr(args, name, None) is not None
    }
    for name, value in overrides.items():
        if ServerSettings.model_fields[name].annotation in (dict[str, int], list[str]):
            overrides[name] = json.loads(value)
    return ServerSettings(**overrides)


def serve(settings: ServerSettings) -> None:
    import uvicorn

    if settings.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # prometheus-client's multi-process mode: every worker writes its samples here.
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="offload-metrics-")
    # Worker processes rebuild their settings from the environment, so export the resolved ones.
    for name, value in settings.model_dump(exclude_none=True).items():
        os.environ[f"OFFLOAD_{name.upper()}"] = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
    json_logs = settings.log_format == "json"
    if json_logs:  # uvicorn's own messages as JSON lines too; our access line replaces its own
        from proxy.observe import configure_logging

        configure_logging(settings.log_level)
    uvicorn.run(
        "proxy.app:create_app_from_env",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        log_level=settings.log_level,
        loop="auto",  # uvloop when installed
        http="auto",  # httptools when installed
        timeout_keep_alive=75,
        timeout_graceful_shutdown=settings.shutdown_grace,
        log_config=None if json_logs else uvicorn.config.LOGGING_CONFIG,
        access_log=not json_logs,
    )


def replay(args: argparse.Namespace) -> None:
    import asyncio

    from proxy.replay import ReplayInputError
    from proxy.replay_cli import run_replay

    try:
        asyncio.run(run_replay(args))
    except ReplayInputError as exc:  # a one-line error naming the line, not a traceback
        sys.exit(f"offload-proxy replay: {exc}")


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from proxy.tokens import discover_tiktoken_cache

    discover_tiktoken_cache()  # offline encodings in ../shared/tiktoken, for serve and replay alike
    if args.command == "replay":
        replay(args)
    elif args.command == "serve":
        try:
            settings = resolve_settings(args)
        except Exception as exc:  # pydantic ValidationError: show it, not a traceback
            sys.exit(f"offload-proxy: invalid settings: {exc}")
        serve(settings)
