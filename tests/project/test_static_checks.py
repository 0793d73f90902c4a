"""The linter and the type checker, run on proxy/ as part of the suite (so by `scripts/test`):
their configuration is in pyproject.toml ([tool.ruff], [tool.mypy]); both come with the test
extra. A finding fails the suite with the tool's own report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing_in_proxy():
    done = _run("ruff", "check", "--no-cache", "proxy")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_finds_nothing_in_proxy():
    done = _run("mypy", "--no-incremental", "--cache-dir", "/dev/null")
    assert done.returncode == 0, done.stdout + done.stderr
