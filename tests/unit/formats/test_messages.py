"""proxy.formats.messages: the Anthropic Messages view, history round trips, the core's planners
over it, injected tools and body checks.

The fixture is shaped like a Claude Code session (system blocks with a cache breakpoint, thinking
with signatures, parallel tool calls answered in one user message with a system reminder after
the results, a server-side web search, redacted thinking, a plain string turn).
"""

from __future__ import annotations

import copy
import json

import pytest

from proxy.core import compression as cp
from proxy.core import jsonio
from proxy.core.compaction import plan_compaction
from proxy.core.settings import OffloadSettings
from proxy.core.texts import INJECTED_TOOLS, RELOAD_TOOL_SCHEMAS, history_ref, is_marker, refs_in
from proxy.core.tokens import counter_for_model
from proxy.core.view import ItemView
from proxy.errors import ProxyError
from proxy.formats.messages import MESSAGES
from proxy.formats.messages._items import PART, SUMMARY, MessagesView
from proxy.formats.messages._request import (
    anthropic_tool,
    colliding_tool_names,
    history,
    inject_tools,
    messages_of,
    with_history,
)
from proxy.http.error_map import status_of

VIEW = MESSAGES.view
COUNTER = counter_for_model("claude-sonnet-4-5")
NS = "m" * 32
BIG = "\n".join(f"{i:05d} collected test_module_{i}.py::test_case PASSED" for i in range(400))
SIG = "EqQBCkgIBhABGAIiQJ7l0uJ4PbQ1Fh8ziYs0dCqEbuq8pnHrC8Yr6hS0Q6wz4N1dfake=="

