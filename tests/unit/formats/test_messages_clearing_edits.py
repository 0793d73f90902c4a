"""Anthropic's clearing edits as the proxy applies them (`proxy.formats.messages._clearing_edits`) and their
config (`edits_config`): table-driven over trigger kinds, keep, exclude_tools, clear_tool_inputs,
clear_at_least and thinking keep; byte-stable; a bad config is a 400 naming the field."""

from __future__ import annotations

import copy
import json

import pytest

from proxy.core import texts
from proxy.core.texts import is_marker, tool_result_ref
from proxy.core.tokens import counter_for_model
from proxy.errors import ProxyError
from proxy.formats.messages import MESSAGES
from proxy.formats.messages._clearing_edits import (
    MAX_EDITS,
    ClearThinking,
    ClearToolUses,
    Other,
    apply_edits,
    clear_thinking,
    clear_tool_uses,
    parse_context_management,
)
from proxy.formats.messages._request import history, with_history
from proxy.http.error_map import status_of

COUNTER = counter_for_model("claude-sonnet-4-5")
VIEW = MESSAGES.view
NS = "tenant-a"


def output(i: int) -> str:
    return "\n".join(f"run{i} line {k}: value={k * 7} path=/src/mod{i}/file{k}.py status=ok" for k in range(80))


def big_input(i: int) -> dict:
    return {"path": f"/src/file{i}.py", "content": " ".join(f"word{i}_{k}" for k in range(400))}


def tool_history(names: list[str], *, inputs: bool = False, think: bool = False) -> list[dict]:
    messages: list[dict] = [{"role": "user", "content": "Fix the build."}]
    for i, name in enumerate(names):
        blocks = [{"type": "thinking", "thinking": f"thought {i} " * 30, "signature": "sig"}] if think else []
        blocks += [
            {"type": "text", "text": f"Step {i}."},
            {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": big_input(i) if inputs else {}},
        ]
        messages.append({"role": "assistant", "content": blocks})
        messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": output(i)}]}
        )
    return messages


def results(items: list) -> dict[str, str]:
    return {VIEW.answers(i): VIEW.tool_text(i) for i in items if VIEW.answers(i)}


def inputs(items: list) -> dict[str, object]:
    return {
        b["id"]: b["input"]
        for i in items
        if i.get("role") == "assistant" and isinstance(i["content"], list)
        for b in i["content"]
        if b.get("type") == "tool_use"
    }


def run(messages: list[dict], edit: ClearToolUses, *, input_tokens: int = 10**9):
    return clear_tool_uses(
        history({"messages": messages}), edit, VIEW, counter=COUNTER, namespace=NS, input_tokens=input_tokens
    )


FIVE = ["bash", "read_spec", "bash", "bash", "bash"]


@pytest.mark.parametrize(
    "edit, cleared",
    [
        (ClearToolUses(), {0, 1}),  # keep 3 by default
        (ClearToolUses(keep=2), {0, 1, 2}),
        (ClearToolUses(keep=0), {0, 1, 2, 3, 4}),
        (ClearToolUses(keep=5), set()),
        (ClearToolUses(keep=9), set()),
        (ClearToolUses(keep=2, exclude_tools=frozenset({"read_spec"})), {0, 2}),  # keep counts every tool use
        (ClearToolUses(keep=0, exclude_tools=frozenset({"bash"})), {1}),
        (ClearToolUses(keep=0, exclude_tools=frozenset({"bash", "read_spec"})), set()),
    ],
)
def test_which_results_are_cleared(edit, cleared):
    items, applied, offloads = run(tool_history(FIVE), edit)
    got = {int(call[-1]) for call, text in results(items).items() if is_marker(text)}
    assert got == cleared
    if not cleared:
        assert applied is None and offloads == []
        return
    assert applied["type"] == "clear_tool_uses_20250919" and applied["cleared_tool_uses"] == len(cleared)
    before = history({"messages": tool_history(FIVE)})
    assert applied["cleared_input_tokens"] == COUNTER.messages(before) - COUNTER.messages(items) > 0
    assert {o.text for o in offloads} == {output(i) for i in cleared}
    for call, text in results(items).items():  # each marker's ref is its stored original's
        if is_marker(text):
            assert next(o for o in offloads if o.ref == tool_result_ref(text)).text == output(int(call[-1]))
        else:
            assert text == output(int(call[-1]))


@pytest.mark.parametrize(
    "kind, value, triggered",
    [
        ("input_tokens", 5000, True),
        ("input_tokens", 10**6, False),
        ("tool_uses", 4, True),
        ("tool_uses", 5, False),  # 5 tool uses: over 4, not over 5
    ],
)
def test_the_trigger(kind, value, triggered):
    messages = tool_history(FIVE)
    tokens = COUNTER.messages(history({"messages": messages}))
    assert 5000 < tokens < 10**6
    _, applied, _ = run(messages, ClearToolUses(trigger_kind=kind, trigger_value=value, keep=1), input_tokens=tokens)
    assert (applied is not None) is triggered


