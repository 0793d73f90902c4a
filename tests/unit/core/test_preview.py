"""proxy.core.preview: the preview of a large output, by content type where it has one."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from proxy.core.preview import (
    MAX_CHARS,
    MAX_LINES,
    SCAN_LINES,
    WIDTH,
    body_names,
    error_lines,
    json_shape,
    plain_text,
    preview,
    source_outline,
)
from proxy.core.texts import make_ref, tool_result_marker, tool_result_ref

# ==================== preview
# Previews keep what matters of an output (errors, their places, the end; a JSON's shape), bounded
# and byte-stable, and a marker made from any of them is recognised exactly.

REF = make_ref("a" * 32, "tool_result", "x")


def pytest_run() -> str:
    lines = [
        "============================= test session starts ==============================",
        "platform linux -- Python 3.11.7, pytest-8.3.2, pluggy-1.5.0",
        "rootdir: /repo",
        "collected 212 items",
        "",
    ]
    lines += [f"tests/unit/test_mod{i}.py ........................................ [{i * 3:3d}%]" for i in range(30)]
    lines += [
        "",
        "=================================== FAILURES ===================================",
        "______________________________ test_parse_header _______________________________",
        "",
        "    def test_parse_header():",
        "        data = load('fixtures/header.bin')",
    ]
    lines += [f"        step_{i} = compute({i})" for i in range(25)]
    lines += [
        ">       assert parse_header(data) == {'version': 2}",
        "E       AssertionError: assert {'version': 1} == {'version': 2}",
        "E         Differing items:",
        "E         {'version': 1} != {'version': 2}",
        "",
        "tests/unit/test_header.py:42: AssertionError",
    ]
    lines += [f"------ captured log line {i} ------" for i in range(20)]
    lines += [
        "=========================== short test summary info ============================",
        "FAILED tests/unit/test_header.py::test_parse_header - AssertionError: assert {'version': 1} == {'version': 2}",
        "========================= 1 failed, 211 passed in 3.21s =========================",
    ]
    return "\n".join(lines)


def python_traceback() -> str:
    lines = [f"INFO loading shard {i} of 80 from /data/shards/part-{i:05d}.parquet" for i in range(80)]
    lines += [
        "Traceback (most recent call last):",
        '  File "/app/train.py", line 214, in <module>',
        "    main()",
        '  File "/app/train.py", line 190, in main',
        "    trainer.fit(model)",
        '  File "/usr/lib/python3.11/site-packages/lightning/trainer.py", line 532, in fit',
        "    self._run(model)",
        '  File "/app/data/loader.py", line 88, in __getitem__',
        "    row = self.table[idx]",
        "KeyError: 'label'",
    ]
    lines += [f"DEBUG shutting down worker {i}" for i in range(30)]
    return "\n".join(lines)


def gcc_log() -> str:
    lines = [f"gcc -O2 -Wall -c src/module{i}.c -o build/module{i}.o" for i in range(40)]
    lines[12:12] = [
        "src/module12.c: In function 'parse_args':",
        "src/module12.c:57:13: error: 'argc_max' undeclared (first use in this function)",
        "   57 |     if (i > argc_max) {",
        "      |             ^~~~~~~~",
    ]
    lines[30:30] = ["src/module27.c:101:5: warning: unused variable 'tmp' [-Wunused-variable]"]
    lines += ["make: *** [Makefile:23: build/module12.o] Error 1", "make: *** Waiting for unfinished jobs...."]
    return "\n".join(lines)


def rustc_log() -> str:
    lines = [f"   Compiling dep{i} v0.{i}.0" for i in range(60)]
    lines += [
        "error[E0308]: mismatched types",
        " --> src/main.rs:14:22",
        "   |",
        '14 |     let count: u32 = "three";',
        "   |                ---   ^^^^^^^ expected `u32`, found `&str`",
    ]
    lines += [f"   Checking dep{i} v0.{i}.0" for i in range(60, 90)]
    lines += ['error: could not compile `app` (bin "app") due to 1 previous error']
    return "\n".join(lines)


def tsc_log() -> str:
    lines = [f"[{i:02d}:00] watching file src/app/part{i}.ts" for i in range(50)]
    lines[20:20] = ["src/app/view.ts(12,5): error TS2322: Type 'string' is not assignable to type 'number'."]
    return "\n".join(lines + ["Found 1 error in src/app/view.ts:12"])


def grep_output() -> str:
    return "\n".join(f"proxy/core/mod{i}.py:{i * 7 + 1}:    def handle_{i}(self, request):" for i in range(300))


def ls_recursive() -> str:
    lines: list[str] = []
    for d in range(30):
        lines += [f"./src/pkg{d}:", *(f"file{j}.py" for j in range(8)), ""]
    return "\n".join(lines)


def json_object() -> str:
    return json.dumps(
        {
            "id": "run_8812",
            "status": "failed",
            "exit_code": 2,
            "steps": [{"name": f"step{i}", "ok": i != 7, "duration_ms": i * 113} for i in range(200)],
            "env": {"PATH": "/usr/bin", "HOME": "/root", "LANG": "C.UTF-8"},
            "log": "x" * 3000,
        }
    )


def json_array() -> str:
    return json.dumps(
        [{"id": i, "name": f"user{i}", "email": f"user{i}@example.com", "roles": ["a", "b"]} for i in range(500)],
        indent=2,
    )


def json_nested() -> str:
    value: object = {"leaf": 1}
    for i in range(50):
        value = {f"level{i}": value, "items": list(range(i))}
    return json.dumps(value)


def wrapped_output() -> str:
    """A command's output wrapped in JSON, as some agents send it."""
    return json.dumps({"output": pytest_run(), "metadata": {"exit_code": 1, "duration_seconds": 3.4}})