SYSTEM = [
    {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
    {"type": "text", "text": "Use the tools to help the user.", "cache_control": {"type": "ephemeral"}},
]
TOOLS = [
    {
        "name": "Bash",
        "description": "Run a shell command.",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
    {
        "name": "Read",
        "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]},
        "cache_control": {"type": "ephemeral"},
    },
    {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
]
REMINDER = {"type": "text", "text": "<system-reminder>Keep going.</system-reminder>"}

U0 = {"role": "user", "content": [REMINDER, {"type": "text", "text": "The tests fail. Fix them."}]}
A1 = {
    "role": "assistant",
    "content": [
        {"type": "thinking", "thinking": "I should run the tests first.", "signature": SIG},
        {"type": "text", "text": "I'll run the tests."},
        {"type": "tool_use", "id": "toolu_01A", "name": "Bash", "input": {"command": "pytest -q"}},
    ],
}
U2 = {
    "role": "user",
    "content": [{"tool_use_id": "toolu_01A", "type": "tool_result", "content": BIG, "is_error": False}],
}
A3 = {
    "role": "assistant",
    "content": [
        {"type": "text", "text": "Let me read both files."},
        {"type": "tool_use", "id": "toolu_01B", "name": "Read", "input": {"file_path": "/repo/a.py"}},
        {"type": "tool_use", "id": "toolu_01C", "name": "Read", "input": {"file_path": "/repo/b.py"}},
    ],
}
U4 = {
    "role": "user",
    "content": [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_01B",
            "content": [{"type": "text", "text": BIG}, {"type": "text", "text": "EOF"}],
        },
        {"type": "tool_result", "tool_use_id": "toolu_01C", "content": BIG, "cache_control": {"type": "ephemeral"}},
        REMINDER,
    ],
}
A5 = {
    "role": "assistant",
    "content": [
        {
            "type": "server_tool_use",
            "id": "srvtoolu_01",
            "name": "web_search",
            "input": {"query": "pytest fixture scope"},
        },
        {
            "type": "web_search_tool_result",
            "tool_use_id": "srvtoolu_01",
            "content": [
                {
                    "type": "web_search_result",
                    "url": "https://docs.pytest.org/en/stable/how-to/fixtures.html",
                    "title": "How to use fixtures",
                    "encrypted_content": "EqgfCioIARgBIiQ3fake",
                    "page_age": None,
                }
            ],
        },
        {"type": "text", "text": "Found it."},
        {"type": "tool_use", "id": "toolu_01D", "name": "Bash", "input": {"command": "sed -i s/x/y/ b.py"}},
    ],
}
U6 = {
    "role": "user",
    "content": [{"type": "tool_result", "tool_use_id": "toolu_01D", "content": "", "is_error": False}],
}
A7 = {
    "role": "assistant",
    "content": [
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/fake"},
        {"type": "text", "text": "Fixed: the fixture scope was wrong."},
    ],
}
U8 = {"role": "user", "content": "Thanks. Now run the linter."}
MESSAGES_ = [U0, A1, U2, A3, U4, A5, U6, A7, U8]
BODY = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 32000,
    "system": SYSTEM,
    "tools": TOOLS,
    "thinking": {"type": "enabled", "budget_tokens": 10000},
    "stream": True,
    "metadata": {"user_id": "user_abc"},
    "messages": MESSAGES_,
}


def dumps(value) -> bytes:
    return jsonio.dumps(value)


def settings(**overrides) -> OffloadSettings:
    return OffloadSettings(**{"max_total_tokens": 1000, "max_tool_message_tokens": 200, **overrides})


# ---- the view ---------------------------------------------------------------------------------


def test_the_view_is_an_item_view_and_the_format_is_stateless():
    checked: ItemView = VIEW
    assert isinstance(checked, MessagesView) and MESSAGES.endpoint == "messages" and MESSAGES.stored is False


def test_one_item_per_message_and_a_part_per_tool_result():
    items = history(BODY)
    assert len(items) == len(MESSAGES_) + 1  # U4's two results are two items, the reminder with the last
    assert items[4] == {"role": "user", "content": [U4["content"][0]]}  # the first part: the message itself
    assert items[5] == {"role": "user", "content": [U4["content"][1], REMINDER], PART: 1}
    assert [VIEW.role(i) for i in items] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert items[0] is U0 and items[1] is A1  # unsplit messages are shared, not copied
    json.dumps(items)  # plain JSON values


def test_calls_answers_and_details():
    items = history(BODY)
    assert [c for i in items for c in VIEW.calls(i)] == ["toolu_01A", "toolu_01B", "toolu_01C", "toolu_01D"]
    assert [VIEW.answers(i) for i in items if VIEW.role(i) == "tool"] == [
        "toolu_01A",
        "toolu_01B",
        "toolu_01C",
        "toolu_01D",
    ]
    assert VIEW.call_details(A3) == (("Read", '{"file_path": "/repo/a.py"}'), ("Read", '{"file_path": "/repo/b.py"}'))
    assert VIEW.call_details(A5) == (("Bash", '{"command": "sed -i s/x/y/ b.py"}'),)  # not the server tool
    assert VIEW.calls(U2) == () and VIEW.answers(A1) is None and VIEW.answers(U8) is None


def test_tool_text_of_strings_and_text_blocks_only():
    items = history(BODY)
    assert VIEW.tool_text(items[2]) == BIG
    assert VIEW.tool_text(items[4]) == BIG + "\nEOF"
    assert VIEW.tool_text(items[5]) == BIG and VIEW.text(items[5]) == BIG  # not the reminder after it
    assert VIEW.tool_text(items[7]) == ""
    image = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "t",
                "content": [
                    {"type": "text", "text": "a screenshot"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                ],
            }
        ],
    }
    assert VIEW.tool_text(image) is None and VIEW.role(image) == "tool"
    assert VIEW.tool_text({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}) is None
    assert VIEW.tool_text(U0) is None and VIEW.tool_text(A1) is None
    with pytest.raises(ValueError):
        VIEW.with_tool_text(image, "x")


