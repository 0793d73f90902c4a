"""The replay's pure figures on hand-made histories with answers worked out by hand.

The cheapest summary schedule for a summariser's latency (proxy.replay._metrics).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.core.texts import INJECTED_TOOLS
from proxy.formats import chat
from proxy.formats.responses import ResponsesView, items_from_chat
from proxy.replay import _metrics as metrics
from proxy.replay._metrics import (
    NONE,
    SummaryCall,
    Turn,
    cache_cost,
    call_cost,
    current_policy,
    identifiers,
    item_text,
    lower_bound,
    percentile,
)
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


def growing(n: int, *, step: int = 100, trigger: int = 500) -> list[Turn]:
    """n turns; turn j forwards a head of 1 item (50 tokens) and j + 2 items of `step` tokens,
    the last two the kept tail."""
    return [Turn([50] + [step] * (j + 2), 1, j + 1, trigger) for j in range(n)]


def test_no_summary_needed_costs_the_raw_history():
    turns = growing(3, trigger=10_000)
    schedule = lower_bound(turns, lag=1, summary_tokens=10)
    # 250, then 0.1 x 250 + 100, then 0.1 x 350 + 100
    assert schedule.cuts == (NONE, NONE, NONE)
    assert schedule.compressions == 0
    assert abs(schedule.cost - (250 + 125 + 135)) < 1e-9
    assert current_policy(turns, lag=1, summary_tokens=10).cost == schedule.cost
    assert lower_bound(turns, lag=1, summary_tokens=10, limit=1_000).cost == schedule.cost


def test_the_bound_is_below_the_policy_and_grows_with_the_lag():
    turns = growing(40)
    costs = [lower_bound(turns, lag=lag, summary_tokens=30).cost for lag in (1, 2, 4)]
    assert costs[0] <= costs[1] <= costs[2]
    for lag in (1, 2, 4):  # the policy lets a turn above the trigger while its summary is made: bounded by the limit
        bound = lower_bound(turns, lag=lag, summary_tokens=30, limit=10_000)
        assert bound.cost <= current_policy(turns, lag=lag, summary_tokens=30).cost + 1e-9


def test_within_the_trigger_costs_more_than_within_a_hard_limit():
    turns = growing(40)
    assert (
        lower_bound(turns, lag=3, summary_tokens=30).cost
        >= lower_bound(turns, lag=3, summary_tokens=30, limit=2_000).cost
    )


def test_every_window_stays_within_the_trigger_and_summaries_are_used_lag_turns_late():
    turns = growing(40)
    for lag in (1, 3):
        schedule = lower_bound(turns, lag=lag, summary_tokens=30)
        for j, cut in enumerate(schedule.cuts):
            start = turns[j].head if cut == NONE else turns[cut].tail
            assert sum(turns[j].tokens[start : turns[j].tail]) <= turns[j].trigger
            assert cut == NONE or j - cut >= lag


def test_a_penalty_per_compression_gives_fewer_compressions():
    turns = growing(60)
    free = lower_bound(turns, lag=2, summary_tokens=30)
    fewer = lower_bound(turns, lag=2, summary_tokens=30, per_compression=5_000)
    assert fewer.compressions <= free.compressions
    assert fewer.cost >= free.cost


def test_the_policy_starts_a_summary_at_the_ratio_and_uses_it_lag_turns_later():
    turns = growing(12)  # the window after the head: j x 100 on turn j; 0.8 x 500 reached on turn 4
    one, three = current_policy(turns, lag=1, summary_tokens=30), current_policy(turns, lag=3, summary_tokens=30)
    assert one.cuts[:6] == (NONE,) * 6  # within the trigger: the history goes whole
    assert one.cuts[6:] == (4,) * 3 + (8,) * 3  # the summary started on turn 4, then the one started on turn 8
    assert three.cuts[6] == NONE and three.cuts[7] == 4  # started on turn 4, usable from turn 7


def test_a_call_reads_its_prefix_and_writes_what_the_turn_added():
    turns = growing(3)
    assert abs(call_cost(turns, 2, summary_tokens=30, ratio=0.8) - (0.1 * (50 + 30 + 400) + 100)) < 1e-9


def test_no_turns_cost_nothing_and_a_negative_lag_is_refused():
    """No turns (a conversation with no assistant turn): lower_bound took min() of no states
    (ValueError), as bench/summary_latency.py did on such a trace; a negative lag indexed turns
    not yet reached (IndexError)."""
    assert lower_bound([], lag=1, summary_tokens=10) == current_policy([], lag=1, summary_tokens=10)
    assert lower_bound([], lag=1, summary_tokens=10).cost == 0.0
    for schedule in (lower_bound, current_policy):
        with pytest.raises(ValueError, match="lag"):
            schedule(growing(3), lag=-1, summary_tokens=10)


def test_summary_latency_says_what_is_wrong_with_its_input(tmp_path):
    """bench/summary_latency.py on odd input: an error naming it, not a traceback."""
    root = Path(__file__).resolve().parents[3]
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({"id": "one", "messages": [{"role": "user", "content": "hi"}]}) + "\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for args, said in (
        (["--traces", str(one)], "no turn to compare"),
        (["--traces", str(empty)], "no conversations"),
        (["--traces", str(one), "--longest", "0"], "--longest"),
        (["--traces", str(one), "--lags=-1"], "--lags"),
    ):
        done = subprocess.run(
            [sys.executable, str(root / "bench" / "summary_latency.py"), *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=root,
        )
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
