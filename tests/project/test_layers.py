"""The layers, as tests: the packages below the HTTP layer never reach up into it (nor into the
commands above it), directly or through another module, and those that do no HTTP import no web
framework. `proxy.core` is held purer still by tests/unit/core/test_purity.py."""

from __future__ import annotations

import pytest

from tests.project.test_import_cycles import PACKAGE, import_graph
from tests.unit.core.test_purity import imported_modules

BELOW_HTTP = (
    "proxy.store",
    "proxy.upstream",
    "proxy.offload",
    "proxy.reload",
    "proxy.core",
    "proxy.formats",
    "proxy.stats",
    "proxy.telemetry",
    "proxy.turn",
)
ABOVE = ("proxy.http", "proxy.replay", "proxy.demo", "proxy.cli", "proxy.wrap")
# the server's settings are read by the app and handed down as values (typed by a Protocol)
NO_CONFIG = (
    "proxy.store",
    "proxy.upstream",
    "proxy.offload",
    "proxy.reload",
    "proxy.core",
    "proxy.formats",
    "proxy.telemetry",
    "proxy.turn",
)
NO_WEB_FRAMEWORK = NO_CONFIG  # the same packages: those that do no HTTP


def _in(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    work = [start]
    while work:
        for target in graph[work.pop()]:
            if target not in seen:
                seen.add(target)
                work.append(target)
    return seen


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_nothing_below_the_http_layer_reaches_up_into_it(graph):
    below = [m for m in graph if _in(m, BELOW_HTTP)]
    assert len(below) > 50, "the packages were not found"
    bad = {m: sorted(t for t in reachable(graph, m) if _in(t, ABOVE)) for m in below}
    assert {m: t for m, t in bad.items() if t} == {}


def test_the_server_settings_are_handed_down_not_imported(graph):
    bad = {m: sorted(t for t in graph[m] if t == "proxy.config") for m in graph if _in(m, NO_CONFIG)}
    assert {m: t for m, t in bad.items() if t} == {}


def test_the_layers_that_do_no_http_import_no_web_framework():
    files = [
        p
        for p in PACKAGE.rglob("*.py")
        if _in(".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts), NO_WEB_FRAMEWORK)
    ]
    assert len(files) > 50  # the packages were found (they hold fewer, larger modules since issue 41)
    bad = {p.name: m for p in files for m in imported_modules(p) if m.split(".")[0] == "starlette"}
    assert bad == {}


# The modules that run a server of their own (the HTTP layer's app, replay's and the demo's
# in-process servers) may import the web framework; no other module does.
SERVE_HTTP = ("proxy.http", "proxy.replay", "proxy.demo", "proxy.cli", "proxy.__main__")


def test_only_the_http_layer_and_the_commands_running_servers_import_the_web_framework(graph):
    files = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts): p for p in PACKAGE.rglob("*.py")}
    assert "proxy.errors" in files and len(files) > 100
    bad = {
        m: sorted(i for i in imported_modules(p) if i.split(".")[0] == "starlette")
        for m, p in files.items()
        if not _in(m, SERVE_HTTP)
    }
    assert {m: i for m, i in bad.items() if i} == {}
    # nor through another module: importing an exception or a format loads no web framework
    reach = {m: sorted(t for t in reachable(graph, m) if _in(t, ("proxy.http",))) for m in graph}
    assert {m: t for m, t in reach.items() if t and not _in(m, SERVE_HTTP)} == {}


def test_raise_sites_below_the_http_layer_name_a_kind_never_a_status():
    """`ProxyError(Kind.…)`: `proxy.http.error_map` alone decides a status."""
    import ast

    bad = []
    for p in PACKAGE.rglob("*.py"):
        module = ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("ProxyError", "UpstreamError"):
                first = node.args[0] if node.args else None
                if isinstance(first, ast.Constant) and isinstance(first.value, int):
                    bad.append(f"{module}:{node.lineno}")
    assert bad == []


def test_the_check_sees_a_path_through_another_module():
    graph = {"proxy.store.a": {"proxy.errors"}, "proxy.errors": {"proxy.http.x"}, "proxy.http.x": set()}
    assert reachable(graph, "proxy.store.a") == {"proxy.errors", "proxy.http.x"}


def test_no_code_outside_the_formats_tests_which_format_it_holds():
    """A format question is asked of the `WireFormat` (`proxy.core.wire`): a new format is one
    package under proxy/formats, not an edit of the layers above."""
    import re

    identity = re.compile(r"\bis (not )?(CHAT|RESPONSES|MESSAGES)\b|\.endpoint\s*[!=]=")
    formats = PACKAGE / "formats"
    bad = [
        f"{p.relative_to(PACKAGE)}:{n}"
        for p in PACKAGE.rglob("*.py")
        if formats not in p.parents
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if identity.search(line)
    ]
    assert bad == []


# A module is sized by its one concept; past ~800 lines it needs a reason, written here.
LONG_FOR_A_REASON: dict[str, str] = {}


def test_no_module_is_over_800_lines_without_a_reason():
    long = {
        str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 800
    }
    assert {name: n for name, n in long.items() if name not in LONG_FOR_A_REASON} == {}
