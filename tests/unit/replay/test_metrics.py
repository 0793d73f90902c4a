"""The replay's pure figures on hand-made histories with answers worked out by hand."""

from __future__ import annotations

import json

import pytest

from proxy.core.texts import INJECTED_TOOLS
from proxy.formats import chat
from proxy.formats.responses import ResponsesView, items_from_chat
from proxy.replay import _metrics as metrics
from proxy.replay._metrics import SummaryCall, cache_cost, identifiers, item_text, percentile
from proxy.replay._runner import answers_of


def call(name: str, arguments: dict, id: str) -> dict:
    return {"id": id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


SYSTEM = {"role": "system", "content": "You are an agent. Use the tools."}
USER = {"role": "user", "content": "Fix the bug in parse_config, see issue 4521."}
A0 = {
    "role": "assistant",
    "content": "Let me look.",
    "tool_calls": [call("bash", {"cmd": "grep -rn parse_config src"}, "c1")],
}
T0 = {
    "role": "tool",
    "tool_call_id": "c1",
    "content": "src/app/config.py:12: def parse_config(path):\nsrc/app/loader.py:40: value = read_yaml(path)",
}
A1 = {
    "role": "assistant",
    "content": "parse_config is in src/app/config.py; it calls read_yaml.",
    "tool_calls": [call("bash", {"cmd": "cat src/app/loader.py"}, "c2")],
}
T1 = {"role": "tool", "tool_call_id": "c2", "content": "def read_yaml(path):\n    return load_file(path, 8080)"}
A2 = {"role": "assistant", "content": "load_file gets port 8080 from src/app/config.py"}
HISTORY = [SYSTEM, USER, A0, T0, A1, T1, A2]
# What turn 2 forwards: T1 compacted to a preview that kept load_file but not 8080.
T1_COMPACTED = {
    "role": "tool",
    "tool_call_id": "c2",
    "content": "[offloaded tool result: 20 tokens, ref=abc]\ndef read_yaml(path):\n    return load_file(…",
}
FORWARDED = [HISTORY[:2], HISTORY[:4], [*HISTORY[:5], T1_COMPACTED]]
# By hand, per turn (the request of turn k is everything before assistant message k):
#  turn 0 (A0): writes {parse_config}; no tool result yet                        -> kept 0
#  turn 1 (A1): writes {parse_config, src/app/config.py, read_yaml, src/app/loader.py}; all four are
#       in T0, but parse_config is also in USER (and A0): kept 3, forwarded raw: found 3
#  turn 2 (A2): writes {load_file, 8080, src/app/config.py}; all in T0/T1, src/app/config.py also in A1
#       (an assistant's text): kept 2 (load_file, 8080); the compacted T1 still shows load_file: found 1
#  recall = (0 + 3 + 1) / (0 + 3 + 2) = 0.8
EXPECTED = [(0, 0), (3, 3), (2, 1)]


def is_tool(view):
    return lambda item: view.role(item) == "tool"


def test_identifiers_follow_the_definition():
    text = 'parse_config is in src/app/config.py; it calls read_yaml.\nbash\n{"cmd": "cat src/app/loader.py"}'
    assert identifiers(text) == {"parse_config", "src/app/config.py", "read_yaml", "src/app/loader.py"}
    assert identifiers("port 8080, not 42; seg.is_type and x.y") == {"8080", "seg.is_type", "x.y"}


def test_item_text_covers_contents_outputs_and_calls():
    assert item_text(A1) == "\n".join([A1["content"], "bash", A1["tool_calls"][0]["function"]["arguments"]])
    parts = {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}}]}
    assert item_text(parts) == "a"
    items = items_from_chat([A1, T1])  # Responses: the message, the function_call, the output
    assert "\n".join(map(item_text, items)) == "\n".join([item_text(A1), item_text(T1)])


def test_recall_on_a_hand_made_trace():
    answers = answers_of({"messages": HISTORY}, "chat")[1]
    assert answers == [(2, 3), (4, 5), (6, 7)]
    turns = metrics.recall(HISTORY, answers, FORWARDED, is_tool=is_tool(chat.VIEW))
    assert [(t.kept, t.found) for t in turns] == EXPECTED
    total = metrics.Recall()
    for t in turns:
        total.add(t)
    assert total.value == pytest.approx(0.8)


def test_recall_is_the_same_on_responses_items():
    items, answers = answers_of({"messages": HISTORY}, "responses")
    forwarded = [items_from_chat(f) for f in FORWARDED]
    turns = metrics.recall(items, answers, forwarded, is_tool=is_tool(ResponsesView(INJECTED_TOOLS)))
    assert [(t.kept, t.found) for t in turns] == EXPECTED