def test_with_tool_text_keeps_every_key_and_the_cache_breakpoint():
    items = history(BODY)
    replaced = VIEW.with_tool_text(items[5], "marker")
    assert replaced == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01C",
                "content": "marker",
                "cache_control": {"type": "ephemeral"},
            },
            REMINDER,
        ],
        PART: 1,
    }
    replaced = VIEW.with_tool_text(items[2], "marker")
    assert list(replaced["content"][0]) == ["tool_use_id", "type", "content", "is_error"]  # order kept
    inner = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "t",
                "content": [
                    {"type": "text", "text": "a"},
                    {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}},
                ],
            }
        ],
    }
    assert VIEW.with_tool_text(inner, "m")["content"][0]["content"] == [
        {"type": "text", "text": "m", "cache_control": {"type": "ephemeral"}}
    ]
    assert items[5]["content"][0]["content"] == BIG  # the original is not changed


def test_text_attached_injected_and_transcript():
    items = history(BODY)
    assert VIEW.text(U0) == "<system-reminder>Keep going.</system-reminder>\nThe tests fail. Fix them."
    assert VIEW.text(U8) == "Thanks. Now run the linter." and VIEW.text(items[2]) == BIG
    assert VIEW.text(A1) == "I'll run the tests."  # not the thinking
    assert [VIEW.attached(a, b) for a, b in zip(items, items[1:])] == [
        False,
        True,
        False,
        True,
        True,
        False,
        True,
        False,
        False,
    ]
    reload = {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "toolu_r", "name": "context_reload", "input": {"ref": "abc123"}},
            {"type": "tool_use", "id": "toolu_x", "name": "Bash", "input": {}},
        ],
    }
    assert VIEW.injected_calls(reload) == ("toolu_r",) and VIEW.injected_calls(A1) == ()
    assert VIEW.transcript(A1) == (
        '[assistant] calls Bash({"command": "pytest -q"})',
        "[thinking] I should run the tests first.\nI'll run the tests.",
    )
    assert VIEW.transcript(items[2]) == ("[tool result (toolu_01A)]", BIG)
    assert VIEW.transcript(items[5]) == ("[tool result (toolu_01C)]", BIG + "\n" + REMINDER["text"])
    assert VIEW.transcript(U8) == ("[user]", "Thanks. Now run the linter.")
    header, text = VIEW.transcript(A5)
    assert header.startswith("[assistant] calls Bash(") and "[server tool use] web_search(" in text
    assert "[web_search_tool_result]" in text and "Found it." in text


def test_transcript_of_a_tool_result_with_an_image_names_it_without_its_base64():
    data = "iVBORw0KGgo" * 1000
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    result = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "t1",
                "content": [
                    {"type": "text", "text": "clicked"},
                    image,
                    {"type": "tool_result", "tool_use_id": "t0", "content": [image]},
                ],
            }
        ],
    }
    assert VIEW.transcript(result) == ("[tool result (t1)]", "clicked\n[image]")
    only = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t2", "content": [image]}]}
    assert VIEW.transcript(only) == ("[tool result (t2)]", "[image]")


def test_the_top_level_system_is_outside_the_history():
    assert all(VIEW.role(i) != "system" for i in history(BODY))
    assert with_history(BODY, history(BODY))["system"] is SYSTEM


def test_a_system_message_in_the_history_is_never_summarised():
    env = {
        "role": "system",
        "content": "# Environment\nWorking directory: /repo",
        "output_config": {"effort": "medium"},
    }  # Claude Code's per-turn environment message
    body = {**BODY, "messages": [U0, env, *MESSAGES_[1:]]}
    items = history(body)
    assert VIEW.role(items[1]) == "system" and dumps(with_history(body, items)) == dumps(body)
    head, tail = cp.split(items, VIEW, 2)
    summary = VIEW.summary_item("snapshot")
    out = with_history(body, cp.assemble(items, VIEW, head, cut=tail, summary=summary))["messages"]
    # the task stays, the summary joins its message; the system message right after, verbatim
    assert head == 1 and out[:2] == [
        {"role": "user", "content": [*U0["content"], {"type": "text", "text": "snapshot"}]},
        env,
    ]
    assert "Environment" not in cp.history_lines(items[head:tail], VIEW)


