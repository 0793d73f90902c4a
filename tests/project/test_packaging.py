"""pyproject.toml builds with every setuptools its build-system admits (pip may pick an old cached one)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

# The first setuptools release that accepts `project.license` as an SPDX string (PEP 639).
SPDX_LICENSE_SINCE = "77.0.0"


def test_license_form_is_understood_by_every_admitted_setuptools():
    config = tomllib.loads(PYPROJECT.read_text())
    requires = [Requirement(r) for r in config["build-system"]["requires"]]
    setuptools = next(r for r in requires if r.name == "setuptools")
    license = config["project"].get("license")
    if isinstance(license, str):  # PEP 639 expression: older setuptools reject the whole file
        assert not setuptools.specifier.contains("76.3.0"), (
            f'license = "{license}" needs "setuptools>={SPDX_LICENSE_SINCE}" in build-system.requires'
        )
        assert setuptools.specifier.contains(SPDX_LICENSE_SINCE)
    else:  # the classic table form, understood by every setuptools with pyproject support
        assert isinstance(license, dict) and set(license) <= {"text", "file"}
        assert not setuptools.specifier.contains("60.0")


def test_build_requirements_admit_a_current_setuptools():
    config = tomllib.loads(PYPROJECT.read_text())
    setuptools = next(Requirement(r) for r in config["build-system"]["requires"] if Requirement(r).name == "setuptools")
    assert setuptools.specifier.contains("80.9.0") and setuptools.specifier.contains("84.0.0")


def test_the_demo_ships_its_conversation_and_fake_upstream():
    """`offload-proxy demo` runs from an installed package: its data is package data, its fake
    upstream a module of the package (not bench/)."""
    config = tomllib.loads(PYPROJECT.read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["proxy.demo"]
    demo = PYPROJECT.parent / "proxy" / "demo"
    shipped = {p.name for pattern in patterns for p in demo.glob(pattern)}
    assert "conversation.jsonl" in shipped
    assert (demo / "fake_upstream.py").exists() and (demo / "__init__.py").exists()
    assert any(include == "proxy*" for include in config["tool"]["setuptools"]["packages"]["find"]["include"])


def _third_party_imports() -> dict[str, list[tuple[Path, bool]]]:
    """Each top-level module proxy/ imports that is neither the stdlib's nor ours: where, and
    whether that import is made when a function runs (not when its module is imported)."""
    import ast
    import sys

    found: dict[str, list[tuple[Path, bool]]] = {}
    for path in sorted((PYPROJECT.parent / "proxy").rglob("*.py")):
        tree = ast.parse(path.read_text())
        lazy = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top != "proxy" and top not in sys.stdlib_module_names:
                    found.setdefault(top, []).append((path, id(node) in lazy))
    return found


def test_what_the_server_imports_its_own_install_declares():
    """Every module proxy/ imports comes from a distribution `dependencies` names (the server's
    install: `scripts/run`, `pip install offload-proxy`), not from the test extra nor by chance
    from another package's dependencies (PyYAML, for a YAML tenants file, came with uvicorn's
    `standard` extra only); one from the `replay` extra alone is optional: imported inside a
    function (replay/report.py says once when it is missing), never with its module."""
    from importlib.metadata import packages_distributions

    from packaging.utils import canonicalize_name

    project = tomllib.loads(PYPROJECT.read_text())["project"]
    declared = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    optional = {canonicalize_name(Requirement(r).name) for r in project["optional-dependencies"]["replay"]}
    providers = packages_distributions()
    imports = _third_party_imports()
    assert {"starlette", "yaml", "matplotlib"} <= set(imports)  # the scan sees them
    for module, sites in imports.items():
        dists = {canonicalize_name(d) for d in providers.get(module, [])}
        assert dists, f"{module} (imported by {sites[0][0].name}) is not installed"
        if dists & declared:
            continue
        assert dists & optional, f"{module} ({sorted(dists)}, imported by {sites[0][0].name}) is not in dependencies"
        eager = [path.name for path, lazy in sites if not lazy]
        assert not eager, f"{module} is optional (the replay extra) but imported with its module in {eager}"
