"""A test skipped for a missing prerequisite (npm, Chromium) is named at the end of the run, and
fails it under CI: run pytest on a small suite of its own that misses one, in one process and on
two pytest-xdist workers (as scripts/test runs the suite: the skips reach the controller, which
prints the section)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUITE = {
    "conftest.py": "from tests.harness.prerequisites import pytest_terminal_summary  # noqa: F401\n",
    "test_needs_npm.py": (
        "import pytest\n"
        "from tests.harness.prerequisites import require\n\n"
        "@pytest.fixture(scope='session')\n"
        "def cli():\n"
        "    require(False, 'npm', 'not on PATH: the Codex CLI cannot be installed')\n\n"
        "def test_one(cli):\n    pass\n\n"
        "def test_two(cli):\n    pass\n\n"
        "def test_plain_skip():\n    pytest.skip('nothing to do with prerequisites')\n\n"
        "def test_runs():\n    require(True, 'npm', 'unused')\n"
    ),
}


def run_suite(
    tmp_path: Path, suite: dict[str, str] = SUITE, workers: int = 0, **env: str
) -> subprocess.CompletedProcess:
    for name, text in suite.items():
        (tmp_path / name).write_text(text)
    environ = {k: v for k, v in os.environ.items() if k != "CI"}
    # no installed plugin is loaded (the small suite uses none; hypothesis's alone took 2 of its 3 s)
    environ.update(PYTHONPATH=str(ROOT), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", **env)
    parallel = ["-p", "xdist.plugin", "-n", str(workers)] if workers else []
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *parallel,
            "--rootdir",
            str(tmp_path),
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


WORKERS = pytest.mark.parametrize("workers", [0, 2])


@WORKERS
def test_a_missing_prerequisite_is_named_at_the_end(tmp_path, workers):
    done = run_suite(tmp_path, workers=workers)
    assert done.returncode == 0, done.stdout + done.stderr
    tail = done.stdout[done.stdout.index("MISSING PREREQUISITES") :]
    assert "2 tests that drive real clients or a browser did NOT run" in tail
    assert "- npm: not on PATH: the Codex CLI cannot be installed" in tail
    assert "skipped: test_needs_npm.py" in tail
    assert "nothing to do with prerequisites" not in tail  # an ordinary skip is not listed


@WORKERS
def test_nothing_missing_says_nothing(tmp_path, workers):
    done = run_suite(tmp_path, {**SUITE, "test_needs_npm.py": "def test_runs():\n    pass\n"}, workers=workers)
    assert done.returncode == 0 and "MISSING" not in done.stdout, done.stdout


@WORKERS
def test_under_ci_a_missing_prerequisite_fails_the_run(tmp_path, workers):
    done = run_suite(tmp_path, workers=workers, CI="true")
    assert done.returncode == 1, done.stdout
    assert "2 errors" in done.stdout and "CI is set" in done.stdout  # failed in the fixture: errors
