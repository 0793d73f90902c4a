"""proxy.stats's public surface: what the server, its settings and the replay import from it."""

from __future__ import annotations

from tests.harness.surface import check

SURFACE = {
    "MAX_SESSION_ITEMS",
    "STOP_TIMEOUT",
    "WINDOWS",
    "PriceTable",
    "Recorder",
    "display_name",
    "holdout_outcomes",
    "holdout_report",
    "parse_prices",
    "parse_retention",
    "session_detail",
    "session_from_history",
    "session_from_name",
    "sessions_page",
    "span_of",
    "tenant_labels",
    "tenant_rows",
    "window_stats",
}


def test_all_is_the_surface_other_packages_import():
    check("proxy.stats", SURFACE)
