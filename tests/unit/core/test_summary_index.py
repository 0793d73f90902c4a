"""proxy.core.summary_index: the index of a summarised part and the names it leaves out."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from proxy.core import compression as cp
from proxy.core import summary_index as names
from proxy.core.summary_index import INDEX_CHARS, LISTS_CHARS, summary_index
from proxy.core.texts import history_ref, is_marker, make_ref
from proxy.formats.chat import VIEW as CHAT
from proxy.formats.responses import ResponsesView, items_from_chat

# ==================== summary index
# The index of a summarised part: files, commands, errors and the names only the results showed,
# read straight from the items, in chat and in Responses format alike, bounded and byte-stable.

RESPONSES = ResponsesView(())

PYTEST_FAILURE = "\n".join(
    [
        "============================= test session starts ==============================",
        "collected 12 items",
        "",
        "tests/test_app.py ..F.........",
        "",
        "=================================== FAILURES ===================================",
        ">       assert total([1, 2]) == 3",
        "E       AssertionError: assert 2 == 3",
        "tests/test_app.py:14: AssertionError",
        "=========================== short test summary info ============================",
        "FAILED tests/test_app.py::test_total - AssertionError: assert 2 == 3",
        "========================= 1 failed, 11 passed in 0.12s =========================",
    ]
)
SOURCE = "\n".join(f"{i:6}\tdef f{i}(x):\n        return x + {i}" for i in range(40))


def call(call_id: str, name: str, arguments: dict) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def agent_history() -> list[dict]:
    """An agent fixing a bug: reads, searches, edits with an editor and a patch, runs the tests."""
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "tests/test_app.py fails; fix src/app.py."},
        {
            "role": "assistant",
            "content": "Looking at the code.",
            "tool_calls": [
                call("c1", "bash", {"command": "cd /repo && cat src/app.py"}),
                call("c2", "bash", {"command": "grep -rn 'def total' src/ tests/test_app.py"}),
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": SOURCE},
        {"role": "tool", "tool_call_id": "c2", "content": "src/app.py:3:def total(xs):"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                call("c3", "bash", {"command": "cd /repo && python -m pytest tests/test_app.py::test_total -x -q"})
            ],
        },
        {"role": "tool", "tool_call_id": "c3", "content": PYTEST_FAILURE},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                call("c4", "str_replace_editor", {"command": "view", "path": "/repo/src/util.py"}),
                call(
                    "c5",
                    "str_replace_editor",
                    {
                        "command": "str_replace",
                        "path": "/repo/src/app.py",
                        "old_str": "return sum(xs[1:])",
                        "new_str": "return sum(xs)",
                    },
                ),
            ],
        },
        {"role": "tool", "tool_call_id": "c4", "content": "def helper():\n    pass"},
        {"role": "tool", "tool_call_id": "c5", "content": "The file /repo/src/app.py has been edited."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                call(
                    "c6",
                    "apply_patch",
                    {
                        "input": "*** Begin Patch\n*** Update File: src/app.py\n@@\n-x\n+y\n"
                        "*** Add File: tests/test_extra.py\n+def test_x(): pass\n*** End Patch"
                    },
                ),
                call("c7", "bash", {"command": "python -c 'import app'\necho done"}),
                call("c8", "task_tracker", {"command": "plan", "task_list": []}),
            ],
        },
        {"role": "tool", "tool_call_id": "c6", "content": "Done!"},
        {
            "role": "tool",
            "tool_call_id": "c7",
            "content": "Traceback (most recent call last):\n"
            '  File "<string>", line 1, in <module>\n'
            "ModuleNotFoundError: No module named 'app'",
        },
        {"role": "tool", "tool_call_id": "c8", "content": "ok"},
        {"role": "assistant", "content": "Fixed."},
    ]


FILES = "files read or edited (@offset in the ref:lines shown): "
EXPECTED = "\n".join(
    [
        "<index>",
        # each file with the line of the ref (0-based, system items not stored) of the last result that showed it;
        # /repo/src/app.py is src/app.py (the agent wrote both: /repo is the root), listed once as first written
        FILES + "src/app.py@10, tests/test_app.py@5, /repo/src/util.py@7, tests/test_extra.py@10",
        "commands run: cat src/app.py; grep -rn 'def total' src/ tests/test_app.py; "
        "python -m pytest tests/test_app.py::test_total -x -q; python -c 'import app' …",
        "errors seen: E AssertionError: assert 2 == 3; FAILED tests/test_app.py::test_total - AssertionError: assert 2 == 3; "
        "ModuleNotFoundError: No module named 'app'",
        "</index>",
    ]
)


def test_a_chat_history_is_indexed():
    assert summary_index(agent_history(), CHAT) == EXPECTED


def test_the_same_history_in_responses_format_gives_the_same_index():
    items = items_from_chat(agent_history())
    assert any(item.get("type") == "function_call" for item in items)
    index = summary_index(items, RESPONSES)
    # the same index but where the files are: one call per item in Responses, so other lines of the ref
    assert re.sub(r"@\d+", "@N", index) == re.sub(r"@\d+", "@N", EXPECTED)
    assert "src/app.py@15, tests/test_app.py@7," in index


def test_responses_native_calls_are_indexed():
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {
            "type": "local_shell_call",
            "id": "ls1",
            "call_id": "s1",
            "status": "completed",
            "action": {"type": "exec", "command": ["bash", "-lc", "sed -n '1,40p' proxy/core/view.py"], "env": {}},
        },
        {"type": "local_shell_call_output", "call_id": "s1", "output": "class ItemView(Protocol):"},
        {
            "type": "shell_call",
            "id": "sh1",
            "call_id": "s2",
            "status": "completed",
            "action": {"commands": ["make test", "cat build/log.txt"], "timeout_ms": 1000},
        },
        {"type": "shell_call_output", "call_id": "s2", "output": [{"stdout": "", "stderr": "", "outcome": {}}]},
        {
            "type": "apply_patch_call",
            "id": "ap1",
            "call_id": "p1",
            "status": "completed",
            "operation": {"type": "update_file", "path": "proxy/core/texts.py", "diff": "@@\n-a\n+b"},
        },
        {"type": "apply_patch_call_output", "call_id": "p1", "status": "completed", "output": "patched"},
        {
            "type": "custom_tool_call",
            "id": "ct1",
            "call_id": "p2",
            "name": "apply_patch",
            "input": "*** Begin Patch\n*** Delete File: old/thing.py\n*** End Patch",
        },
        {"type": "custom_tool_call_output", "call_id": "p2", "output": "Done"},
        {
            "type": "function_call",
            "id": "fc1",
            "call_id": "f1",
            "name": "exec_command",
            "arguments": json.dumps({"cmd": ["bash", "-lc", "cargo build"], "workdir": "/w"}),
        },
        {
            "type": "function_call_output",
            "call_id": "f1",
            "output": json.dumps(
                {
                    "output": "\n".join(
                        [f"   Compiling dep{i} v0.1.0" for i in range(80)]
                        + ["error[E0308]: mismatched types", " --> src/main.rs:4:5"]
                    ),
                    "metadata": {"exit_code": 101},
                }
            ),
        },
    ]
    assert summary_index(items, RESPONSES) == "\n".join(
        [
            "<index>",
            FILES + "proxy/core/view.py@2:1-40, build/log.txt@4, proxy/core/texts.py@6, old/thing.py@8",
            "commands run: sed -n '1,40p' proxy/core/view.py; make test; cat build/log.txt; cargo build",
            "errors seen: error[E0308]: mismatched types",
            "names in results: src/main.rs, v0.1.0",  # from the output the JSON wraps, not its keys
            "</index>",
        ]
    )


def test_names_only_the_results_showed_recurring_first_then_recent():
    """The agent read a module, grepped for a function and ran a test; the index names what the
    results showed and the agent has not written: seen in more results first, then the latest."""
    history = [
        {"role": "user", "content": "Fix parse_config in pkg/config.py."},
        {"role": "assistant", "content": None, "tool_calls": [call("c1", "bash", {"command": "cat pkg/config.py"})]},
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": "from pkg.loader import read_yaml_file\n"
            "def parse_config(path):\n    return read_yaml_file(path)",
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call("c2", "bash", {"command": "grep -rn read_yaml_file pkg"})],
        },
        {
            "role": "tool",
            "tool_call_id": "c2",
            "content": "pkg/loader.py:7:def read_yaml_file(path):\npkg/loader.py:9:    return yaml.safe_load(fh)",
        },
        {"role": "assistant", "content": None, "tool_calls": [call("c3", "bash", {"command": "pytest -q"})]},
        {
            "role": "tool",
            "tool_call_id": "c3",
            "content": "tests/test_config.py::test_defaults PASSED\npkg/loader.py:9: in read_yaml_file",
        },
    ]
    names = summary_index(history, CHAT).split("\n")[-2]
    # read_yaml_file and parse_config: the agent wrote them (its grep, the task); pkg/loader.py is
    # in two results; the last result's names next (in character order), then the earlier ones
    assert names == "names in results: pkg/loader.py, test_defaults, tests/test_config.py, yaml.safe_load, pkg.loader"
    assert summary_index(history, CHAT) == summary_index(history, CHAT)


def test_names_fill_what_the_other_lines_leave_and_no_more():
    history: list[dict] = []
    for i in range(200):
        history.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call(f"c{i}", "bash", {"command": f"python -m tool_{i} --verbose"})],
            }
        )
        history.append(
            {
                "role": "tool",
                "tool_call_id": f"c{i}",
                "content": f"loaded package_{i}.module_{i}.function_name_{i} from lib/path_{i}/file_{i}.py",
            }
        )
    index = summary_index(history, CHAT)
    lines = index.split("\n")
    assert len(index) <= INDEX_CHARS and len(index) > INDEX_CHARS - 40  # the names take the room left
    assert len("\n".join([*lines[:-2], lines[-1]])) <= LISTS_CHARS  # the other lines keep their own cap
    names = lines[-2].removeprefix("names in results: ").split(", ")
    assert names[0] == "lib/path_199/file_199.py"  # each in one result: the most recent first
    assert "tool_199" not in lines[-2]  # the agent wrote it


def test_nothing_to_index_is_an_empty_index():
    chat = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
    assert summary_index(chat, CHAT) == "" and summary_index([], CHAT) == ""


def test_long_lists_are_capped_with_a_count_of_the_rest():
    history: list[dict] = []
    for i in range(300):
        history.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call(f"c{i}", "bash", {"command": f"cat src/module_{i:03}/implementation_file_{i}.py"})],
            }
        )
        history.append(
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"ValueError: broken thing in module_{i:03}"}
        )
    index = summary_index(history, CHAT)
    assert len(index) <= INDEX_CHARS and index == summary_index(history, CHAT)
    files, commands, errors = index.split("\n")[1:4]
    assert files.startswith(FILES + "src/module_000/implementation_file_0.py@1, ")
    assert files.endswith(" more") and commands.endswith(" more") and errors.endswith(" more")
    shown = files.removeprefix(FILES).split(", ")
    assert int(shown[-1].split()[0].lstrip("+")) == 300 - (len(shown) - 1)  # "+N more" counts the rest


def test_a_short_list_leaves_its_room_to_the_others():
    history = [
        {"role": "assistant", "content": None, "tool_calls": [call("c0", "bash", {"command": "ls"})]},
        {
            "role": "tool",
            "tool_call_id": "c0",
            "content": "\n".join(f"error: problem_{i:02} " + "x" * 60 for i in range(40)),
        },
    ]
    errors = summary_index(history, CHAT).split("\n")[2]
    assert len(errors) > 900  # the errors take what the one command leaves


def test_the_summary_item_carries_the_index_and_is_recognised():
    ref = make_ref("a" * 32, "history", "h")
    index = summary_index(agent_history(), CHAT)
    for view in (CHAT, RESPONSES):
        item = cp.summary_item(view, "<state_snapshot>…</state_snapshot>", ref, count=12, tokens=3456, index=index)
        text = view.text(item)
        assert history_ref(text) == ref and not is_marker(text)
        marker, rest = text.split("\n", 1)
        assert rest == index + "\n<state_snapshot>…</state_snapshot>"
        plain = cp.summary_item(view, "<state_snapshot>…</state_snapshot>", ref, count=12, tokens=3456)
        assert view.text(plain) == marker + "\n<state_snapshot>…</state_snapshot>"  # no index: as before


arguments = st.one_of(
    st.text(max_size=300),
    st.dictionaries(
        st.sampled_from(["command", "cmd", "path", "file", "commands", "input", "paths", "x"]),
        st.one_of(st.text(max_size=200), st.lists(st.text(max_size=40), max_size=5), st.integers()),
        max_size=4,
    ).map(json.dumps),
)


@hsettings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["bash", "str_replace_editor", "apply_patch", "x"]), arguments, st.text(max_size=300)
        ),
        max_size=30,
    )
)
def test_any_history_gives_a_bounded_stable_index(calls):
    history: list[dict] = []
    for n, (name, args, result) in enumerate(calls):
        history.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": args}}],
            }
        )
        history.append({"role": "tool", "tool_call_id": f"c{n}", "content": result})
    index = summary_index(history, CHAT)
    assert index == summary_index(history, CHAT) and len(index) <= INDEX_CHARS
    assert index == "" or (index.startswith("<index>\n") and index.endswith("\n</index>"))


TRACEBACK = "\n".join(
    [
        "Traceback (most recent call last):",
        '  File "/opt/miniconda3/lib/python3.11/importlib/__init__.py", line 126, in import_module',
        "    return _bootstrap._gcd_import(name[level:], package, level)",
        '  File "<frozen importlib._bootstrap>", line 1204, in _gcd_import',
        '  File "/usr/lib/python3/dist-packages/pluggy/_hooks.py", line 493, in __call__',
        "    return self._hookexec(self.name, self._hookimpls.copy(), kwargs, firstresult)",
        '  File "/repo/astropy/modeling/separable.py", line 101, in separability_matrix',
        "    separable_matrix = _separable(transform)",
        "NotImplementedError: compound_model._cstack is missing",
    ]
)


def test_the_machinery_of_the_interpreter_and_test_runners_is_never_named():
    history = [
        {"role": "assistant", "content": None, "tool_calls": [call("c1", "bash", {"command": "python repro.py"})]},
        {"role": "tool", "tool_call_id": "c1", "content": TRACEBACK},
    ]
    names = summary_index(history, CHAT).split("\n")[-2]
    assert names.startswith("names in results: ")
    for noise in (
        "_bootstrap",
        "_gcd_import",
        "importlib",
        "miniconda3",
        "pluggy",
        "_hookexec",
        "self._hookimpls.copy",
        "site-packages",
        "dist-packages",
    ):
        assert noise not in names, noise
    for work in ("/repo/astropy/modeling/separable.py", "separable_matrix", "compound_model._cstack"):
        assert work in names, work


def test_names_of_files_edited_first_then_recurring_never_the_tasks_own():
    task = "separability_matrix of nested CompoundModels is wrong (astropy/modeling/separable.py)"
    history = [
        {"role": "assistant", "content": None, "tool_calls": [call("c1", "bash", {"command": "cat util.py"})]},
        {"role": "tool", "tool_call_id": "c1", "content": "helper_once defined\nrecurring_name used"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call("c2", "str_replace_editor", {"command": "view", "path": "/repo/core.py"})],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "def core_function(): pass"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call("c3", "bash", {"command": "grep -rn matrix astropy"})],
        },
        {
            "role": "tool",
            "tool_call_id": "c3",
            "content": "separable._separable_matrix_of is here; astropy/modeling/separable.py;\nrecurring_name",
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                call(
                    "c4",
                    "str_replace_editor",
                    {"command": "str_replace", "path": "/repo/core.py", "old_str": "a", "new_str": "b"},
                )
            ],
        },
        {"role": "tool", "tool_call_id": "c4", "content": "edited"},
    ]
    names = summary_index(history, CHAT, task=task).split("\n")[-2].removeprefix("names in results: ").split(", ")
    # what the view of the file later edited showed; then a name in two results; then the rest; the
    # task's own names are not repeated (it stays verbatim before the summary)
    assert names == ["core_function", "recurring_name", "separable._separable_matrix_of", "helper_once"]
    assert "astropy/modeling/separable.py" not in summary_index(history, CHAT, task=task)
    assert summary_index(history, CHAT, task=task) == summary_index(history, CHAT, task=task)


def test_files_say_which_lines_were_shown():
    numbered = "\n".join(f"{n:6}\tline {n}" for n in range(600, 651))
    history = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                call("c1", "bash", {"command": "sed -n '120,180p' src/a.py"}),
                call("c2", "str_replace_editor", {"command": "view", "path": "/repo/b.py", "view_range": [30, 90]}),
                call("c3", "bash", {"command": "cat -n src/c.py | head -700 | tail -51"}),
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "x = 1"},
        {"role": "tool", "tool_call_id": "c2", "content": "y = 2"},
        {"role": "tool", "tool_call_id": "c3", "content": numbered},
    ]
    files = summary_index(history, CHAT).split("\n")[1]
    assert files == FILES + "src/a.py@1:120-180, /repo/b.py@2:30-90, src/c.py@3:600-650"


# ==================== index names
# What the summary index leaves out (proxy.core.summary_index): diff prefixes, framework tags,
# temporary names, other spellings of a file, near-duplicate errors; in the shapes of the agent
# frameworks' results (mini-swe-agent, OpenHands, SWE-agent, aider, Claude Code, Codex).


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
