"""Leave-one-framework-out: the setting is chosen without the framework it is measured on.

The simple strategies `replay --compare` measures: observation masking and middle-out truncation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from proxy.core.texts import INJECTED_TOOLS, MASKED_TOOL_RESULT
from proxy.core.tokens import counter_for_encoding
from proxy.formats import chat
from proxy.formats.messages import MESSAGES
from proxy.formats.messages import items_with_offsets as anthropic_items
from proxy.formats.responses import ResponsesView
from proxy.formats.responses import items_with_offsets as responses_items
from proxy.replay import _report as report
from proxy.replay._report import middle_out, observation_masking, task_end


@dataclass
class Conv:  # what `overall` needs of a replayed conversation, here: its figures summed
    kept: int
    found: int
    cost: float
    raw: float = 100.0


def overall(convs):
    kept, found = sum(c.kept for c in convs), sum(c.found for c in convs)
    cost, raw = sum(c.cost for c in convs), sum(c.raw for c in convs)
    return {
        "recall": found / kept if kept else 1.0,
        "cache_cost_ratio": cost / raw if raw else 1.0,
        "prefix_reuse": 0.95,
        "forwarded_ratio": cost / raw if raw else 1.0,
    }


def test_framework_of_reads_the_trace():
    assert report.framework_of({"framework": "openhands-sdk"}) == "openhands-sdk"
    assert report.framework_of({"meta": {"framework": "aider"}}) == "aider"
    assert report.framework_of({"messages": []}) == "unknown"


def test_choose_takes_the_knee_within_the_prefix_budget():
    rows = [
        {"recall": 0.86, "cache_cost_ratio": 0.46, "prefix_reuse": 0.95},
        {"recall": 0.92, "cache_cost_ratio": 0.68, "prefix_reuse": 0.975},  # +0.06 recall for +0.22 cost
        {"recall": 0.84, "cache_cost_ratio": 0.30, "prefix_reuse": 0.90},  # best score, too little reuse
        {"recall": 0.88, "cache_cost_ratio": 0.48, "prefix_reuse": 0.95},
    ]  # +0.02 for +0.02: worth it
    assert report.choose(rows) == 3
    assert report.choose(rows, cost_weight=0.0) == 1  # the highest recall
    assert report.choose(rows, prefix_budget=0.99) == 2  # none keeps it: all are candidates


def test_each_framework_is_measured_with_the_setting_chosen_on_the_others():
    frameworks = ["a", "a", "b", "c"]
    # setting 0 is cheap but loses recall on framework a; setting 1 keeps it at a price
    cheap = [Conv(10, 5, 30), Conv(10, 5, 30), Conv(10, 10, 30), Conv(10, 10, 30)]
    dear = [Conv(10, 10, 90), Conv(10, 10, 90), Conv(10, 10, 90), Conv(10, 10, 90)]
    held = report.leave_one_out([cheap, dear], frameworks, overall)
    # chosen on b and c, the cheap one looks free of loss; with a among the training traces, it does not
    assert [(h.framework, h.chosen) for h in held] == [("a", 0), ("b", 1), ("c", 1)]
    # framework a pays for what was chosen without it: recall 0.5
    assert held[0].figures["recall"] == 0.5 and held[1].figures["recall"] == 1.0
    assert report.mean([h.figures for h in held])["recall"] == (0.5 + 1 + 1) / 3
    assert report.pooled(held, overall)["recall"] == 30 / 40  # weighted by the conversations
    assert report.leave_one_out([cheap], ["a"] * 4, overall) == []  # one framework: nothing to leave out
    per = report.by_framework(cheap, frameworks, overall)
    assert list(per) == ["a", "b", "c"] and per["a"]["recall"] == 0.5


VIEWS = {"chat": chat.VIEW, "responses": ResponsesView(INJECTED_TOOLS), "anthropic": MESSAGES.view}


def agent(steps: int, size: int = 40) -> list[dict]:
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
    for k in range(steps):
        messages += [
            {
                "role": "assistant",
                "content": f"step {k}",
                "tool_calls": [{"id": f"c{k}", "type": "function", "function": {"name": "run", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": f"c{k}", "content": f"output {k} " + "x " * size},
        ]
    return messages


def in_format(messages: list[dict], format: str) -> list:
    if format == "chat":
        return messages
    return (responses_items if format == "responses" else anthropic_items)(messages)[0]


def tool_texts(items: list, view) -> list[str]:
    return [view.tool_text(item) for item in items if view.role(item) == "tool"]


@pytest.mark.parametrize("format", list(VIEWS))
def test_masking_replaces_all_but_the_last_m_tool_results(format):
    view, items = VIEWS[format], in_format(agent(14), format)
    masked = observation_masking(items, view, keep=10)
    texts = tool_texts(masked, view)
    assert texts[:4] == [MASKED_TOOL_RESULT] * 4
    assert texts[4:] == [f"output {k} " + "x " * 40 for k in range(4, 14)]
    assert len(masked) == len(items)  # nothing dropped: calls and ids stay
    assert [view.calls(i) for i in masked] == [view.calls(i) for i in items]
    assert [view.answers(i) for i in masked] == [view.answers(i) for i in items]
    assert tool_texts(items, view)[0].startswith("output 0")  # the input is left as it was


def test_masking_keeps_everything_with_m_or_fewer_results():
    items = agent(3)
    assert observation_masking(items, chat.VIEW, keep=10) == items
    assert tool_texts(observation_masking(items, chat.VIEW, keep=0), chat.VIEW) == [MASKED_TOOL_RESULT] * 3


def test_masking_moves_one_result_a_turn_so_the_prefix_breaks_there():
    history = agent(14)
    turn_a, turn_b = observation_masking(history[:25], chat.VIEW), observation_masking(history[:27], chat.VIEW)
    first_difference = next(k for k, (a, b) in enumerate(zip(turn_a, turn_b)) if a != b)
    assert first_difference == 2 + 2 * 1 + 1  # result 1: it slid out of the last 10 (0 was masked already)


def tokens(item) -> int:
    return counter_for_encoding("o200k_base").text(json.dumps(item))


@pytest.mark.parametrize("format", list(VIEWS))
def test_middle_out_drops_whole_calls_with_their_results_from_the_middle(format):
    view, items = VIEWS[format], in_format(agent(12, size=200), format)
    counter = counter_for_encoding("o200k_base")
    budget = sum(map(tokens, items)) // 2
    kept = middle_out(items, view, budget, counter=counter, tokens=tokens)
    assert sum(map(tokens, kept)) <= budget
    head = task_end(items, view)
    assert kept[:head] == items[:head] and kept[-1] == items[-1]  # the task and the newest step stay
    calls = {c for item in kept for c in view.calls(item)}
    answered = {view.answers(item) for item in kept} - {None}
    assert calls == answered  # no call without its result, no result without its call
    steps = [int(t.split()[1]) for t in tool_texts(kept, view)]
    assert steps[:2] == [0, 1] and steps[-2:] == [10, 11]  # the oldest and newest stay: the middle went
    assert steps == sorted(steps) and len(steps) < 12


def test_middle_out_keeps_what_fits_and_stops_at_the_start_and_last_unit():
    items = agent(4, size=200)
    counter = counter_for_encoding("o200k_base")
    assert middle_out(items, chat.VIEW, 10**9, counter=counter, tokens=tokens) == items
    assert middle_out(items, chat.VIEW, 1, counter=counter, tokens=tokens) == items[:2] + items[-2:]
