"""No context variable is written below the HTTP layer: the request's record, the summariser's
sinks and the upstream client's timings are handed down explicitly (`proxy.telemetry`'s sinks).

The one exception, `proxy.upstream.network.ATTEMPT`, is the socket layer's: httpcore2 hands a
network stream no handle on the request it carries, so `network.watching` sets it around one
transport call; nothing else below `http/` defines, sets or reads a context variable, nor the
HTTP layer's record (`proxy.http.telemetry.current`)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.project.test_layers import BELOW_HTTP

ROOT = Path(__file__).resolve().parents[2]
# module → (the context variable it may define, the one function that may set it)
ALLOWED = {"proxy.upstream.network": ("ATTEMPT", "watching")}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in BELOW_HTTP:
        path = ROOT / Path(*package.split("."))
        files = [path.with_suffix(".py")] if path.with_suffix(".py").exists() else sorted(path.rglob("*.py"))
        for file in files:
            name = ".".join(file.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            found[name] = file
    return found


def violations(module: str, source: str) -> list[str]:
    """What `source` (the module `module`) does with context variables that it may not."""
    tree = ast.parse(source)
    allowed_var, allowed_setter = ALLOWED.get(module, (None, None))
    found: list[str] = []
    variables: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
            func = node.value.func
            if (isinstance(func, ast.Name) and func.id == "ContextVar") or (
                isinstance(func, ast.Attribute) and func.attr == "ContextVar"
            ):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        variables.add(target.id)
                        if target.id != allowed_var:
                            found.append(f"{module} defines the context variable {target.id}")
        elif isinstance(node, ast.ImportFrom) and node.module in ("proxy.telemetry", "proxy.http.telemetry"):
            if any(alias.name == "current" for alias in node.names):
                found.append(f"{module} imports the request's record from a context variable")
        elif isinstance(node, ast.Attribute) and node.attr == "current":
            if isinstance(node.value, ast.Name) and node.value.id in ("telemetry", "http_telemetry"):
                found.append(f"{module} reads telemetry.current")
    enclosing: dict[ast.AST, str | None] = {}

    def visit(node: ast.AST, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            enclosing[child] = function
            visit(child, child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function)

    visit(tree, None)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "set"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in variables
        ):
            name, setter = node.func.value.id, enclosing.get(node)
            if not (name == allowed_var and setter == allowed_setter):
                found.append(f"{module} sets the context variable {name} (in {setter or 'the module'})")
    return sorted(set(found))


def test_no_context_variable_is_written_below_the_http_layer():
    modules = _modules()
    assert len(modules) > 50 and "proxy.upstream.client" in modules, "the modules were not found"
    found = [v for name, file in modules.items() for v in violations(name, file.read_text())]
    assert found == []


def test_the_check_sees_a_write_and_a_read():
    bad = (
        "from contextvars import ContextVar\n"
        "from proxy import telemetry\n"
        "X: ContextVar[int] = ContextVar('x')\n"
        "def f():\n"
        "    X.set(1)\n"
        "    return telemetry.current.get()\n"
    )
    assert violations("proxy.offload.example", bad) == [
        "proxy.offload.example defines the context variable X",
        "proxy.offload.example reads telemetry.current",
        "proxy.offload.example sets the context variable X (in f)",
    ]
    socket_layer = "A = ContextVar('a')\ndef watching(a):\n    A.set(a)\ndef other():\n    A.set(None)\n"
    assert violations("proxy.upstream.network", socket_layer.replace("A", "ATTEMPT")) == [
        "proxy.upstream.network sets the context variable ATTEMPT (in other)"
    ]
