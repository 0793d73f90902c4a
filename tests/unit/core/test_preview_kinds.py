"""Previews by content type: a file view → an outline of its definitions; a diff → its file and
hunk headers; a table → header, size, first rows; a log or a test run → the line preview (head,
tail, errors); JSON → its shape. Outputs in the styles of the shared traces' frameworks
(OpenHands, mini-swe-agent, SWE-agent, tau-bench) and of other agents (Claude Code, Codex CLI,
aider), written here."""

from __future__ import annotations

import json

import pytest

from proxy.core.markers import make_ref, tool_result_marker, tool_result_ref
from proxy.core.preview import MAX_CHARS, MAX_LINES, preview
from proxy.core.preview_kinds import body_names, source_outline

REF = make_ref("a" * 32, "tool_result", "x")


def python_module(n_classes: int = 6, methods: int = 5, body: int = 12) -> list[str]:
    lines = [
        '"""Cards of a FITS header."""',
        "",
        "import re",
        "import warnings",
        "",
        "from .util import _str_to_num",
        "",
    ]
    for c in range(n_classes):
        lines += [f"class Card{c}(_Verify):", f'    """Card number {c}."""', ""]
        for m in range(methods):
            lines += [f"    def method_{c}_{m}(self, keyword=None, value=None):"]
            lines += [f"        value_{k} = self._parse({k})" for k in range(body)] + [""]
    lines += ["def _pad(input):", "    return input + ' ' * (80 - len(input))"]
    return lines


MODULE = python_module()
LAST = len(MODULE)


def cat_n(lines: list[str]) -> str:  # `cat -n`, OpenHands' editor and Codex's `nl -ba`
    return "\n".join(f"{i:6}\t{line}" for i, line in enumerate(lines, 1))


