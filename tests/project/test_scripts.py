"""scripts/run, scripts/demo and scripts/test share one .venv: run and demo install the server only,
test adds the test extra; each once (again only when pyproject.toml changes), pip's output shown.

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
    python.write_text(
        f'#!/bin/sh\necho "$*" >> "{log}"\ncase "$*" in *"pip install"*) echo "Collecting starlette";; esac\n'
    )
    python.chmod(0o755)
    return root, log


def calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def pip_calls(log: Path) -> list[str]:
    return [line for line in calls(log) if line.startswith("-m pip")]


def run(root: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(root / "scripts" / script), *args],
        check=True,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=30,
    )


def test_run_installs_the_server_only_and_shows_pip(tmp_path):
    root, log = make_copy(tmp_path)
    done = run(root, "run")
    [install] = pip_calls(log)
    assert install.startswith("-m pip install ") and install.endswith(f"-e {root}")  # no extra
    assert "Installing offload-proxy (the server only" in done.stderr
    assert "Collecting starlette" in done.stderr and done.stdout == ""  # pip's own lines, on stderr
    assert "Installed." in done.stderr


def test_test_installs_the_test_extra(tmp_path):
    root, log = make_copy(tmp_path)
    done = run(root, "test")
    [install] = pip_calls(log)
    assert install.endswith(f"-e {root}[test]")  # server + test extra
    assert "Installing offload-proxy[test]" in done.stderr and "Collecting starlette" in done.stderr


def test_test_runs_the_workers_and_passes_the_arguments_after_them(tmp_path):
    """Three pytest-xdist workers, then the user's arguments: a later `-n 0` wins (one process)."""
    root, log = make_copy(tmp_path)
    run(root, "test", "-k", "store", "-n", "0")
    assert calls(log)[-1] == "-m pytest -n 3 -k store -n 0"


def test_switching_between_the_scripts_installs_each_extra_once(tmp_path):
    root, log = make_copy(tmp_path)
    run(root, "run")
    run(root, "demo", "--no-wait")
    assert len(pip_calls(log)) == 1, calls(log)
    run(root, "test")
    assert len(pip_calls(log)) == 2 and pip_calls(log)[1].endswith("[test]"), calls(log)
    for script in ("run", "test", "demo", "run", "test"):
        quiet = run(root, script)
        assert "Installing" not in quiet.stderr
    assert len(pip_calls(log)) == 2, calls(log)  # the stamps stayed valid: pip never ran again (works offline)
    assert calls(log).count("-m proxy serve") == 3 and calls(log).count("-m pytest -n 3") == 3
    assert calls(log).count("-m proxy demo --no-wait") == 1 and calls(log).count("-m proxy demo") == 1


def test_test_first_then_run_does_not_reinstall(tmp_path):
    root, log = make_copy(tmp_path)
    run(root, "test")
    run(root, "run")
    run(root, "demo")
    assert len(pip_calls(log)) == 1, calls(log)


def test_pyproject_change_reinstalls_once(tmp_path):
    root, log = make_copy(tmp_path)
    run(root, "run")
    with (root / "pyproject.toml").open("a") as f:
        f.write("\n# changed\n")
    run(root, "test")
    run(root, "run")
    assert len(pip_calls(log)) == 2, calls(log)
    assert len(list((root / ".venv").glob(".installed-test-*"))) == 1  # the old key's stamps are gone
    assert not [p for p in (root / ".venv").glob(".installed-*") if p.name.split("-")[-1] != pip_key(root)]


def pip_key(root: Path) -> str:
    return subprocess.run(
        ["cksum"], stdin=(root / "pyproject.toml").open("rb"), capture_output=True, text=True, check=True
    ).stdout.split()[0]


def test_failed_install_leaves_no_stamp(tmp_path):
    root, log = make_copy(tmp_path)
    python = root / ".venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\necho "no network" >&2\nexit 1\n')
    done = subprocess.run(
        ["bash", str(root / "scripts" / "run")], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30
    )
    assert done.returncode != 0 and "no network" in done.stderr
    assert not list((root / ".venv").glob(".installed-*"))