# ---- round trips ------------------------------------------------------------------------------


def test_with_history_of_history_is_the_body_byte_for_byte():
    assert dumps(with_history(BODY, history(BODY))) == dumps(BODY)
    assert list(with_history(BODY, history(BODY))) == list(BODY)  # key order


def test_odd_messages_survive_unchanged():
    odd = [
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "x"},
                {"type": "future_block", "payload": {"k": [1, 2]}},
                {"type": "tool_result", "tool_use_id": "b", "content": None},
            ],
            "x-extra": 1,
        },
        "not a message",
        {"role": "user"},
        {"role": "assistant", "content": None},
        {"role": "tool", "content": "misplaced"},
        {
            "role": "user",
            "content": [
                {"type": "document", "source": {"type": "text", "data": "d", "media_type": "text/plain"}},
                {"type": "search_result", "source": "s", "title": "t", "content": [{"type": "text", "text": "r"}]},
            ],
        },
    ]
    body = {"messages": odd}
    items = history(body)
    assert len(items) == len(odd) + 1
    assert items[0] == {"role": "user", "content": odd[0]["content"][:2], "x-extra": 1}
    assert VIEW.role(items[0]) == "tool" and VIEW.tool_text(items[0]) == "x"
    assert dumps(with_history(body, items)) == dumps(body)
    assert VIEW.role("not a message") == "other" and VIEW.role(odd[4]) == "other"


@pytest.mark.parametrize("value", [None, "text", {"a": 1}, 3])
def test_no_messages_list_no_history(value):
    assert history({"messages": value}) == [] and history({}) == []


def test_items_of_a_prefix_are_a_prefix_of_the_items():
    items = history(BODY)
    for k in range(len(MESSAGES_) + 1):
        prefix = history({"messages": MESSAGES_[:k]})
        assert items[: len(prefix)] == prefix


def test_a_part_without_its_message_becomes_a_message_of_its_own():
    items = history(BODY)
    assert messages_of(items[5:6]) == [{"role": "user", "content": [U4["content"][1], REMINDER]}]


def test_blocks_before_the_first_result_are_a_part_of_their_own():
    late = {
        "role": "user",
        "content": [
            REMINDER,
            {"type": "tool_result", "tool_use_id": "a", "content": "x"},
            {"type": "tool_result", "tool_use_id": "b", "content": "y"},
        ],
    }
    items = history({"messages": [late]})
    assert [VIEW.role(i) for i in items] == ["user", "tool", "tool"] and items[0] == {**late, "content": [REMINDER]}
    assert messages_of(items) == [late]


def test_the_newest_result_is_the_last_item_and_stays():
    calls = {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}},
            {"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {}},
        ],
    }
    results = {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": BIG},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": BIG + "!"},
            REMINDER,
        ],
    }
    plan = plan_compaction(history({"messages": [U0, calls, results]}), VIEW, settings(), counter=COUNTER, namespace=NS)
    assert [o.text for o in plan.offloads] == [BIG]  # like chat: the last tool result is the kept tail


# ---- the summary item --------------------------------------------------------------------------


def test_summary_merges_into_the_next_user_message():
    summary = VIEW.summary_item("[offloaded history: …]\n<state_snapshot>…</state_snapshot>")
    assert summary[SUMMARY] is True and VIEW.role(summary) == "user" and VIEW.text(summary).startswith("[off")
    out = with_history(BODY, [summary, U8])["messages"]
    assert out == [{"role": "user", "content": [summary["content"][0], {"type": "text", "text": U8["content"]}]}]
    out = with_history(BODY, [summary, U0, A1])["messages"]
    assert out[0] == {"role": "user", "content": [summary["content"][0], *U0["content"]]} and out[1] is A1
    assert SUMMARY not in json.dumps(out)


def test_summary_stays_a_message_before_an_assistant_message_and_at_the_end():
    summary = VIEW.summary_item("snapshot")
    clean = {"role": "user", "content": [{"type": "text", "text": "snapshot"}]}
    assert with_history(BODY, [summary, A7, U8])["messages"] == [clean, A7, U8]
    assert with_history(BODY, [summary])["messages"] == [clean]


