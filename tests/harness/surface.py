"""A package's public surface, as its `test_exported_members.py` checks it: `__all__` names
exactly what the rest of proxy imports from the package (never a private module of it), every
name in it is importable, and nothing public is defined in `__init__` beside it (a submodule
that is a program of its own, `python -m`, is no name of the surface)."""

from __future__ import annotations

import ast
import importlib
import types
from pathlib import Path

PROXY = Path(__file__).resolve().parents[2] / "proxy"


def imported_from(package: str) -> set[str]:
    """The names proxy's modules outside `package` import from it (`from package import name`)."""
    inside = PROXY.parent / package.replace(".", "/")
    names: set[str] = set()
    for path in PROXY.rglob("*.py"):
        if inside in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module == package and not node.level:
                names.update(alias.name for alias in node.names)
    return names


def private_imports(package: str) -> list[str]:
    """Imports of `package`'s modules from outside it (`from package._x import …`, `import package.x`)."""
    inside = PROXY.parent / package.replace(".", "/")
    found = []
    for path in PROXY.rglob("*.py"):
        if inside in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            found += [f"{path.relative_to(PROXY.parent)}: {m}" for m in modules if m.startswith(package + ".")]
    return found


def check(package: str, expected: set[str]) -> None:
    module = importlib.import_module(package)
    exported = module.__all__
    assert len(exported) == len(set(exported))
    assert set(exported) == expected
    assert imported_from(package) == expected, "__all__ is what the rest of proxy imports from the package"
    assert private_imports(package) == [], "other packages import the package, not its private modules"
    for name in exported:
        assert getattr(module, name) is not None, name
    public = {n for n, v in vars(module).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    assert public - set(exported) == set(), "public names of the package missing from __all__"
