"""scripts/run and scripts/test share one .venv, installed once (again only when pyproject.toml changes).

The scripts run on a copy of the repo's scripts/ and pyproject.toml whose .venv/bin/python is a
stand-in that records its arguments, so nothing is really installed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def make_copy(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "repo"
    shutil.copytree(REPO / "scripts", root / "scripts")
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    log = tmp_path / "python-calls.log"
    python = root / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\n')
    python.chmod(0o755)
    return root, log


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def pip_calls(log: Path) -> list[str]:
    return [line for line in calls(log) if line.startswith("-m pip")]


def run(root: Path, script: str) -> None:
    subprocess.run(["bash", str(root / "scripts" / script)], check=True, capture_output=True, text=True,
                   stdin=subprocess.DEVNULL, timeout=30)


def test_switching_between_run_and_test_installs_once(tmp_path):
    root, log = make_copy(tmp_path)
    run(root, "test")
    assert len(pip_calls(log)) == 1, calls(log)
    install = pip_calls(log)[0]
    assert install.startswith("-m pip install -e ") and install.endswith(f"{root}[test]")  # server + test extra
    for script in ("run", "test", "run", "run", "test"):
        run(root, script)
    assert len(pip_calls(log)) == 1, calls(log)  # the stamp stayed valid: pip never ran again (works offline)
    assert calls(log).count("-m proxy serve") == 3 and calls(log).count("-m pytest") == 3
    assert [p.name for p in (root / ".venv").glob(".installed-*")] == [
        next((root / ".venv").glob(".installed-*")).name]


def test_run_first_then_test_does_not_reinstall(tmp_path):
    root, log = make_copy(tmp_path)
    run(root, "run")
    run(root, "test")
    assert len(pip_calls(log)) == 1, calls(log)


def test_pyproject_change_reinstalls_once(tmp_path):
    root, log = make_copy(tmp_path)
    run(root, "run")
    with (root / "pyproject.toml").open("a") as f:
        f.write("\n# changed\n")
    run(root, "test")
    run(root, "run")
    assert len(pip_calls(log)) == 2, calls(log)
    assert len(list((root / ".venv").glob(".installed-*"))) == 1


def test_failed_install_leaves_no_stamp(tmp_path):
    root, log = make_copy(tmp_path)
    python = root / ".venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\necho "no network" >&2\nexit 1\n')
    done = subprocess.run(["bash", str(root / "scripts" / "run")], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=30)
    assert done.returncode != 0 and "no network" in done.stderr
    assert not list((root / ".venv").glob(".installed-*"))