def test_summary_never_opens_a_message_of_tool_results():
    summary = VIEW.summary_item("snapshot")
    clean = {"role": "user", "content": [{"type": "text", "text": "snapshot"}]}
    items = history(BODY)
    assert with_history(BODY, [summary, items[2], *items[3:]])["messages"][:2] == [clean, U2]
    # a message whose tool result comes after a text block: still not merged
    late = {"role": "user", "content": [REMINDER, {"type": "tool_result", "tool_use_id": "t", "content": "x"}]}
    assert with_history(BODY, [summary, *history({"messages": [late]})])["messages"] == [clean, late]


# ---- the core's planners over the view -----------------------------------------------------------


def test_compaction_keeps_messages_ids_order_and_the_breakpoint():
    items = history(BODY)
    plan = plan_compaction(items, VIEW, settings(), counter=COUNTER, namespace=NS)
    assert len(plan.offloads) == 3 and {o.text for o in plan.offloads} == {BIG, BIG + "\nEOF"}
    out = with_history(BODY, plan.items)["messages"]
    assert len(out) == len(MESSAGES_)
    assert [m["role"] for m in out] == [m["role"] for m in MESSAGES_]
    for before, after in zip(MESSAGES_, out):
        if isinstance(before["content"], list):
            assert [(b.get("type"), b.get("tool_use_id"), b.get("id")) for b in before["content"]] == [
                (b.get("type"), b.get("tool_use_id"), b.get("id")) for b in after["content"]
            ]
    result_c = out[4]["content"][1]
    assert result_c["cache_control"] == {"type": "ephemeral"} and is_marker(result_c["content"])
    assert is_marker(out[2]["content"][0]["content"]) and out[2]["content"][0]["is_error"] is False
    assert out[4]["content"][0]["content"][0]["type"] == "text" and is_marker(
        out[4]["content"][0]["content"][0]["text"]
    )
    assert out[1] is A1 and out[5] is A5 and out[8] is U8  # untouched messages are the client's own
    found = [refs_in(VIEW.text(i))[0] for i in plan.items if VIEW.text(i) and refs_in(VIEW.text(i))]
    assert len(found) == 3 and plan.refs == list(dict.fromkeys(found))  # equal texts, one ref
    assert PART not in json.dumps(out)
    again = plan_compaction(plan.items, VIEW, settings(), counter=COUNTER, namespace=NS)
    assert again.items == plan.items and not again.offloads  # idempotent


def test_compaction_never_offloads_results_of_injected_calls():
    reload = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_r", "name": "context_reload", "input": {"ref": "abc123"}}],
    }
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_r", "content": BIG}]}
    items = history({"messages": [U0, reload, result, A7, U8]})
    assert plan_compaction(items, VIEW, settings(), counter=COUNTER, namespace=NS).offloads == []


def test_cuts_never_fall_inside_a_message_nor_between_a_call_and_its_result():
    items = history(BODY)
    allowed = [i for i in range(1, len(items)) if cp.can_cut(items, VIEW, i)]
    assert allowed == [1, 3, 6, 8, 9]  # before A1, A3, A5, A7, U8
    for keep in range(len(items)):
        head, tail = cp.split(items, VIEW, keep)
        assert head == 1 and (tail in allowed or tail in (1, len(items)))  # the task (U0) is the head
    assert cp.units(items, VIEW, 0, end=len(items), counter=COUNTER)[1][0] == 1
    assert [first for first, _ in cp.units(items, VIEW, 0, end=len(items), counter=COUNTER)] == [0, 1, 3, 6, 8, 9]


