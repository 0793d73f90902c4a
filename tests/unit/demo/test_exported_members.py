"""proxy.demo's public surface: what the command line imports from it."""

from __future__ import annotations

from tests.harness.surface import check


def test_all_is_the_surface_other_packages_import():
    check("proxy.demo", {"add_arguments", "run_demo"})
