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
        assert not setuptools.specifier.contains("76.3.0"), \
            f'license = "{license}" needs "setuptools>={SPDX_LICENSE_SINCE}" in build-system.requires'
        assert setuptools.specifier.contains(SPDX_LICENSE_SINCE)
    else:  # the classic table form, understood by every setuptools with pyproject support
        assert isinstance(license, dict) and set(license) <= {"text", "file"}
        assert not setuptools.specifier.contains("60.0")


def test_build_requirements_admit_a_current_setuptools():
    config = tomllib.loads(PYPROJECT.read_text())
    setuptools = next(Requirement(r) for r in config["build-system"]["requires"]
                      if Requirement(r).name == "setuptools")
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
