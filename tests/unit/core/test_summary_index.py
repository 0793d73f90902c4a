"""The index of a summarised part: files, commands, errors and the names only the results showed,
read straight from the items, in chat and in Responses format alike, bounded and byte-stable."""

from __future__ import annotations

import json
import re

from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from proxy.core import compression as cp
from proxy.core.markers import history_ref, is_marker, make_ref
from proxy.core.summary_index import INDEX_CHARS, LISTS_CHARS, summary_index
from proxy.formats.chat import VIEW as CHAT
from proxy.formats.responses import ResponsesView, items_from_chat

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
