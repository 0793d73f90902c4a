"""The linter and the type checker, run on proxy/ as part of the suite (so by `scripts/test`):
their configuration is in pyproject.toml ([tool.ruff], [tool.mypy]); both come with the test
extra. A finding fails the suite with the tool's own report."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing_in_proxy():
    done = _run("ruff", "check", "--no-cache", "proxy")
    assert done.returncode == 0, done.stdout + done.stderr


# Every Python file of the project in one layout and one import order (ruff's formatter and its
# isort rule, configured in pyproject.toml): a diff shows what changed, not how it was typed.
CODE = ("proxy", "tests", "bench", "scripts")


def test_the_code_is_formatted():
    done = _run("ruff", "format", "--no-cache", "--check", *CODE)
    assert done.returncode == 0, done.stdout + done.stderr


def test_imports_are_sorted():
    done = _run("ruff", "check", "--no-cache", "--select", "I", *CODE)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_finds_nothing_in_proxy():
    # incremental, its cache in the checkout's .mypy_cache (mypy's default, git-ignored): a module
    # is checked again when it, a module it depends on or mypy's options or version changed, so a
    # run finds what a full check finds; 11 s cold, under 1 s when proxy/ did not change
    done = _run("mypy", "--cache-dir", str(ROOT / ".mypy_cache"))
    assert done.returncode == 0, done.stdout + done.stderr


# A function taking four or more parameters takes those past the third by keyword: a call then
# says what each value is, and a parameter added or reordered cannot shift the others silently.
MAX_POSITIONAL = 3
# Signatures another library calls positionally (its protocol fixes them), with the reason.
FIXED_BY_ANOTHER_LIBRARY = {
    ("proxy/upstream/network.py", "connect_tcp"): "overrides httpcore2.AsyncNetworkBackend.connect_tcp, whose "
    "parameters are positional (an override keeps them)",
}


def _positional(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    names = [a.arg for a in node.args.posonlyargs + node.args.args]
    return names[1:] if names[:1] in (["self"], ["cls"]) else names


def test_functions_take_parameters_past_the_third_by_keyword():
    found = []
    for path in sorted((ROOT / "proxy").rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            names = _positional(node)
            if len(names) > MAX_POSITIONAL and (where, node.name) not in FIXED_BY_ANOTHER_LIBRARY:
                found.append(f"{where}:{node.lineno} {node.name}({', '.join(names)})")
    assert not found, "put `*` before the fourth parameter:\n" + "\n".join(found)


def test_the_exemptions_are_still_needed():
    """An exempt signature that no longer exists, or no longer needs it, leaves the list."""
    for where, name in FIXED_BY_ANOTHER_LIBRARY:
        tree = ast.parse((ROOT / where).read_text())
        nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
        assert nodes and any(len(_positional(n)) > MAX_POSITIONAL for n in nodes), (where, name)
