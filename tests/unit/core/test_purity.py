"""The core stays pure: no web framework, HTTP client, store or IO layer of the proxy in it
(`proxy.errors`, the root of the proxy's exceptions that the core's derive from, is held to the
standard library alone: tests/unit/test_errors.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import proxy.core

FORBIDDEN = (
    "starlette",
    "httpx",
    "httpx2",
    "uvicorn",
    "redis",
    "sqlite3",
    "proxy.store",
    "proxy.http",
    "proxy.upstream",
    "proxy.offload",
    "proxy.reload",
    "proxy.replay",
    "proxy.config",
)


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_core_imports_nothing_of_the_edges():
    files = sorted(Path(proxy.core.__file__).parent.glob("*.py"))
    assert len(files) >= 8
    for path in files:
        bad = {m for m in imported_modules(path) if m.startswith(FORBIDDEN)}
        assert not bad, f"{path.name} imports {bad}"
