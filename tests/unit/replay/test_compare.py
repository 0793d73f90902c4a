"""The simple strategies `replay --compare` measures: observation masking and middle-out truncation."""

from __future__ import annotations

import json

import pytest

from proxy.core.texts import INJECTED_TOOLS, MASKED_TOOL_RESULT
from proxy.core.tokens import counter_for_encoding
from proxy.formats import chat
from proxy.formats.messages import MESSAGES
from proxy.formats.messages import items_with_offsets as anthropic_items
from proxy.formats.responses import ResponsesView
from proxy.formats.responses import items_with_offsets as responses_items
from proxy.replay._compare import middle_out, observation_masking, task_end

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
