"""proxy.turn's public surface: what the HTTP layer and the replay import from it."""

from __future__ import annotations

from tests.harness.surface import check

SURFACE = {
    "Answer",
    "Compaction",
    "CompactionFailed",
    "EditsDone",
    "Exchange",
    "ExchangeContext",
    "Turn",
    "TurnInput",
    "TurnReport",
    "begin",
    "compact",
    "run_turn",
}


def test_all_is_the_surface_other_packages_import():
    check("proxy.turn", SURFACE)