def test_recall_is_the_same_on_anthropic_items():
    from proxy.formats.messages import MESSAGES, items_with_offsets

    items, answers = answers_of({"messages": HISTORY}, "anthropic")
    forwarded = [items_with_offsets(f)[0] for f in FORWARDED]
    turns = metrics.recall(items, answers, forwarded, is_tool=is_tool(MESSAGES.view))
    assert [(t.kept, t.found) for t in turns] == EXPECTED


def test_an_identifier_an_earlier_user_message_named_is_not_counted():
    tool = {"role": "tool", "tool_call_id": "c1", "content": "the value is in settings_local.py.bak and 31337"}
    answer = {"role": "assistant", "content": "settings_local and 31337 it is"}
    for user_text, kept in (("look around", {"settings_local", "31337"}), ("check settings_local", {"31337"})):
        history = [{"role": "user", "content": user_text}, A0, tool, answer]
        [turn] = metrics.recall(history, [(3, 4)], [history[:3]], is_tool=is_tool(chat.VIEW))
        assert (turn.kept, turn.found) == (len(kept), len(kept))


def test_found_only_verbatim_in_the_forwarded_text():
    tool = {"role": "tool", "tool_call_id": "c1", "content": "error in module_a/io_helpers.py line 4410"}
    answer = {
        "role": "assistant",
        "content": "",
        "tool_calls": [call("edit", {"path": "module_a/io_helpers.py", "line": 4410}, "c2")],
    }
    history = [USER, A0, tool, answer]
    summary = {"role": "user", "content": "<state_snapshot>edited module_a/io_helpers.py</state_snapshot>"}
    for forwarded, found in ((history[:3], 2), ([USER, summary], 1), ([USER], 0)):
        [turn] = metrics.recall(history, [(3, 4)], [forwarded], is_tool=is_tool(chat.VIEW))
        assert (turn.kept, turn.found) == (2, found)


A, B, C, D, E, S = ({"id": n} for n in "abcdes")
TURNS = [[A, B], [A, B, C], [A, D]]  # turn 2: compressed, only A survives as a prefix
TOKENS = [[10, 20], [10, 20, 5], [10, 8]]
# By hand: turn 0 = 30 (nothing cached); turn 1 = 35 - 0.9 * 30 = 8; turn 2 = 18 - 0.9 * 10 = 9 -> 47.
RAW = [[A, B], [A, B, C], [A, B, C, E]]
RAW_TOKENS = [[10, 20], [10, 20, 5], [10, 20, 5, 6]]
# Raw: 30 + (35 - 0.9 * 30 = 8) + (41 - 0.9 * 35 = 9.5) = 47.5.
TOOLS = [None, [{"name": "bash"}], [{"name": "bash"}]]


def test_cache_cost_of_turns():
    assert cache_cost(TURNS, TOKENS) == pytest.approx(47)
    assert cache_cost(RAW, RAW_TOKENS) == pytest.approx(47.5)


def test_summary_call_cost_with_and_without_the_same_tools():
    # A summary call made by turn 2 that resends the previous turn's prefix [A, B] and adds S:
    # 37 tokens, of which the 30 of [A, B] are cached when it carries turn 1's tools: 37 - 27 = 10.
    same = SummaryCall(2, [A, B, S], [{"name": "bash"}], [10, 20, 7])
    assert cache_cost(TURNS, TOKENS, TOOLS, summaries=[same]) == pytest.approx(47 + 10)
    assert (47 + 10) / 47.5 == pytest.approx(1.2)  # the cache_cost_ratio of that replay
    other = SummaryCall(2, [A, B, S], None, [10, 20, 7])  # other tools: the provider caches nothing
    assert cache_cost(TURNS, TOKENS, TOOLS, summaries=[other]) == pytest.approx(47 + 37)
    first = SummaryCall(0, [A, B, S], None, [10, 20, 7])  # turn 0 has no previous turn
    assert cache_cost(TURNS, TOKENS, TOOLS, summaries=[first]) == pytest.approx(47 + 37)
    fresh = SummaryCall(2, [{"role": "system"}, S], [{"name": "bash"}], [3, 7])  # today's: a fresh transcript
    assert cache_cost(TURNS, TOKENS, TOOLS, summaries=[fresh]) == pytest.approx(47 + 10)


def test_latency_percentiles_and_stalls():
    added = [1.0] * 97 + [40.0, 900.0, 1600.0]
    assert percentile(added, 50) == 1.0 and percentile(added, 99) == 900.0 and percentile([], 50) == 0.0
    figures = metrics.latency(added, 1500, 200)
    assert figures["added_ms_max"] == 1600.0 and figures["stall_threshold_ms"] == 750
    assert figures["stalled_turns"] == 2  # 900 and 1600 exceed half the summary delay
