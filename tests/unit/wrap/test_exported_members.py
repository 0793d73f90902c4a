"""proxy.wrap's public surface: what the command line imports from it."""

from __future__ import annotations

from tests.harness.surface import check


def test_all_is_the_surface_other_packages_import():
    check("proxy.wrap", {"add_arguments", "run_wrap", "split_agent_args", "unknown_arguments"})
