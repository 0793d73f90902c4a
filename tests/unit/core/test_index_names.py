"""What the summary index leaves out (proxy.core.index_names): diff prefixes, framework tags,
temporary names, other spellings of a file, near-duplicate errors; in the shapes of the agent
frameworks' results (mini-swe-agent, OpenHands, SWE-agent, aider, Claude Code, Codex)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core import index_names as names
from proxy.core.summary_index import summary_index
from proxy.formats.chat import VIEW as CHAT


def call(call_id: str, name: str, arguments: dict) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def names_line(history: list[dict]) -> list[str]:
    """The names the index of `history` lists ([] if none)."""
    last = summary_index(history, CHAT).split("\n")[-2:-1]
    return last[0].removeprefix("names in results: ").split(", ") if last and last[0].startswith("names") else []


def ran(command: str, output: str, *, arguments: dict | None = None) -> list[dict]:
    """One bash call and its result."""
    return [
        {"role": "assistant", "content": None, "tool_calls": [call("c1", "bash", arguments or {"command": command})]},
        {"role": "tool", "tool_call_id": "c1", "content": output},
    ]


# ------------------------------------------------------------------------------ diff headers


@pytest.mark.parametrize(
    "text, plain",
    [
        ("diff --git a/src/x.py b/src/x.py", "diff --git src/x.py src/x.py"),  # git diff (aider, any shell)
        ("--- a/src/x.py\n+++ b/src/x.py\n@@ -1 +1 @@", "--- src/x.py\n+++ src/x.py\n@@ -1 +1 @@"),
        ("index 83db48f..bf269f4 100644\n--- a/pkg/m.py", "index 83db48f..bf269f4 100644\n--- pkg/m.py"),
        ('{"input": "--- a/x.py\\n+++ b/x.py\\n"}', '{"input": "--- x.py\\n+++ x.py\\n"}'),  # a call's JSON patch
        ("--- /dev/null\n+++ b/new.py", "--- /dev/null\n+++ new.py"),
        ("see a/b/c.py and --- a/x in the middle", "see a/b/c.py and --- a/x in the middle"),  # no header
    ],
)
def test_diff_headers_lose_their_a_and_b(text, plain):
    assert names.plain_diff(text) == plain


def test_a_diff_names_each_file_once_in_the_plain_spelling():
    diff = "\n".join(
        [
            "diff --git a/src/pkg/core.py b/src/pkg/core.py",
            "index 1a2b3c4..5d6e7f8 100644",
            "--- a/src/pkg/core.py",
            "+++ b/src/pkg/core.py",
            "@@ -10,2 +10,2 @@ def load_items(path):",
            "-    return read_all(path)",
            "+    return read_all(path, strict=True)",
        ]
    )
    listed = names_line(ran("git diff", diff))
    assert "src/pkg/core.py" in listed and "load_items" in listed and "read_all" in listed
    assert not any(name.startswith(("a/", "b/")) for name in listed)


def test_a_patch_the_agent_wrote_makes_its_plain_paths_written():
    patch = "--- a/src/pkg/core.py\n+++ b/src/pkg/core.py\n@@\n-x\n+y\n"
    history = [
        *ran("", "", arguments={"command": f"cat > fix.patch <<'EOF'\n{patch}EOF"}),
        {"role": "assistant", "content": None, "tool_calls": [call("c2", "bash", {"command": "grep -rn y src"})]},
        {"role": "tool", "tool_call_id": "c2", "content": "src/pkg/core.py:3:y"},
    ]
    assert "src/pkg/core.py" not in names_line(history)  # the agent wrote it, in its patch


# ------------------------------------------------------------------------------ template tags


@pytest.mark.parametrize(
    "framework, output, gone, kept",
    [
        (
            "mini-swe-agent",
            "<returncode>1</returncode>\n<output>\nImportError in pkg.module_a\n</output>",
            [],
            ["pkg.module_a"],
        ),
        (
            "mini-swe-agent, long output",
            "<warning>too long</warning><output_head>\nfirst_line_name\n</output_head>\n"
            "<elided_chars>\n1234 characters elided\n</elided_chars>\n<output_tail>\nlast_line_name\n</output_tail>",
            ["output_head", "output_tail", "elided_chars"],
            ["first_line_name", "last_line_name"],
        ),
        (
            "Claude Code",
            "<tool_use_error>File has not been read yet: src/app_main.py</tool_use_error>",
            ["tool_use_error"],
            ["src/app_main.py"],
        ),
        (
            "a prompt template",
            "{{tool_output}} then {{ tool_result_text }} from render_prompt",
            ["tool_output", "tool_result_text"],
            ["render_prompt"],
        ),
        ("code with generics", "fn make() -> Vec<my_struct> { build_all() }", [], ["my_struct", "build_all"]),
    ],
)
def test_framework_tags_are_no_names(framework, output, gone, kept):
    listed = names_line(ran("python run.py", output))
    for name in gone:
        assert name not in listed, (framework, name)
    for name in kept:
        assert name in listed, (framework, name)


# ------------------------------------------------------------------------------ temporary names


@pytest.mark.parametrize(
    "name, agents, temporary",
    [
        ("/tmp/tmpab12cd34/pkg/mod.py", set(), True),  # tempfile.mkdtemp()
        ("/tmp/tmpkpfujw70/pytest/src/_pytest/helpconfig.py", set(), True),
        ("/tmp/pylint_debug_72fvdfuz/pyproject.toml", set(), True),  # mkdtemp(prefix="pylint_debug_")
        ("/tmp/tmp.Xy12AbCdEf/out.txt", set(), True),  # mktemp -d
        ("tmpq1w2e3r4.py", set(), True),  # NamedTemporaryFile(suffix=".py")
        ("/tmp/tmpr59rsqbu/pylint/lint/run.py", {"tmpr59rsqbu"}, False),  # OpenHands' checkout: the agent works there
        ("/tmp/test_script.py", set(), False),  # a file the agent names itself
        ("tmp_path", set(), False),
        ("tmp_path_factory.mktemp", set(), False),  # pytest's fixtures
        ("src/module_000/implementation_file.py", set(), False),
        ("build/lib.linux-x86_64-cpython-39/pkg/core.py", set(), False),
    ],
)
def test_temporary_names(name, agents, temporary):
    assert names.temporary(name, agents) is temporary


def test_a_temporary_directory_the_agent_works_in_is_kept_others_are_not():
    history = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                call(
                    "c1", "execute_bash", {"command": "cd /tmp/tmpr59rsqbu/pylint && python -m pytest tests/test_x.py"}
                )
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "\n".join(
                [
                    "/tmp/tmpr59rsqbu/pylint/pylint/lint/run.py:12: in do_run",
                    "/tmp/tmpkpfujw70/pytest/src/_pytest/helpconfig.py:102: in pytest_cmdline_parse",
                    "[Current working directory: /tmp/tmpr59rsqbu/pylint]",
                    "[Command finished with exit code 1]",
                ]
            ),
        },
    ]
    listed = names_line(history)
    assert "/tmp/tmpr59rsqbu/pylint/pylint/lint/run.py" in listed and "do_run" in listed
    assert not any("tmpkpfujw70" in name for name in listed)


def test_package_files_are_no_names():
    output = "\n".join(
        [
            "Collecting numpy",
            "  Downloading numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.whl",
            "  Stored in directory: /root/.cache/pip/wheels/49/5f/4f/01b7d31ea6ddac9643da788242d33e5fd3",
            "Successfully installed numpy_financial",
        ]
    )
    listed = names_line(ran("pip install numpy", output))
    assert listed == ["numpy_financial"]


# ------------------------------------------------------------------------------ one spelling per file


@pytest.mark.parametrize(
    "paths, roots",
    [
        (["/testbed/astropy/io/rst.py", "astropy/io/rst.py"], ["/testbed"]),  # SWE-agent, mini-swe-agent
        (["/workspace/django/db/models.py", "django/db/models.py", "/repo/x.py"], ["/workspace"]),  # OpenHands
        (["/repo/src/a.py", "src/b.py"], []),  # never the same file: no root evident
        (["/a/b/c/d.py", "c/d.py", "/x/c/d.py"], ["/a/b", "/x"]),
    ],
)
def test_roots_are_evident_from_the_agents_own_paths(paths, roots):
    assert names.roots(paths) == roots


@pytest.mark.parametrize(
    "name, key",
    [
        ("./src/x.py", "src/x.py"),
        ("././src/x.py", "src/x.py"),
        ("/repo/src/x.py", "src/x.py"),
        ("src/x.py", "src/x.py"),
        ("/elsewhere/src/x.py", "/elsewhere/src/x.py"),
        ("pkg.mod.func", "pkg.mod.func"),
    ],
)
def test_the_spellings_of_a_file_have_one_key(name, key):
    assert names.spelling_key(name, ["/repo"]) == key


def test_a_file_is_named_once_and_not_at_all_if_the_agent_wrote_it():
    shown = {
        "./src/a.py": [1, 5, 0],
        "/repo/src/a.py": [2, 3, 1],
        "src/a.py": [1, 1, 0],
        "./docs/guide.rst": [1, 2, 0],
        "/repo/src/b.py": [1, 4, 0],
        "load_all": [1, 4, 0],
    }
    kept = names.signal(shown, {"/repo/src/b.py", "src/c.py"}, ["/repo"])
    # src/a.py: its three spellings, the most results, the latest, the flag; b.py: the agent wrote it
    assert kept == {"src/a.py": [2, 5, 1], "docs/guide.rst": [1, 2, 0], "load_all": [1, 4, 0]}


def test_the_files_line_lists_a_file_once_in_the_agents_first_spelling():
    where = {"/repo/src/a.py": "@3:1-20", "src/a.py": "@9", "./b.py": "@4"}
    located = names.one_file_spelling(["/repo/src/a.py", "./b.py", "src/a.py", "b.py"], where, ["/repo"])
    assert located == ["/repo/src/a.py@9", "./b.py@4"]


# ------------------------------------------------------------------------------ near-duplicate errors


@pytest.mark.parametrize(
    "errors, listed",
    [
        (['File "x.py", line 12, in f: ValueError: bad', 'File "x.py", line 40, in f: ValueError: bad'], 1),
        (["TypeError: <object at 0x7f3a2b1c> is not callable", "TypeError: <object at 0x7f99aa00> is not callable"], 1),
        (
            [
                "AttributeError: module 'numpy' has no attribute 'product'",
                "Error: module 'numpy' has no attribute 'product'",
            ],
            1,
        ),  # contained in one listed
        (
            [
                "Found wrong number (0) of constraints for test_edge1",
                "Found wrong number (0) of constraints for test_edge2",
            ],
            2,
        ),  # a name's digits tell errors apart
        (["ValueError: bad", "KeyError: 'bad'"], 2),
    ],
)
def test_near_duplicate_errors_are_listed_once(errors, listed):
    keys: list[str] = []
    assert sum(names.new_error(error, keys) for error in errors) == listed


def test_filtered_indexes_stay_byte_stable():
    history = [
        *ran(
            "git diff",
            "diff --git a/src/x.py b/src/x.py\n--- a/src/x.py\n+++ b/src/x.py\n"
            "<output_head>/tmp/tmpab12cd34/y.py ./src/z.py\n"
            "ValueError at line 3\nValueError at line 4",
        )
    ]
    assert summary_index(history, CHAT) == summary_index(json.loads(json.dumps(history)), CHAT)
    assert names_line(history) == ["src/x.py", "src/z.py"]


class _RootsNotScanned(frozenset):
    """Roots that may be looked up but not walked: a name is keyed by its own few prefixes, not
    by a scan of every root the agent's paths showed (that was names x roots: 3,000 roots and
    10,000 names took 5 s)."""

    def __iter__(self):
        raise AssertionError("the roots were scanned")


def test_a_spelling_is_keyed_by_lookups_not_by_a_scan_of_the_roots():
    roots = _RootsNotScanned({"/repo", "/repo/src", "/r1", "/"})
    assert names.spelling_key("/repo/src/x.py", roots) == "x.py"  # the longest root wins
    assert names.spelling_key("/repo/lib/x.py", roots) == "lib/x.py"
    assert names.spelling_key("//x.py", roots) == "x.py"
    assert names.spelling_key("/other/x.py", roots) == "/other/x.py"
    assert names.spelling_key("./././r1/a.py", roots) == "r1/a.py"  # a relative path: no root


def _key_by_scan(name: str, known_roots: list[str]) -> str:  # the former spelling_key
    while name.startswith("./"):
        name = name[2:]
    for root in known_roots:
        if name.startswith(root + "/"):
            return name[len(root) + 1 :]
    return name


_PARTS = st.sampled_from(["/", "a", "b", "./", "//", "a.py"])


@given(
    st.lists(_PARTS, max_size=8).map("".join),
    st.lists(st.lists(_PARTS, max_size=4).map(lambda parts: "/" + "".join(parts)), max_size=4),
)
def test_a_spelling_key_is_the_longest_roots_as_a_scan_of_them_finds(name, roots):
    longest_first = sorted(set(roots), key=lambda root: (-len(root), root))  # as names.roots gives them
    assert names.spelling_key(name, frozenset(roots)) == _key_by_scan(name, longest_first)


class _CountedSlices(str):
    slices = 0

    def __getitem__(self, index):
        _CountedSlices.slices += 1
        return str.__getitem__(self, index)


def test_leading_dot_slashes_are_dropped_in_one_copy():
    """`./` x 400,000 in a call's path took 3.9 s to strip two characters at a time (each a copy)."""
    _CountedSlices.slices = 0
    assert names.without_dot_slash(_CountedSlices("./" * 1000 + "x.py")) == "x.py"
    assert _CountedSlices.slices <= 1
    assert names.without_dot_slash("././") == "" and names.without_dot_slash(".x/./") == ".x/./"