@pytest.mark.parametrize(
    "clear_inputs, cleared_inputs",
    [(False, set()), (True, {0, 1, 2, 3}), (frozenset({"read_spec"}), {1}), (frozenset({"nope"}), set())],
)
def test_clear_tool_inputs(clear_inputs, cleared_inputs):
    items, applied, offloads = run(tool_history(FIVE, inputs=True), ClearToolUses(keep=1, clear_inputs=clear_inputs))
    got = inputs(items)
    for i in range(5):
        value = got[f"toolu_{i}"]
        if i in cleared_inputs:
            assert list(value) == [texts.CLEARED_INPUT_KEY]
            ref = value[texts.CLEARED_INPUT_KEY].split("ref=")[1].split(".")[0]
            stored = next(o for o in offloads if o.ref == ref)
            assert stored.kind == "tool_input" and json.loads(stored.text) == big_input(i)
        else:
            assert value == big_input(i)
    assert applied["cleared_tool_uses"] == 4


def test_a_small_result_with_a_large_input_counts_as_cleared_by_its_input():
    messages = tool_history(["write", "bash"], inputs=True)
    messages[2]["content"][0]["content"] = "ok"
    items, applied, offloads = run(messages, ClearToolUses(keep=1, clear_inputs=True))
    assert results(items)["toolu_0"] == "ok"  # a marker would be larger: left
    assert [o.kind for o in offloads] == ["tool_input"] and applied["cleared_tool_uses"] == 1


@pytest.mark.parametrize("at_least, applies", [(0, True), (100, True), (10**6, False)])
def test_clear_at_least_all_or_nothing(at_least, applies):
    items, applied, offloads = run(tool_history(FIVE), ClearToolUses(keep=3, clear_at_least=at_least))
    assert (applied is not None) is applies
    if not applies:
        assert items == history({"messages": tool_history(FIVE)}) and offloads == []


def test_byte_stable_turn_after_turn_and_markers_not_cleared_again():
    first, _, _ = run(tool_history(FIVE), ClearToolUses(keep=2))
    again, _, _ = run(tool_history(FIVE), ClearToolUses(keep=2))
    assert json.dumps(first) == json.dumps(again)
    longer, _, _ = run(tool_history(FIVE + ["bash"]), ClearToolUses(keep=2))
    assert json.dumps(longer[: len(first) - 4]) == json.dumps(
        first[: len(first) - 4]
    )  # the cleared prefix is unchanged
    twice, applied, _ = clear_tool_uses(
        first, ClearToolUses(keep=2), VIEW, counter=COUNTER, namespace=NS, input_tokens=10**9
    )
    assert twice == first and applied is None  # markers are not cleared twice
    other_ns, _, _ = clear_tool_uses(
        history({"messages": tool_history(FIVE)}),
        ClearToolUses(keep=2),
        VIEW,
        counter=COUNTER,
        namespace="tenant-b",
        input_tokens=10**9,
    )
    assert results(other_ns)["toolu_0"] != results(first)["toolu_0"]  # refs are per tenant


def test_the_clients_history_is_never_mutated_and_regroups():
    messages = tool_history(FIVE, inputs=True)
    messages[-1]["content"].append({"type": "text", "text": "<system-reminder>x</system-reminder>"})
    snapshot = copy.deepcopy(messages)
    items, _, _ = run(messages, ClearToolUses(keep=1, clear_inputs=True))
    assert messages == snapshot
    out = with_history({"messages": messages}, items)["messages"]
    assert len(out) == len(messages) and [m["role"] for m in out] == [m["role"] for m in messages]


def test_the_proxys_own_tools_and_non_text_results_are_left():
    messages = tool_history(["context_reload", "shot", "bash", "bash"])
    messages[4]["content"][0]["content"] = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR" * 500}}
    ]
    items, applied, _ = run(messages, ClearToolUses(keep=1))
    got = results(items)
    assert got["toolu_0"] == output(0) and got["toolu_1"] is None and is_marker(got["toolu_2"])
    assert applied["cleared_tool_uses"] == 1