SAMPLES = {
    f.__name__: f()
    for f in (
        pytest_run,
        python_traceback,
        gcc_log,
        rustc_log,
        tsc_log,
        grep_output,
        ls_recursive,
        json_object,
        json_array,
        json_nested,
        wrapped_output,
    )
}
SAMPLES.update(
    {
        "empty": "",
        "one huge line": "x" * 2_000_000,
        "blank lines": "\n \n\t\n" * 1000,
        "surrogates": "\ud83d ok \udfff\n" * 3000,
    }
)


def shown(text: str) -> list[str]:
    body = preview(text).body
    return body.split("\n")


def assert_bounded(body: str) -> None:
    assert len(body) <= MAX_CHARS and body.count("\n") < MAX_LINES


# ---- what is kept ---------------------------------------------------------------------------------


def test_a_failing_test_run_keeps_the_assertion_and_the_summary():
    lines = shown(pytest_run())
    assert lines[0].startswith("=====") and "test session starts" in lines[0]
    assert "E       AssertionError: assert {'version': 1} == {'version': 2}" in lines
    assert lines[-1] == "========================= 1 failed, 211 passed in 3.21s ========================="
    assert lines[-2].startswith("FAILED tests/unit/test_header.py::test_parse_header - AssertionError")
    assert "… 35 lines …" in lines  # the gaps say how much is left out


def test_a_traceback_keeps_its_frames_and_the_exception():
    lines = shown(python_traceback())
    assert "Traceback (most recent call last):" in lines
    assert '  File "/app/data/loader.py", line 88, in __getitem__' in lines  # the frame nearest the error
    assert "KeyError: 'label'" in lines
    assert lines[-1] == "DEBUG shutting down worker 29"


def test_compiler_errors_keep_their_file_line_col():
    gcc = shown(gcc_log())
    assert "src/module12.c:57:13: error: 'argc_max' undeclared (first use in this function)" in gcc
    assert "src/module27.c:101:5: warning: unused variable 'tmp' [-Wunused-variable]" in gcc
    assert gcc[-2:] == [
        "make: *** [Makefile:23: build/module12.o] Error 1",
        "make: *** Waiting for unfinished jobs....",
    ]
    rust = shown(rustc_log())
    assert "error[E0308]: mismatched types" in rust and " --> src/main.rs:14:22" in rust
    assert rust[-1].startswith("error: could not compile `app`")
    tsc = shown(tsc_log())
    assert "src/app/view.ts(12,5): error TS2322: Type 'string' is not assignable to type 'number'." in tsc
    assert tsc[-1] == "Found 1 error in src/app/view.ts:12"


def test_listings_keep_their_ends_and_paths():
    grep = shown(grep_output())
    assert grep[0] == "proxy/core/mod0.py:1:    def handle_0(self, request):"
    assert grep[-1] == "proxy/core/mod299.py:2094:    def handle_299(self, request):"
    listing = shown(ls_recursive())
    assert listing[0] == "./src/pkg0:" and "./src/pkg29:" in listing and listing[-1] == "file7.py"
    assert sum(line.startswith("./src/pkg") for line in listing) >= 4


