"""The `replay` command: arguments → stores, settings, progress bar → report files."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from proxy.core.settings import OffloadSettings
from proxy.replay.runner import FORMATS, Replayer, load_conversations, turns_of, upstream_for
from proxy.replay.report import estimate_warning, report_dict, table, write_outputs
from proxy.store import Store


def add_format_argument(replay: argparse.ArgumentParser) -> None:
    """The arguments proxy/cli.py leaves to this module, for the `replay` subcommand's parser:
    `--format chat|responses`, how summaries are made (`--inline-summaries`, `--summary-request`)
    and the latency simulation (`--summary-delay-ms`, `--turn-latency-ms`)."""
    replay.add_argument("--format", choices=FORMATS, default="chat",
                        help="Wire format to replay in: chat messages as recorded (default), the Responses "
                             "API input items a client would send for them, or the Anthropic Messages request.")
    replay.add_argument("--summary-delay-ms", type=_milliseconds, default=None,
                        help="The built-in summariser answers after this long (real sleeps); the report then "
                             "gives each turn's added latency (p50, p99, max) and the stalled turns (added "
                             "latency above half this delay).")
    replay.add_argument("--turn-latency-ms", type=_milliseconds, default=0.0,
                        help="Each turn's simulated upstream takes this long after the pipeline (background "
                             "work may run meanwhile). Default 0.")
    replay.add_argument("--inline-summaries", action="store_true",
                        help="Make each summary in the turn that needs it, none ahead of time (as before "
                             "background summaries), instead of in the background as the server does.")
    replay.add_argument("--summary-request", choices=("prefix", "transcript"), default="prefix",
                        help="How summaries are asked for, as the server's option of that name: prefix (the "
                             "turn's own request, then an instruction; default) or transcript.")


def _milliseconds(value: str) -> float:
    number = float(value)
    if not 0 <= number <= 3_600_000:
        raise argparse.ArgumentTypeError(f"expected milliseconds from 0 to 3600000, got {value}")
    return number


def _settings(args: argparse.Namespace) -> OffloadSettings:
    values = {name: getattr(args, f"setting_{name}") for name in OffloadSettings.model_fields
              if getattr(args, f"setting_{name}", None) is not None}
    return OffloadSettings(**values)


def _store(args: argparse.Namespace) -> Store:
    if args.redis_url:
        from proxy.store.redis import RedisStore

        return RedisStore(args.redis_url)
    from proxy.store.sqlite import SQLiteStore

    return SQLiteStore(Path(args.data_dir or tempfile.mkdtemp(prefix="offload-replay-")))


def _progress(total: int):
    try:
        from tqdm import tqdm

        return tqdm(total=total, unit="turn", file=sys.stderr, disable=None)
    except ImportError:
        return None


async def run_replay(args: argparse.Namespace) -> dict:
    settings = _settings(args)
    conversations = load_conversations(Path(args.file))
    store = _store(args)
    delay = getattr(args, "summary_delay_ms", None)
    if delay is not None and args.upstream:
        print("offload-proxy replay: --summary-delay-ms delays the built-in summariser only; with --upstream the "
              "real one's answer time is what the latency figures show", file=sys.stderr, flush=True)
    upstream = upstream_for(args.upstream, 0 if args.upstream else delay or 0)
    key = args.api_key or os.environ.get("OPENAI_API_KEY", "")
    headers = [(b"authorization", f"Bearer {key}".encode())] if key else []
    format = getattr(args, "format", None) or "chat"
    replayer = Replayer(store, settings, upstream, headers, args.model, format=format, summary_delay_ms=delay,
                        turn_latency_ms=getattr(args, "turn_latency_ms", 0.0) or 0.0,
                        inline_summaries=bool(getattr(args, "inline_summaries", False)),
                        summary_request=getattr(args, "summary_request", None) or "prefix")
    counting = replayer.token_counting()
    warning = estimate_warning(counting)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    bar = _progress(sum(len(turns_of(c["messages"])) for c in conversations))
    results = []
    try:
        for index, conv in enumerate(conversations):
            results.append(await replayer.conversation(conv, (lambda: bar.update(1)) if bar else (lambda: None),
                                                       index))
            if not results[-1].store_was_fresh:
                print(f"offload-proxy replay: WARNING: the store already holds a replay of {results[-1].id!r}: its "
                      f"summaries are reused, so fewer are counted than on a fresh store (omit --data-dir for a "
                      f"temporary store, or use an empty one)", file=sys.stderr, flush=True)
    finally:
        if bar:
            bar.close()
        await upstream.aclose()
        await store.close()
    report = report_dict(results, settings, counting, format)
    report["summaries_made"] = "inline" if replayer.inline_summaries else "background"
    report["summary_request"] = replayer.summary_request
    written = write_outputs(report, Path(args.out))
    print(table(report))
    print("wrote " + ", ".join(str(p) for p in written[:3]) + (" …" if len(written) > 3 else ""))
    if warning:  # again, after the table, where it cannot be missed
        print(warning, file=sys.stderr, flush=True)
    return report