def thinking_history(turns: list[list[bool]]) -> list[dict]:
    """Per turn (a user question), its assistant messages (a tool loop): with thinking or not."""
    messages: list[dict] = []
    n = 0
    for t, loop in enumerate(turns):
        messages.append({"role": "user", "content": f"question {t}"})
        for k, thinks in enumerate(loop):
            blocks = (
                [
                    {"type": "thinking", "thinking": f"deep thought {n} " * 20, "signature": f"s{n}"},
                    {"type": "redacted_thinking", "data": f"r{n}" * 40},
                ]
                if thinks
                else []
            )
            last = k == len(loop) - 1
            blocks.append(
                {"type": "text", "text": f"answer {n}"}
                if last
                else {"type": "tool_use", "id": f"t{n}", "name": "bash", "input": {}}
            )
            messages.append({"role": "assistant", "content": blocks})
            if not last:
                messages.append(
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{n}", "content": "done"}]}
                )
            n += 1
    return messages


def thinking_left(items: list) -> list[int]:
    """Per assistant message, its thinking blocks."""
    return [
        sum(b.get("type") in ("thinking", "redacted_thinking") for b in i["content"])
        for i in items
        if i.get("role") == "assistant"
    ]


@pytest.mark.parametrize(
    "turns, keep, left, cleared_turns",
    [
        ([[True], [True], [True]], 1, [0, 0, 2], 2),
        ([[True], [True], [True]], 2, [0, 2, 2], 1),
        ([[True], [True], [True]], 3, [2, 2, 2], 0),
        ([[True], [True], [True]], 0, [0, 0, 0], 3),
        ([[True], [True], [True]], None, [2, 2, 2], 0),  # "all"
        ([[True, True, True], [True]], 1, [0, 0, 0, 2], 1),  # one tool loop is one turn
        ([[True, True], [True, True]], 1, [0, 0, 2, 2], 1),
        ([[True], [False], [False]], 1, [2, 0, 0], 0),  # turns with thinking are counted
        ([[True], [True], [False]], 1, [0, 2, 0], 1),
    ],
)
def test_clear_thinking(turns, keep, left, cleared_turns):
    items = history({"messages": thinking_history(turns)})
    out, applied = clear_thinking(items, ClearThinking(keep=keep), VIEW, counter=COUNTER)
    assert thinking_left(out) == left
    if cleared_turns:
        assert applied == {
            "type": "clear_thinking_20251015",
            "cleared_thinking_turns": cleared_turns,
            "cleared_input_tokens": COUNTER.messages(items) - COUNTER.messages(out),
        }
    else:
        assert applied is None and out is items


def test_an_assistant_message_of_thinking_only_keeps_it():
    items = history(
        {
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "x" * 50, "signature": "s"}]},
                {"role": "user", "content": "again"},
                {"role": "assistant", "content": [{"type": "text", "text": "a"}]},
            ]
        }
    )
    out, applied = clear_thinking(items, ClearThinking(keep=0), VIEW, counter=COUNTER)
    assert out is items and applied is None


def test_apply_edits_in_order_thinking_then_tools():
    messages = tool_history(FIVE, think=True)
    items = history({"messages": messages})
    edits = parse_context_management(
        {
            "edits": [  # one tool loop: one turn, its thinking cleared with keep 0
                {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 0}},
                {
                    "type": "clear_tool_uses_20250919",
                    "trigger": {"type": "tool_uses", "value": 1},
                    "keep": {"type": "tool_uses", "value": 1},
                },
                {"type": "compact_20260112"},
            ]
        }
    )
    done = apply_edits(items, edits, VIEW, counter=COUNTER, namespace=NS, fixed_tokens=0)
    assert [a["type"] for a in done.applied] == ["clear_thinking_20251015", "clear_tool_uses_20250919"]
    assert done.cleared_tokens == COUNTER.messages(items) - COUNTER.messages(done.items)
    no_tools = apply_edits(items, edits, VIEW, counter=COUNTER, namespace=NS, fixed_tokens=0, clear_tool_uses_=False)
    assert [a["type"] for a in no_tools.applied] == ["clear_thinking_20251015"] and not no_tools.offloads


# ------------------------------------------------------------------------------------- the config


def test_defaults_and_values():
    assert parse_context_management({}) == [] and parse_context_management({"edits": []}) == []
    assert parse_context_management({"edits": [{"type": "clear_tool_uses_20250919"}]}) == [ClearToolUses()]
    full = {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "tool_uses", "value": 7},
        "keep": {"type": "tool_uses", "value": 0},
        "clear_at_least": {"type": "input_tokens", "value": 5000},
        "exclude_tools": ["web_search"],
        "clear_tool_inputs": ["bash"],
    }
    assert parse_context_management({"edits": [full]}) == [
        ClearToolUses("tool_uses", 7, 0, 5000, frozenset({"web_search"}), frozenset({"bash"}))
    ]
    for keep, value in (("all", None), ({"type": "all"}, None), ({"type": "thinking_turns", "value": 4}, 4), (None, 1)):
        edit = {"type": "clear_thinking_20251015", **({} if keep is None else {"keep": keep})}
        assert parse_context_management({"edits": [edit]}) == [ClearThinking(value)]
    compact = {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 150000}}
    assert parse_context_management({"edits": [compact]}) == [Other("compact_20260112", compact)]