def test_json_shows_its_shape():
    obj = shown(json_object())
    assert obj[0] == "JSON object, 6 keys:"
    assert '"status": "failed"' in obj and '"exit_code": 2' in obj
    steps = next(line for line in obj if line.startswith('"steps": '))
    assert steps.startswith('"steps": [{"name": "step0", "ok": true, "duration_ms": 0}') and steps.endswith("… +198]")
    assert any(line.startswith('"log": "xxxx') and line.endswith('…"') for line in obj)
    array = shown(json_array())
    assert array[0] == "JSON array, 500 items:"
    assert array[1] == '[0]: {"id": 0, "name": "user0", "email": "user0@example.com", "roles": ["a", "b"]}'
    assert array[-1].startswith("… ") and array[-1].endswith(" more items")
    nested = shown(json_nested())
    assert nested[0] == "JSON object, 2 keys:" and nested[1].startswith('"level49": {"level48": {')
    assert preview(json_array()).hidden == preview(json_array()).lines  # no line of the text is shown verbatim


def test_a_wrapped_output_is_previewed_as_lines():
    lines = shown(wrapped_output())
    assert lines[0] == 'JSON object, 2 keys; "output" is shown below as lines:'
    assert lines[1] == '"metadata": {"exit_code": 1, "duration_seconds": 3.4}'
    assert "E       AssertionError: assert {'version': 1} == {'version': 2}" in lines
    assert lines[-1] == "========================= 1 failed, 211 passed in 3.21s ========================="


def test_sizes_and_edges():
    empty = preview("")
    assert (empty.body, empty.hidden, empty.lines, empty.chars) == ("", 0, 0, 0)
    huge = preview("x" * 2_000_000)
    assert huge.body == "x" * WIDTH + "…" and (huge.hidden, huge.lines, huge.chars) == (0, 1, 2_000_000)
    small = "line one\nline two\n\nline four"
    assert preview(small).body == small and preview(small).hidden == 0  # a text that fits is shown whole
    assert preview(" \n" * 100).body == "" and preview(" \n" * 100).hidden == 100  # nothing worth a line
    assert preview("[1, 2, 3]").body == "[1, 2, 3]"  # JSON that fits is shown as it is
    assert preview('{"a": ' * 5000 + "1" + "}" * 5000).lines == 1  # too deep to parse: previewed as a line


def test_signals_are_found_near_both_ends_of_a_long_text():
    lines = [f"progress {i}" for i in range(100_000)]
    lines[10] = "ValueError: early failure"
    lines[-60] = "src/late.c:9:1: error: late failure"
    lines[50_000] = "error: in the unscanned middle"
    body = preview("\n".join(lines)).body
    assert "ValueError: early failure" in body and "src/late.c:9:1: error: late failure" in body
    assert "in the unscanned middle" not in body  # only SCAN_LINES at each end are looked at
    assert SCAN_LINES < 50_000 - 10


def test_error_lines_for_the_index():
    assert error_lines(pytest_run()) == [
        "E AssertionError: assert {'version': 1} == {'version': 2}",
        "FAILED tests/unit/test_header.py::test_parse_header - AssertionError: assert {'version': 1} == {'version': 2}",
    ]
    assert error_lines(python_traceback()) == ["KeyError: 'label'"]
    assert error_lines("except ValueError:\n    raise KeyError(key)\nall good") == []  # code is not an error
    assert error_lines('TYPE_ERROR = "x"\n52 logging.ERROR: {"red"}\nif FAILED_ONCE:') == []  # nor are names
    assert error_lines("ERROR: pip's resolver\nx FAILED y") == ["ERROR: pip's resolver", "x FAILED y"]
    wrapped = json.dumps({"output": "\n".join(["ok"] * 400 + ["KeyError: 'k'"]), "metadata": {"exit_code": 1}})
    assert error_lines(plain_text(wrapped)) == ["KeyError: 'k'"]  # a JSON-wrapped output is read as its lines
    assert plain_text('{"a": 1}') == '{"a": 1}' and plain_text("plain") == "plain"


