"""proxy.replay's public surface: what the command line and the demo import from it."""

from __future__ import annotations

from tests.harness.surface import check

SURFACE = {
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
}


def test_all_is_the_surface_other_packages_import():
    check("proxy.replay", SURFACE)