@pytest.mark.parametrize("keep", [1, 2, 3, 5])
def test_compression_assembles_valid_alternating_messages(keep):
    items = history(BODY)
    head, tail = cp.split(items, VIEW, keep)
    summary = cp.summary_item(VIEW, "<state_snapshot>x</state_snapshot>", "REFabc123", count=tail - head, tokens=999)
    out = with_history(BODY, cp.assemble(items, VIEW, head, cut=tail, summary=summary))["messages"]
    roles = [m["role"] for m in out]
    assert all(a != b for a, b in zip(roles, roles[1:])) and roles[0] == "user"
    assert out[0]["content"][:2] == U0["content"]  # the task, then the summary in the same message
    assert history_ref(out[0]["content"][2]["text"]) == "REFabc123"
    kept_ids = [
        b.get("id") or b.get("tool_use_id")
        for m in out[1:]
        for b in (m["content"] if isinstance(m["content"], list) else [])
        if b.get("type") in ("tool_use", "tool_result")
    ]
    uses = [i for i in kept_ids if i in {"toolu_01A", "toolu_01B", "toolu_01C", "toolu_01D"}]
    assert sorted(set(uses)) == sorted(set(kept_ids)) and all(uses.count(i) == 2 for i in set(uses))  # paired
    assert SUMMARY not in json.dumps(out) and PART not in json.dumps(out)
    lines = cp.history_lines(items[head:tail], VIEW).splitlines()
    assert len(lines) == tail - head


def test_a_summary_cut_before_a_user_turn_merges_into_it():
    final = {"role": "assistant", "content": [{"type": "text", "text": "Linted."}]}
    later = {"role": "user", "content": "And the docs?"}
    messages = [*MESSAGES_, final, later, {"role": "assistant", "content": "Sure."}, {"role": "user", "content": "Go"}]
    items = history({"messages": messages})
    cut = items.index(later)
    assert cp.can_cut(items, VIEW, cut)
    summary = VIEW.summary_item("snapshot")
    out = with_history(BODY, cp.assemble(items, VIEW, 0, cut=cut, summary=summary))["messages"]  # no task kept (head 0)
    # U0 and U8, plain user messages of the summarised part, stay after the summary, then `later`:
    # all in the one user message the summary opens, so roles still alternate
    assert out[0] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "snapshot"},
            *U0["content"],
            {"type": "text", "text": U8["content"]},
            {"type": "text", "text": "And the docs?"},
        ],
    }
    assert out[1:] == [{"role": "assistant", "content": "Sure."}, {"role": "user", "content": "Go"}]
    # with the task kept (the head the split makes), the summary and the kept user messages join it
    head, _ = cp.split(items, VIEW, 2)
    out = with_history(BODY, cp.assemble(items, VIEW, head, cut=cut, summary=summary))["messages"]
    assert out[0] == {
        "role": "user",
        "content": [
            *U0["content"],
            {"type": "text", "text": "snapshot"},
            {"type": "text", "text": U8["content"]},
            {"type": "text", "text": "And the docs?"},
        ],
    }
    assert len(out) == 3


# ---- tools -----------------------------------------------------------------------------------


def test_injected_tools_follow_the_clients_and_are_byte_stable():
    out = inject_tools(BODY, RELOAD_TOOL_SCHEMAS)
    assert out["tools"][:3] == TOOLS and [t["name"] for t in out["tools"][3:]] == ["context_reload", "context_search"]
    reload = out["tools"][3]
    assert list(reload) == ["name", "description", "input_schema"]
    assert reload["input_schema"] == RELOAD_TOOL_SCHEMAS[0]["function"]["parameters"]
    assert dumps(inject_tools(BODY, RELOAD_TOOL_SCHEMAS)) == dumps(out)
    assert list(out) == list(BODY) and BODY["tools"] == TOOLS  # nothing changed in place
    assert inject_tools({"messages": []}, RELOAD_TOOL_SCHEMAS)["tools"][0]["name"] == "context_reload"
    assert inject_tools(BODY, []) == BODY and inject_tools({"tools": "bad"}, RELOAD_TOOL_SCHEMAS) == {"tools": "bad"}
    assert anthropic_tool({"name": "f"}) == {"name": "f", "input_schema": {"type": "object", "properties": {}}}