# ---- bounded, stable, recognised ------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_sample_is_bounded_stable_and_recognised(name):
    text = SAMPLES[name]
    first, second = preview(text), preview(text)
    assert first == second
    assert_bounded(first.body)
    assert first.lines == len(text.splitlines()) and first.chars == len(text) and 0 <= first.hidden <= first.lines
    marker = tool_result_marker(text, REF, 4321)
    assert marker == tool_result_marker(text, REF, 4321) and tool_result_ref(marker) == REF
    head, body_and_trailer = marker.split("\n", 1)
    body, trailer = body_and_trailer.rsplit("\n", 1)
    altered = [
        marker.replace(f'ref="{REF}"', 'ref="otherRef99"', 1),  # the trailer names another ref
        marker + "\n",  # something after the trailer
        marker[:-1],  # the trailer cut short
        f"{head}\n{body}\nextra line\n{trailer}"
        if body.count("\n") == MAX_LINES - 1
        else f"{head}\n{body}{'y' * (MAX_CHARS + 1 - len(body))}\n{trailer}",  # a preview past the bounds
        marker.replace(" lines not shown", " more lines", 1),
    ]
    for text in altered:
        assert tool_result_ref(text) is None, text[-200:]


def pathological() -> list[str]:
    """Inputs whose preview a careless scan would make quadratic (bench/worst_cases.py times them)."""
    return [
        "a" * 5_000_000,
        "e" * 400 + "\n",
        "\n".join(f"error: {i} at x.py:{i}" for i in range(200_000)),
        "\n" * 500_000,
        "[" * 200_000 + "]" * 200_000,
        json.dumps({f"k{i}": [i] * 5 for i in range(50_000)}),
        "\n".join("E" + " " * 399 for _ in range(20_000)),
        "\n".join("a/" * 200 for _ in range(20_000)),
    ]


def test_pathological_inputs_get_a_bounded_preview():
    for text in pathological():
        assert_bounded(preview(text).body)


# ---- properties -----------------------------------------------------------------------------------

FRAGMENTS = [
    "",
    " ",
    "x",
    "error: bad",
    "FAILED t.py::x",
    "Traceback (most recent call last):",
    '  File "a.py", line 3, in f',
    "E   AssertionError: no",
    "KeyError: 'k'",
    "a/b/c.py:12:3: warning: w",
    "warning: y",
    "/usr/lib/x.so",
    "{",
    "}",
    "[1, 2]",
    '"k": 1',
    "\t",
    "…",
    "… 3 lines …",
    "é" * 50,
    "y" * 500,
    "\ud800",
    "\r",
    "\r\n",
    "\u2028",
    "\x0b",
    "[offloaded tool result: 1 tokens, ref=abcdefgh]",
]
texts = st.one_of(
    st.text(alphabet=st.characters(blacklist_categories=()), max_size=3000),
    st.lists(st.sampled_from(FRAGMENTS), max_size=400).map("\n".join),
    st.lists(st.sampled_from(FRAGMENTS), max_size=200).map("".join),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=80),
    lambda children: st.lists(children, max_size=30) | st.dictionaries(st.text(max_size=60), children, max_size=30),
    max_leaves=200,
)


@hsettings(max_examples=300, deadline=None)
@given(texts, st.integers(0, 10**9))
def test_any_text_gives_a_bounded_stable_recognised_preview(text, tokens):
    result = preview(text)
    assert result == preview(text)
    assert_bounded(result.body)
    assert result.lines == len(text.splitlines()) and 0 <= result.hidden <= result.lines and result.chars == len(text)
    marker = tool_result_marker(text, REF, tokens)
    assert tool_result_ref(marker) == REF
    assert tool_result_ref(marker.replace(REF, "otherRef99", 1)) is None


@hsettings(max_examples=200, deadline=None)
@given(json_values, st.sampled_from([None, 2]))
def test_any_json_gives_a_bounded_shape(value, indent):
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    shape = json_shape(text)
    if isinstance(value, (dict, list)):
        assert shape is not None
        assert len(shape) <= MAX_LINES and sum(map(len, shape)) + len(shape) - 1 <= MAX_CHARS  # without the guard
        assert all("\n" not in line for line in shape)
    else:
        assert shape is None
    assert tool_result_ref(tool_result_marker(text, REF, 1)) == REF


# ==================== preview kinds
# Previews by content type: a file view → an outline of its definitions; a diff → its file and
# hunk headers; a table → header, size, first rows; a log or a test run → the line preview (head,
# tail, errors); JSON → its shape. Outputs in the styles of the shared traces' frameworks
# (OpenHands, mini-swe-agent, SWE-agent, tau-bench) and of other agents (Claude Code, Codex CLI,
# aider), written here.


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