TU = "clear_tool_uses_20250919"
TH = "clear_thinking_20251015"


@pytest.mark.parametrize(
    "config, param",
    [
        ([], "context_management"),
        ("clear", "context_management"),
        ({"edits": {}}, "context_management.edits"),
        ({"edits": [], "extra": 1}, "context_management.extra"),
        ({"edits": [None]}, "context_management.edits[0]"),
        ({"edits": [{"type": "clear_everything"}]}, "context_management.edits[0].type"),
        ({"edits": [{"type": ["clear_tool_uses_20250919"]}]}, "context_management.edits[0].type"),
        ({"edits": [{"type": TU}, {"type": TH}]}, "context_management.edits[1].type"),  # thinking must be first
        ({"edits": [{"type": TU}, {"type": TU}]}, "context_management.edits[1].type"),
        ({"edits": [{"type": TU, "bogus": 1}]}, "context_management.edits[0].bogus"),
        (
            {"edits": [{"type": TU, "trigger": {"type": "input_tokens", "value": -1}}]},
            "context_management.edits[0].trigger.value",
        ),
        (
            {"edits": [{"type": TU, "trigger": {"type": "input_tokens", "value": 0}}]},
            "context_management.edits[0].trigger.value",
        ),
        (
            {"edits": [{"type": TU, "trigger": {"type": "input_tokens", "value": 2**63}}]},
            "context_management.edits[0].trigger.value",
        ),
        (
            {"edits": [{"type": TU, "trigger": {"type": "input_tokens", "value": 1.5}}]},
            "context_management.edits[0].trigger.value",
        ),
        (
            {"edits": [{"type": TU, "trigger": {"type": "input_tokens", "value": True}}]},
            "context_management.edits[0].trigger.value",
        ),
        ({"edits": [{"type": TU, "trigger": {"type": "input_tokens"}}]}, "context_management.edits[0].trigger.value"),
        (
            {"edits": [{"type": TU, "trigger": {"type": "messages", "value": 3}}]},
            "context_management.edits[0].trigger.type",
        ),
        ({"edits": [{"type": TU, "trigger": 100000}]}, "context_management.edits[0].trigger"),
        (
            {"edits": [{"type": TU, "keep": {"type": "input_tokens", "value": 3}}]},
            "context_management.edits[0].keep.type",
        ),
        (
            {"edits": [{"type": TU, "keep": {"type": "tool_uses", "value": -3}}]},
            "context_management.edits[0].keep.value",
        ),
        (
            {"edits": [{"type": TU, "clear_at_least": {"type": "tool_uses", "value": 3}}]},
            "context_management.edits[0].clear_at_least.type",
        ),
        ({"edits": [{"type": TU, "exclude_tools": "bash"}]}, "context_management.edits[0].exclude_tools"),
        ({"edits": [{"type": TU, "exclude_tools": ["bash", 3]}]}, "context_management.edits[0].exclude_tools[1]"),
        ({"edits": [{"type": TU, "exclude_tools": ["t"] * 1001}]}, "context_management.edits[0].exclude_tools"),
        ({"edits": [{"type": TU, "clear_tool_inputs": "yes"}]}, "context_management.edits[0].clear_tool_inputs"),
        ({"edits": [{"type": TU, "clear_tool_inputs": [None]}]}, "context_management.edits[0].clear_tool_inputs[0]"),
        ({"edits": [{"type": TH, "keep": "none"}]}, "context_management.edits[0].keep"),
        ({"edits": [{"type": TH, "keep": 2}]}, "context_management.edits[0].keep"),
        (
            {"edits": [{"type": TH, "keep": {"type": "thinking_turns", "value": -1}}]},
            "context_management.edits[0].keep.value",
        ),
        ({"edits": [{"type": TH, "keep": {"type": "all", "value": 3}}]}, "context_management.edits[0].keep.type"),
        ({"edits": [{"type": TU}] * (MAX_EDITS + 1)}, "context_management.edits"),
    ],
)
def test_bad_configs_are_400s_naming_the_field(config, param):
    with pytest.raises(ProxyError) as caught:
        parse_context_management(config)
    assert status_of(caught.value) == 400 and caught.value.param == param, caught.value


def test_a_ten_thousand_edit_list_is_refused_before_it_is_read():
    """Refused by its length: its first edit (not even an object) is never looked at."""
    with pytest.raises(ProxyError) as caught:
        parse_context_management({"edits": [None] * 10_000})
    assert caught.value.param == "context_management.edits" and "got 10000" in str(caught.value.message)