CASES = {
    # --- source code: an outline with line numbers -------------------------------------------
    "openhands file_editor view": (
        "Here's the result of running `cat -n` on /workspace/astropy/io/fits/card.py:\n" + cat_n(MODULE),
        "outline",
        [
            "Here's the result of running `cat -n` on /workspace/astropy/io/fits/card.py:",
            "8: class Card0(_Verify):",
            f"{LAST - 1}: def _pad(input):",
        ],
    ),
    "codex nl -ba": (
        cat_n(MODULE),
        "outline",
        ["8: class Card0(_Verify):", "11:     def method_0_0(self, keyword=None, value=None): … self._parse()"],
    ),
    "claude code Read": (
        "\n".join(f"{i:6}→{line}" for i, line in enumerate(MODULE, 1)),
        "outline",
        ["8: class Card0(_Verify):", f"{LAST - 1}: def _pad(input):"],
    ),
    "swe-agent open": (
        f"[File: astropy/io/fits/card.py ({LAST} lines total)]\n"
        + "\n".join(f"{i}:{line}" for i, line in enumerate(MODULE, 1)),
        "outline",
        [f"[File: astropy/io/fits/card.py ({LAST} lines total)]", "8: class Card0(_Verify):"],
    ),
    "mini-swe-agent cat (unnumbered, wrapped)": (
        "<returncode>0</returncode>\n<output>\n" + "\n".join(MODULE) + "\n</output>",
        "outline",
        ["<returncode>0</returncode>", "10: class Card0(_Verify):", f"{LAST + 2 - 1}: def _pad(input):"],
    ),
    "aider file listing": (
        "astropy/io/fits/card.py\n```\n" + "\n".join(MODULE) + "\n```",
        "outline",
        ["astropy/io/fits/card.py", "10: class Card0(_Verify):"],
    ),
    "typescript": (
        "\n".join(
            ["import { Router } from 'express';"]
            + [
                line
                for i in range(30)
                for line in (
                    f"export async function handler{i}(req: Request) {{",
                    *[f"  const v{k} = await load({k});" for k in range(8)],
                    "}",
                )
            ]
        ),
        "outline",
        ["import { Router } from 'express';", "2: export async function handler0(req: Request) { … load()"],
    ),
    # --- diffs: file and hunk headers ---------------------------------------------------------
    "git diff": (
        "\n".join(
            [
                "diff --git a/src/app.py b/src/app.py",
                "index 1a2b3c4..5d6e7f8 100644",
                "--- a/src/app.py",
                "+++ b/src/app.py",
            ]
            + [
                line
                for h in range(12)
                for line in (
                    f"@@ -{h * 40 + 1},7 +{h * 40 + 1},8 @@ def handler_{h}(request):",
                    *[f"     context line {k}" for k in range(6)],
                    f"-    old_{h}()",
                    f"+    new_{h}()",
                    f"+    extra_{h}()",
                )
            ]
            + [
                "diff --git a/tests/test_app.py b/tests/test_app.py",
                "--- a/tests/test_app.py",
                "+++ b/tests/test_app.py",
                "@@ -10,3 +10,4 @@ def test_handler():",
                "+    assert x",
            ]
        ),
        "diff",
        [
            "diff --git a/src/app.py b/src/app.py",
            "@@ -1,7 +1,8 @@ def handler_0(request):",
            "[diff: 2 files, 13 hunks, +25 -12 lines]",
        ],
    ),
    "git show with a commit header": (
        "commit 9c2fe99946af40478e366dc852545ddb90559822\nAuthor: A <a@b.c>\n\n    Respect ignore options\n\n"
        "diff --git a/ChangeLog b/ChangeLog\n--- a/ChangeLog\n+++ b/ChangeLog\n@@ -21,6 +21,10 @@ What's New\n"
        + "\n".join(f"+* entry {i}" for i in range(200)),
        "diff",
        [
            "commit 9c2fe99946af40478e366dc852545ddb90559822",
            "diff --git a/ChangeLog b/ChangeLog",
            "@@ -21,6 +21,10 @@ What's New",
            "[diff: 1 file, 1 hunk, +200 -0 lines]",
        ],
    ),
    # --- tables: header, size, first rows ----------------------------------------------------
    "csv": (
        "id,name,price,stock\n" + "\n".join(f"{i},item-{i},{i * 3}.99,{i % 7}" for i in range(500)),
        "table",
        ["[CSV: 500 rows, 4 columns]", "id,name,price,stock", "0,item-0,0.99,0", "499,item-499,1497.99,2"],
    ),
    "tsv": (
        "date\tuser\tevents\n" + "\n".join(f"2024-05-{i % 28 + 1:02}\tu{i}\t{i * 11}" for i in range(300)),
        "table",
        ["[TSV: 300 rows, 3 columns]", "date\tuser\tevents"],
    ),
    # --- logs and test runs: head, tail, errors (as before) -------------------------------------
    "pytest run": (
        "\n".join(
            ["============ test session starts ============"]
            + [f"tests/test_api.py::test_case_{i} PASSED" for i in range(280)]
            + [
                "tests/test_api.py::test_upload FAILED",
                "E       assert 500 == 201",
                "tests/test_api.py:88: AssertionError",
                "======= 1 failed, 280 passed in 4.21s =======",
            ]
        ),
        "lines",
        [
            "============ test session starts ============",
            "E       assert 500 == 201",
            "======= 1 failed, 280 passed in 4.21s =======",
        ],
    ),
    "claude code Bash test run": (
        "\n".join(
            [f"  ✓ renders row {i} (3 ms)" for i in range(200)]
            + [
                "  ✕ saves the form (12 ms)",
                "  ● Form › saves the form",
                "    TypeError: Cannot read properties of undefined (reading 'id')",
                "Tests: 1 failed, 200 passed, 201 total",
            ]
        ),
        "lines",
        ["    TypeError: Cannot read properties of undefined (reading 'id')", "Tests: 1 failed, 200 passed, 201 total"],
    ),
    "grep -rn listing (not a table, not code)": (
        "\n".join(f"proxy/core/mod{i}.py:{i * 7 + 1}:    def handle_{i}(self, request):" for i in range(300)),
        "lines",
        [
            "proxy/core/mod0.py:1:    def handle_0(self, request):",
            "proxy/core/mod299.py:2094:    def handle_299(self, request):",
        ],
    ),
    # --- JSON: its shape (tau-bench's tool results) ----------------------------------------------
    "tau-bench flights": (
        json.dumps(
            [
                {"flight_number": f"HAT{i:03}", "origin": "MIA", "destination": "LAX", "prices": {"economy": 100 + i}}
                for i in range(60)
            ]
        ),
        "json",
        ["JSON array, 60 items:"],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_content_type_gets_its_layout(name):
    text, kind, expected = CASES[name]
    p = preview(text)
    body = p.body.split("\n")
    for line in expected:
        assert line in body, (line, p.body)
    is_outline = body[-1].startswith("[outline: ")
    is_diff = body[-1].startswith("[diff: ")
    is_table = body[0].startswith(("[CSV: ", "[TSV: ", "[table: "))
    assert (is_outline, is_diff, is_table) == (kind == "outline", kind == "diff", kind == "table"), p.body
    if kind == "json":
        assert body[0].startswith("JSON ")
    # bounded, byte-stable, and the marker made from it is recognised exactly
    assert len(body) <= MAX_LINES and len(p.body) <= MAX_CHARS
    assert preview(text) == p
    marker = tool_result_marker(text, REF, 4000)
    assert tool_result_ref(marker) == REF


def test_an_outline_prefers_top_level_definitions_and_keeps_file_order():
    p = preview(cat_n(python_module(n_classes=20)))
    body = p.body.split("\n")
    numbers = [int(line.split(":", 1)[0]) for line in body if line[:1].isdigit()]
    assert numbers == sorted(numbers)  # in file order
    assert sum(": class Card" in line for line in body) >= 12  # the classes before their methods
    assert body[-1] == f"[outline: {20 * 6 + 1} definitions in {len(python_module(n_classes=20))} lines]"
    assert p.hidden == p.lines - (len(body) - 1)


def test_errors_outside_the_code_come_with_the_outline_but_the_codes_own_do_not():
    view = cat_n(MODULE + ["    except ImportError:  # pragma: no cover"])
    assert "ImportError" not in preview(view).body  # a line of the file, not an error
    failed = "Traceback (most recent call last):\nValueError: could not open card.py\n" + "\n".join(MODULE)
    assert "ValueError: could not open card.py" in preview(failed).body.split("\n")


# A file view's outline keeps, after each signature, the attribute and call names its body uses.
BODY = [
    "import os",
    "",
    "class Loader:",
    "    def __init__(self, root):",
    "        self.root = root",
    "        self.cache = {}",
    "",
    "    def read(self, name):",
    "        path = os.path.join(self.root, name)",
    "        if name in self.cache:",
    "            return self.cache[name]",
    "        data = parse_file(path, strict=True)",
    "        self.cache[name] = data.rows",
    "        return data",
    "",
    "def parse_file(path, strict=False):",
    "    with open(path) as fh:",
    "        return Table.from_lines(fh)",
]
BODY_CASES = {
    "openhands file_editor view": (
        "Here's the result of running `cat -n` on /workspace/loader.py:\n" + cat_n(BODY),
        "8:     def read(self, name): … os.path.join(), self.root, self.cache, parse_file()",
    ),
    "claude code Read": (
        "\n".join(f"{i:6}→{line}" for i, line in enumerate(BODY, 1)),
        "4:     def __init__(self, root): … self.root, self.cache",
    ),
    "swe-agent open": (
        "[File: loader.py (18 lines total)]\n" + "\n".join(f"{i}:{line}" for i, line in enumerate(BODY, 1)),
        "16: def parse_file(path, strict=False): … open(), Table.from_lines()",
    ),
    "mini-swe-agent cat": (
        "<returncode>0</returncode>\n<output>\n" + "\n".join(BODY) + "\n</output>",
        "18: def parse_file(path, strict=False): … open(), Table.from_lines()",
    ),
    "aider listing": (
        "loader.py\n```\n" + "\n".join(BODY) + "\n```",
        "6:     def __init__(self, root): … self.root, self.cache",
    ),
    "codex nl -ba": (cat_n(BODY), "3: class Loader:"),  # a class's own body before its first method: nothing
}


@pytest.mark.parametrize("name", list(BODY_CASES))
def test_an_outline_keeps_the_names_each_body_uses(name):
    text, expected = BODY_CASES[name]
    lines = text.split("\n")
    outline = source_outline(text, lines, max_chars=MAX_CHARS, max_lines=MAX_LINES)
    assert outline is not None and expected in outline[0], outline
    assert len(outline[0]) <= MAX_LINES and sum(map(len, outline[0])) + len(outline[0]) - 1 <= MAX_CHARS
    assert source_outline(text, lines, max_chars=MAX_CHARS, max_lines=MAX_LINES) == outline  # byte-stable


@pytest.mark.parametrize(
    "body, names",
    [
        (["    return helper(x) + self.total"], "helper(), self.total"),
        (["    if isinstance(x, int) and len(x):", "        print(x)"], ""),  # keywords and builtins: no signal
        (["    a.b.c.d.e.f.g = 1"], "a.b.c.d.e"),  # a dotted name: at most 5 parts
        ([f"    call_{i}()" for i in range(20)], ", ".join(f"call_{i}()" for i in range(8))),  # at most BODY_NAMES
        (["    compute(value)"], ""),  # its own name (in the signature) is not repeated
    ],
)
def test_body_names(body, names):
    assert body_names(body, "def compute(value):") == names
