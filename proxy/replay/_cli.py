"""The `replay` command: arguments → stores, settings, progress bar → report files."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proxy.core.settings import OffloadSettings
from proxy.replay import _report as compare
from proxy.replay import _simulation as bill
from proxy.replay._metrics import DEFAULT_PRICING, PRICINGS
from proxy.replay._report import MASK_KEEP, estimate_warning, progress_bar, report_dict, table, write_outputs
from proxy.replay._runner import FORMATS, Replayer, load_conversations, turns_of, upstream_for, view_for
from proxy.replay._simulation import Gaps, GapsError
from proxy.replay._simulation import parse as parse_gaps
from proxy.replay._target import DEFAULT_CONCURRENCY, api_key_of, target_url
from proxy.store import Store

DEFAULT_MODEL = "gpt-4o"  # `--model`'s default, but with --live
DEFAULT_LIVE_OUT = "replay-live"  # `--live`'s output folder (its journal: what a rerun skips)

if TYPE_CHECKING:
    from proxy.replay._live import LiveRun


def add_format_argument(replay: argparse.ArgumentParser) -> None:
    """The arguments proxy/cli.py leaves to this module, for the `replay` subcommand's parser:
    `--format chat|responses`, how summaries are made (`--inline-summaries`, `--summary-request`)
    and the latency simulation (`--summary-delay-ms`, `--turn-latency-ms`)."""
    replay.add_argument(
        "--format",
        choices=FORMATS,
        default="chat",
        help="Wire format to replay in: chat messages as recorded (default), the Responses "
        "API input items a client would send for them, or the Anthropic Messages request.",
    )
    replay.add_argument(
        "--summary-delay-ms",
        type=_milliseconds,
        default=None,
        help="The built-in summariser answers after this long (real sleeps); the report then "
        "gives each turn's added latency (p50, p99, max) and the stalled turns (added "
        "latency above half this delay).",
    )
    replay.add_argument(
        "--turn-latency-ms",
        type=_milliseconds,
        default=None,
        help="Each turn's simulated upstream takes this long after the pipeline (background "
        "work may run meanwhile). Default 0.",
    )
    replay.add_argument(
        "--inline-summaries",
        action="store_true",
        help="Make each summary in the turn that needs it, none ahead of time (as before "
        "background summaries), instead of in the background as the server does.",
    )
    replay.add_argument(
        "--compare",
        action="store_true",
        help="Also measure the simple strategies on the same turns, side by side with the proxy: "
        "observation masking (tool results but the last --mask-keep replaced by a "
        "placeholder) and middle-out truncation (whole messages dropped from the middle "
        "down to --max-total-tokens).",
    )
    replay.add_argument(
        "--mask-keep",
        type=_mask_keep,
        default=None,
        help=f"With --compare: tool results observation masking keeps (default {MASK_KEEP}).",
    )
    replay.add_argument(
        "--pricing",
        choices=tuple(PRICINGS),
        default=None,
        help="Prompt-cache prices the cache cost (cache_cost_ratio, the table's cache and floor "
        "columns) is given at: openai (default; cache reads at 10 %%, no write premium, the "
        "figures before this option) or anthropic (reads at 10 %%, writes at 1.25 × for the "
        "5-minute cache). report.json's cost_breakdown has both.",
    )
    replay.add_argument(
        "--turn-gaps",
        type=_gaps,
        default=None,
        metavar="SPEC",
        help="Bill the replay on a clock (the trace's own message timestamps where every turn has "
        "one, else these gaps between turns): 30s (fixed), exp:45s (exponential, that mean) or "
        "mix:30s,0.1@600s (30 s, an idle pause of 600 s with probability 0.1). The report then "
        "gives what the provider of --pricing bills (its prompt cache's TTL, write premium, "
        "minimum and granularity): the raw history with and without client caching, and the "
        "proxy's forwarded turns and summary calls with and without its cache control, and "
        "with keep-alive pings (at the server's default limits, and at each smallest prefix "
        "of a sweep).",
    )
    replay.add_argument(
        "--cache-cuts",
        choices=("on", "off"),
        default=None,
        help="With --turn-gaps: cut as the server does, with the session's cache in mind (on, the "
        "default: a cut due soon made when the cache is cold, a newer cut that would not pay "
        "for itself held back), or without (off), to bill the difference.",
    )
    replay.add_argument(
        "--gap-seed",
        type=int,
        default=0,
        help="Seed of the random gaps of --turn-gaps (default 0): the same seed, the same clock.",
    )
    replay.add_argument(
        "--summary-request",
        choices=("prefix", "transcript"),
        default=None,
        help="How summaries are asked for, as the server's option of that name: prefix (the "
        "turn's own request, then an instruction; default) or transcript.",
    )


def add_live_arguments(replay: argparse.ArgumentParser) -> None:
    """`--live` and its options (`proxy.replay._live`)."""
    replay.add_argument(
        "--live",
        action="store_true",
        help="Send each turn to a real model with your key, raw and through the proxy (an in-process "
        "one, or --target's), one after the other, and compare the model's next actions (the "
        "tool called, its arguments, the text, the finish reason) and the billed cost of both. "
        "--upstream: the model's API (default: OpenAI's for chat and responses, Anthropic's "
        "for anthropic); --model: else each trace's own. Resumable: a rerun with the same "
        f"--out (default {DEFAULT_LIVE_OUT}) skips the turns answered.",
    )
    replay.add_argument(
        "--max-turns", type=_count, default=None, metavar="N", help="With --live: the first N turns of each trace only."
    )
    replay.add_argument(
        "--sample",
        type=_count,
        default=None,
        metavar="N",
        help="With --live: N traces drawn at random (reproducibly: --seed) instead of all.",
    )
    replay.add_argument("--seed", type=int, default=0, help="With --live --sample: the draw's seed (default 0).")
    replay.add_argument(
        "--yes", action="store_true", help="With --live: send without asking (needed when stdin is not a terminal)."
    )
    replay.add_argument(
        "--prices",
        default=None,
        metavar="SPEC",
        help="With --live: prices over the built-in table, as serve's --prices (model=input/cached/output, …).",
    )


def add_target_arguments(replay: argparse.ArgumentParser) -> None:
    """`--target URL` and `--concurrency N`: send the turns to a running proxy (`proxy.replay._target`)."""
    replay.add_argument(
        "--target",
        type=target_url,
        default=None,
        metavar="URL",
        help="Send every turn over HTTP to the proxy running at URL (with or without /v1), "
        "one X-Offload-Session per conversation, so the traffic shows on its statistics "
        "and dashboard; its own upstream answers. Needs --api-key (or $OPENAI_API_KEY; "
        "$ANTHROPIC_API_KEY for --format anthropic).",
    )
    replay.add_argument(
        "--concurrency",
        type=_concurrency,
        default=None,
        help=f"With --target: conversations sent at once (default {DEFAULT_CONCURRENCY}); the "
        f"turns of one conversation go in order.",
    )


IN_PROCESS_ONLY = (
    ("redis_url", "--redis-url"),
    ("data_dir", "--data-dir"),
    ("upstream", "--upstream"),
    ("summary_delay_ms", "--summary-delay-ms"),
    ("turn_latency_ms", "--turn-latency-ms"),
    ("inline_summaries", "--inline-summaries"),
    ("summary_request", "--summary-request"),
    ("compare", "--compare"),
    ("mask_keep", "--mask-keep"),
    ("pricing", "--pricing"),
    ("turn_gaps", "--turn-gaps"),
    ("cache_cuts", "--cache-cuts"),
)


LIVE_ONLY = (("max_turns", "--max-turns"), ("sample", "--sample"), ("yes", "--yes"), ("prices", "--prices"))
NOT_LIVE = tuple((dest, flag) for dest, flag in IN_PROCESS_ONLY if dest != "upstream") + (
    ("concurrency", "--concurrency"),
)


def live_usage_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the `replay` arguments as regards `--live`, else None: its options
    without it, the in-process replay's with it, no key, an --upstream that is not a base URL."""
    if not getattr(args, "live", False):
        given = [flag for dest, flag in LIVE_ONLY if getattr(args, dest, None) not in (None, False)]
        return f"{', '.join(given)} apply to --live only" if given else None
    given = [flag for dest, flag in NOT_LIVE if getattr(args, dest, None) not in (None, False)]
    if given:
        return (
            f"--live cannot be combined with {', '.join(given)}: they set up the in-process replay "
            f"(the offload settings go to the proxy arm as X-Offload-* headers)"
        )
    format = getattr(args, "format", None) or "chat"
    if not api_key_of(args):
        env = "ANTHROPIC_API_KEY" if format == "anthropic" else "OPENAI_API_KEY"
        return f"--live needs --api-key KEY (or ${env}): the model is called with your credential"
    from proxy.replay._live import upstream_of, upstream_problem

    if problem := upstream_problem(upstream_of(args, format), format):
        return f"--upstream: {problem}"
    if getattr(args, "prices", None) is not None:
        from proxy.stats import parse_prices

        try:
            parse_prices(args.prices)
        except ValueError as exc:
            return f"--prices: {exc}"
    return None


