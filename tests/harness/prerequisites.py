"""What the suite needs besides Python, and saying loudly when it is missing.

Some tests drive real programs the Python install does not bring: the Codex CLI and Claude Code
(installed once with npm from the npm registry into `.cache/`), and a headless Chromium for the
dashboard's pages. Where one is missing, `require` skips the test with a reason starting with
`MISSING`, or fails it when `CI` is set (true, 1, yes): a CI run never passes without them.
`pytest_terminal_summary` (registered by tests/conftest.py) ends every run that skipped such
tests with a section naming what was missing and which tests did not run, so a local run
without npm says so at its end instead of hiding it among the skips.
"""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

MISSING = "MISSING PREREQUISITE: "


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require(available: bool, what: str, why: str) -> None:
    """Nothing when `available`; else skip (fail under CI) saying `what` is missing and `why` it matters."""
    if available:
        return
    message = f"{MISSING}{what}: {why}"
    if in_ci():
        pytest.fail(message + " (CI is set: a missing prerequisite fails the run)", pytrace=False)
    pytest.skip(message)


def missing_prerequisites(skipped: list) -> dict[str, list[str]]:
    """reason → the test files whose tests it skipped, from pytest's skipped reports."""
    found: dict[str, set[str]] = defaultdict(set)
    for report in skipped:
        longrepr = getattr(report, "longrepr", None)
        if not isinstance(longrepr, tuple) or len(longrepr) != 3:
            continue
        reason = str(longrepr[2]).removeprefix("Skipped: ")
        if reason.startswith(MISSING):
            found[reason.removeprefix(MISSING)].add(report.nodeid.split("::")[0])
    return {reason: sorted(files) for reason, files in sorted(found.items())}


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    found = missing_prerequisites(terminalreporter.stats.get("skipped", []))
    if not found:
        return
    count = sum(
        1
        for r in terminalreporter.stats.get("skipped", [])
        if isinstance(r.longrepr, tuple) and MISSING in str(r.longrepr[2])
    )
    terminalreporter.section("MISSING PREREQUISITES", sep="!", red=True, bold=True)
    terminalreporter.line(
        f"{count} tests that drive real clients or a browser did NOT run "
        "(README.md, Quick start, lists what the suite needs; CI=true fails them instead):",
        red=True,
        bold=True,
    )
    for reason, files in found.items():
        terminalreporter.line(f"- {reason}", red=True)
        terminalreporter.line(f"    skipped: {', '.join(files)}")
