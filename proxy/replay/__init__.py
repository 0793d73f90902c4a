"""`python -m proxy replay`: conversations replayed turn by turn through the pipeline.

- `_runner`: the replayer, and the requests it sends (a chat trace's turns in the wire format
  replayed, read from a JSONL file);
- `_simulation`: the simulated summariser and the record of its requests, and what a replayed
  conversation is billed, on the clock of its turns (`--turn-gaps`);
- `_metrics`: the figures that are pure functions of the histories (prefix reuse, recall, cache
  cost, latency), where the cache-weighted cost goes (`cost_breakdown`), and the cheapest
  summary schedule a summariser's latency allows;
- `_report`: report.json, the printed table, the charts, leave-one-framework-out, and
  `--compare`, the simple strategies (observation masking, middle-out) beside the proxy;
- `_target`: `--target URL`, the turns sent to a running proxy over HTTP;
- `_live`: `--live`, the turns sent to a real model raw and through the proxy, with its journal;
  `_live_report`: the two arms' next actions compared, and the figures;
- `_cli`: the command line.

This surface is what the command line (`proxy.cli`) and the demo (`proxy.demo`) use.
"""

from proxy.replay._cli import (
    add_format_argument,
    add_live_arguments,
    add_target_arguments,
    compare_usage_error,
    live_run,
    live_usage_error,
    run_replay,
    target_usage_error,
)
from proxy.replay._live import LiveError, run_live
from proxy.replay._runner import ReplayInputError, answer_positions, load_conversations, turns_of
from proxy.replay._target import PATHS, TargetError, TurnResult, run_target, send_all

__all__ = [
    "PATHS",
    "LiveError",
    "ReplayInputError",
    "TargetError",
    "TurnResult",
    "add_format_argument",
    "add_live_arguments",
    "add_target_arguments",
    "answer_positions",
    "compare_usage_error",
    "live_run",
    "live_usage_error",
    "load_conversations",
    "run_live",
    "run_replay",
    "run_target",
    "send_all",
    "target_usage_error",
    "turns_of",
]