def live_run(args: argparse.Namespace) -> LiveRun:
    """The `replay --live` run the (checked) arguments describe."""
    from proxy.replay._live import LiveRun, setting_headers, upstream_of
    from proxy.stats import PriceTable, parse_prices

    format = getattr(args, "format", None) or "chat"
    return LiveRun(
        file=Path(args.file),
        out=Path(args.out or DEFAULT_LIVE_OUT),
        format=format,
        upstream=upstream_of(args, format),
        target=args.target,
        api_key=api_key_of(args) or "",
        model=args.model,
        settings=setting_headers(args),
        sample=args.sample,
        seed=args.seed,
        max_turns=args.max_turns,
        yes=args.yes,
        prices=PriceTable(parse_prices(args.prices) if args.prices else None),
    )


def target_usage_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the `replay` arguments as regards `--target`, else None: options of the
    in-process replay given with it, `--concurrency` without it, or no key for it."""
    if not getattr(args, "target", None):
        return "--concurrency applies to --target only" if getattr(args, "concurrency", None) else None
    given = [flag for dest, flag in IN_PROCESS_ONLY if getattr(args, dest, None) not in (None, False)]
    given += [
        f"--{name.replace('_', '-')}"
        for name in OffloadSettings.model_fields
        if getattr(args, f"setting_{name}", None) is not None
    ]
    if given:
        return (
            f"--target cannot be combined with {', '.join(given)}: they set up the in-process replay, "
            f"while the running proxy uses its own store, upstream and settings"
        )
    if not api_key_of(args):
        env = "ANTHROPIC_API_KEY" if getattr(args, "format", None) == "anthropic" else "OPENAI_API_KEY"
        return f"--target needs --api-key KEY (or ${env}): the credential the proxy knows the caller by"
    return None


def compare_usage_error(args: argparse.Namespace) -> str | None:
    """`--mask-keep` without `--compare`, else None."""
    if getattr(args, "mask_keep", None) is not None and not getattr(args, "compare", False):
        return "--mask-keep applies to --compare only"
    return None


def _whole_number(what: str, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from 1 to `high` ("expected <what> from 1 to <high>")."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = 0
        if not 1 <= number <= high:
            raise argparse.ArgumentTypeError(f"expected {what} from 1 to {high}, got {value}")
        return number

    return parse


_concurrency = _whole_number("a number of conversations", 256)
_count = _whole_number("a number", 1_000_000)


def _mask_keep(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = -1
    if not 0 <= number <= 10_000:
        raise argparse.ArgumentTypeError(f"expected a number of tool results from 0 to 10000, got {value}")
    return number


def _gaps(value: str) -> Gaps:
    try:
        return parse_gaps(value)
    except GapsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _milliseconds(value: str) -> float:
    number = float(value)
    if not 0 <= number <= 3_600_000:
        raise argparse.ArgumentTypeError(f"expected milliseconds from 0 to 3600000, got {value}")
    return number


def _settings(args: argparse.Namespace) -> OffloadSettings:
    values = {
        name: getattr(args, f"setting_{name}")
        for name in OffloadSettings.model_fields
        if getattr(args, f"setting_{name}", None) is not None
    }
    return OffloadSettings(**values)


def _store(args: argparse.Namespace) -> Store:
    if args.redis_url:
        from proxy.store.redis import RedisStore

        return RedisStore(args.redis_url)
    from proxy.store.sqlite import SQLiteStore

    return SQLiteStore(Path(args.data_dir or tempfile.mkdtemp(prefix="offload-replay-")))


def compared(
    args: argparse.Namespace,
    conversations: list[dict[str, Any]],
    settings: OffloadSettings,
    *,
    format: str,
    report: dict[str, Any],
) -> dict[str, Any]:
    """`--compare`: the baselines' figures on the same conversations, with the proxy's (the replay's)."""
    keep = MASK_KEEP if getattr(args, "mask_keep", None) is None else args.mask_keep
    rows = compare.compare(
        conversations,
        format=format,
        view=view_for(format),
        budget=settings.max_total_tokens,
        model=args.model,
        keep=keep,
        pricing=PRICINGS[report.get("pricing", DEFAULT_PRICING)],
    )
    return compare.with_proxy(rows, report["overall"], f"offload proxy (mode {settings.mode})")


def with_model(args: argparse.Namespace) -> argparse.Namespace:
    """`args` with `--model`'s default (DEFAULT_MODEL) when it was not given (`--live` takes each trace's)."""
    return argparse.Namespace(**{**vars(args), "model": getattr(args, "model", None) or DEFAULT_MODEL})


async def run_replay(args: argparse.Namespace) -> dict[str, Any]:
    args = with_model(args)
    # an encoding that cannot be loaded is said once, after the table (`estimate_warning`), not
    # also by the token counter's own log line
    logging.getLogger("proxy.core.tokens").setLevel(logging.ERROR)
    settings = _settings(args)
    conversations = load_conversations(Path(args.file))
    store = _store(args)
    delay = getattr(args, "summary_delay_ms", None)
    if delay is not None and args.upstream:
        print(
            "offload-proxy replay: --summary-delay-ms delays the built-in summariser only; with --upstream the "
            "real one's answer time is what the latency figures show",
            file=sys.stderr,
            flush=True,
        )
    upstream = upstream_for(args.upstream, 0 if args.upstream else delay or 0)
    key = args.api_key or os.environ.get("OPENAI_API_KEY", "")
    headers = [(b"authorization", f"Bearer {key}".encode())] if key else []
    format = getattr(args, "format", None) or "chat"
    replayer = Replayer(
        store,
        settings,
        upstream,
        headers=headers,
        model=args.model,
        format=format,
        summary_delay_ms=delay,
        turn_latency_ms=getattr(args, "turn_latency_ms", 0.0) or 0.0,
        inline_summaries=bool(getattr(args, "inline_summaries", False)),
        summary_request=getattr(args, "summary_request", None) or "prefix",
        pricing=getattr(args, "pricing", None) or DEFAULT_PRICING,
        gaps=getattr(args, "turn_gaps", None),
        gap_seed=getattr(args, "gap_seed", 0) or 0,
        cache_cuts=(getattr(args, "cache_cuts", None) or "on") == "on",
    )
    counting = replayer.token_counting()
    warning = estimate_warning(counting)
    bar = progress_bar(sum(len(turns_of(c["messages"])) for c in conversations))
    results = []
    try:
        for index, conv in enumerate(conversations):
            results.append(await replayer.conversation(conv, (lambda: bar.update(1)) if bar else (lambda: None), index))
            if not results[-1].store_was_fresh:
                print(
                    f"offload-proxy replay: WARNING: the store already holds a replay of {results[-1].id!r}: its "
                    f"summaries are reused, so fewer are counted than on a fresh store (omit --data-dir for a "
                    f"temporary store, or use an empty one)",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        if bar:
            bar.close()
        await upstream.aclose()
        await store.close()
    report = report_dict(results, settings, counting, format=format, pricing=replayer.pricing.name)
    if replayer.gaps is not None:
        report["bill"] = {
            **bill.summed([r.bill for r in results if r.bill is not None]),
            "turn_gaps": replayer.gaps.text,
            "gap_seed": replayer.gap_seed,
            "cache_cuts": replayer.cache_cuts,
            "keepalive_min_tokens": replayer.keepalive.min_tokens,
        }
    report["summaries_made"] = "inline" if replayer.inline_summaries else "background"
    report["summary_request"] = replayer.summary_request
    print(table(report))
    if "bill" in report:
        print(bill.table(report["bill"], pricing=replayer.pricing.name, gaps=replayer.gaps.text))  # type: ignore[union-attr]
    if getattr(args, "compare", False):
        report["compare"] = compared(args, conversations, settings, format=format, report=report)
        print()
        print(compare.compare_table(report["compare"]))
    written = write_outputs(report, Path(args.out or "replay-out"))  # once: a missing extra is said once
    print("wrote " + ", ".join(str(p) for p in written[:3]) + (" …" if len(written) > 3 else ""))
    if warning:  # once, after the table, where it cannot be missed
        print(warning, file=sys.stderr, flush=True)
    return report