@pytest.mark.parametrize("choice", [{"type": "none"}, {"type": "tool", "name": "Bash"}, {"type": "auto"}])
def test_tool_choice_is_left_as_sent(choice):
    assert inject_tools({**BODY, "tool_choice": choice}, RELOAD_TOOL_SCHEMAS)["tool_choice"] == choice


def test_colliding_tool_names():
    assert colliding_tool_names(BODY, INJECTED_TOOLS) == set()
    mine = {**BODY, "tools": [*TOOLS, {"name": "context_search", "input_schema": {"type": "object"}}]}
    assert colliding_tool_names(mine, INJECTED_TOOLS) == {"context_search"}
    assert MESSAGES.colliding_tool_names(mine) == {"context_search"}
    chat_style = {"tools": [{"type": "function", "function": {"name": "context_reload"}}]}
    assert colliding_tool_names(chat_style, INJECTED_TOOLS) == {"context_reload"}
    assert colliding_tool_names("x", INJECTED_TOOLS) == set()
    assert inject_tools(mine, RELOAD_TOOL_SCHEMAS)["tools"][-1]["name"] == "context_reload"  # not added twice


# ---- bodies ------------------------------------------------------------------------------------


def test_parse_accepts_real_bodies():
    raw = json.dumps(BODY).encode()
    assert MESSAGES.parse(raw, max_items=None) == BODY
    assert MESSAGES.parse(json.dumps({"model": "m", "messages": [], "system": "s"}).encode(), max_items=0)


@pytest.mark.parametrize(
    "body, param",
    [
        ({"messages": {"role": "user"}}, "messages"),
        ({"messages": ["hi"]}, "messages[0]"),
        ({"messages": [{"role": 1, "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": ["x"]}]}, "messages[0].content[0]"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, "messages[0].content[0].text"),
        (
            {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": 7}]}]},
            "messages[0].content[0].tool_use_id",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": 1}]}]},
            "messages[0].content[0].content",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "tool_result", "content": [{"text": 1}]}]}]},
            "messages[0].content[0].content[0].text",
        ),
        ({"messages": [{"role": "user", "content": "x", PART: 1}]}, f"messages[0].{PART}"),
        ({"messages": [{"role": "user", "content": "x", SUMMARY: True}]}, f"messages[0].{SUMMARY}"),
        ({"system": 3}, "system"),
        ({"system": [{"type": "text", "text": None}, {"text": 2}]}, "system[1].text"),
        ({"tools": {}}, "tools"),
        ({"stream": "yes"}, "stream"),
        ({"model": 4}, "model"),
    ],
)
def test_parse_refuses_what_the_proxy_cannot_read(body, param):
    with pytest.raises(ProxyError) as caught:
        MESSAGES.parse(json.dumps(body).encode(), max_items=None)
    assert status_of(caught.value) == 400 and caught.value.param == param


def test_parse_bounds_and_malformed_json():
    raw = json.dumps({"messages": [{"role": "user", "content": "x"}] * 3}).encode()
    with pytest.raises(ProxyError) as caught:
        MESSAGES.parse(raw, max_items=2)
    assert caught.value.code == "too_many_messages" and caught.value.param == "messages"
    for bad in (b"{", b"[]", b'"x"'):
        with pytest.raises(ProxyError) as caught:
            MESSAGES.parse(bad, max_items=None)
        assert caught.value.code == "invalid_json"
    deep = {"messages": [{"role": "user", "content": [{"type": "tool_use", "input": {}}]}]}
    node = deep["messages"][0]["content"][0]["input"]
    for _ in range(130):
        node["a"] = {}
        node = node["a"]
    with pytest.raises(ProxyError) as caught:
        MESSAGES.parse(json.dumps(deep).encode(), max_items=None)
    assert caught.value.code == "invalid_json"


def test_parse_leaves_copies_alone():
    body = copy.deepcopy(BODY)
    MESSAGES.parse(json.dumps(body).encode(), max_items=None)
    assert body == BODY
