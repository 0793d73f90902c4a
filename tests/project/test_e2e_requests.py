"""One request helper for the end-to-end tests: tests/harness/requests.py (`post`, `streamed`,
`request`). An e2e module that defines its own `post()`/`send()`/`request()`, or a helper of any
name that sends a raw POST with httpx2 itself, fails here: its argument order would drift from the
others' again. A test's own body may still make a request the helper cannot (a chunked body, a
stream aborted mid-way)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

E2E = Path(__file__).resolve().parents[1] / "e2e"
HELPER_NAME = re.compile(r"^_?(post|send|request|stream)")  # what a request helper gets called
RAW = {"post", "stream", "request"}  # httpx2.post(...), httpx2.stream(...), httpx2.request(...)


def _helpers(tree: ast.AST, *, in_test: bool = False):
    """(function, whether it is inside a test) for every function of `tree`, nested ones too."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node, in_test
            yield from _helpers(node, in_test=in_test or node.name.startswith("test_"))
        else:
            yield from _helpers(node, in_test=in_test)


def _sends_raw(function: ast.AST) -> bool:
    return any(
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in RAW
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == "httpx2"
        for call in ast.walk(function)
    )


def own_request_helpers(source: str) -> list[str]:
    """The functions of an e2e module's `source` that are request helpers of its own."""
    found = []
    for function, in_test in _helpers(ast.parse(source)):
        if function.name.startswith("test_"):
            continue
        if HELPER_NAME.match(function.name) or (not in_test and _sends_raw(function)):
            found.append(f"{function.name} (line {function.lineno})")
    return found


def test_no_e2e_module_defines_its_own_request_helper():
    offending = {
        path.name: helpers
        for path in sorted(E2E.glob("*.py"))
        if (helpers := own_request_helpers(path.read_text(encoding="utf-8")))
    }
    assert not offending, f"send through tests.harness.requests (post, streamed, request) instead: {offending}"


def test_the_check_sees_a_helper():
    assert own_request_helpers("def post(url, body):\n    return 1\n") == ["post (line 1)"]
    assert own_request_helpers("def _send(url):\n    pass\n") == ["_send (line 1)"]
    raw = "import httpx2\ndef turn(url):\n    return httpx2.post(url + '/v1/chat/completions', json={})\n"
    assert own_request_helpers(raw) == ["turn (line 2)"]
    nested = "def test_x():\n    def send():\n        pass\n"
    assert own_request_helpers(nested) == ["send (line 2)"]
    through_the_harness = "from tests.harness.requests import post\ndef turn(url):\n    return post(url, json={})\n"
    assert own_request_helpers(through_the_harness) == []
    in_a_test = "import httpx2\ndef test_chunked(url):\n    httpx2.post(url, content=iter([b'{}']))\n"
    assert own_request_helpers(in_a_test) == []
