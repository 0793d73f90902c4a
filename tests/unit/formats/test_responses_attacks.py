"""Attacks on the Responses format's pure parts: cuts that could separate a call from its result
or a reasoning item from its successor, compaction that could move or renumber items, a stream
rewriter fed hostile event orders, and `previous_response_id` chains across namespaces."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest

from proxy.core.compaction import plan_compaction
from proxy.core.compression import can_cut, groups, split, units
from proxy.core.settings import OffloadSettings
from proxy.core.texts import INJECTED_TOOLS
from proxy.core.tokens import counter_for_encoding
from proxy.formats.responses import RESPONSES
from proxy.formats.responses._items import ResponsesView
from proxy.formats.responses._request import parse_responses_body
from proxy.formats.responses._rounds import StreamRewriter, combine_rounds, hide_injected

VIEW = ResponsesView(INJECTED_TOOLS)
COUNTER = counter_for_encoding("o200k_base")

# ---------------------------------------------------------------- random agent histories

CALLS = {  # call type → (its result type, how the result names the call)
    "function_call": ("function_call_output", "call_id"),
    "custom_tool_call": ("custom_tool_call_output", "call_id"),
    "local_shell_call": ("local_shell_call_output", "call_id"),
    "shell_call": ("shell_call_output", "call_id"),
    "apply_patch_call": ("apply_patch_call_output", "call_id"),
    "computer_call": ("computer_call_output", "call_id"),
    "future_widget_call": ("future_widget_call_output", "call_id"),  # a type nobody knows yet
    "mcp_approval_request": ("mcp_approval_response", "approval_request_id"),
}


def _call(kind: str, n: int, rng: random.Random) -> tuple[dict, dict]:
    call_id = f"call_{n}"
    result_kind, link = CALLS[kind]
    if kind == "mcp_approval_request":
        call = {"type": kind, "id": call_id, "server_label": "s", "name": "t", "arguments": "{}"}
    else:
        call = {"type": kind, "id": f"fc_{n}", "call_id": call_id, "status": "completed"}
        if kind == "function_call":
            call |= {"name": rng.choice(["read", "context_reload", "exec"]), "arguments": "{}"}
            if rng.random() < 0.2:
                call["namespace"] = "client_ns"
    size = rng.choice([5, 5, 400, 3000])
    text = "\n".join(f"line {n}.{i} " + "x" * 20 for i in range(size))
    result: dict[str, Any] = {"type": result_kind, link: call_id}
    if result_kind == "computer_call_output":
        result["output"] = {"type": "computer_screenshot", "image_url": "data:,"}
    elif result_kind == "mcp_approval_response":
        result["approve"] = True
    elif result_kind == "shell_call_output":
        result["output"] = [{"stdout": text[:200], "stderr": ""}]
    elif result_kind == "function_call_output" and rng.random() < 0.3:
        result["output"] = [{"type": "input_text", "text": text}, {"type": "input_image", "image_url": "data:,"}]
    else:
        result["output"] = text
    if rng.random() < 0.3:
        result["id"] = f"out_{n}"
    return call, result


def agent_history(seed: int, turns: int = 8) -> list[dict]:
    rng = random.Random(seed)
    items: list[dict] = [{"type": "message", "role": "developer", "content": "be brief"}]
    n = 0
    for turn in range(turns):
        items.append({"role": "user", "content": f"task {turn}"})
        for _ in range(rng.randint(1, 3)):  # model turns within one user turn
            if rng.random() < 0.7:
                items.append({"type": "reasoning", "id": f"rs_{n}_{turn}", "summary": [], "encrypted_content": "gAAAA"})
            if rng.random() < 0.3:
                items.append(
                    {
                        "type": "message",
                        "role": "assistant",
                        "id": f"msg_{n}",
                        "content": [{"type": "output_text", "text": "let me look"}],
                    }
                )
            if rng.random() < 0.2:
                items.append({"type": "web_search_call", "id": f"ws_{n}", "status": "completed"})
            calls, results = [], []
            for _ in range(rng.randint(0, 3)):  # parallel calls, a reasoning item between some
                n += 1
                call, result = _call(rng.choice(list(CALLS)), n, rng)
                if calls and rng.random() < 0.3:
                    calls.append({"type": "reasoning", "id": f"rs_mid_{n}", "summary": []})
                calls.append(call)
                results.append(result)
            rng.shuffle(results)
            items += calls + results
        if rng.random() < 0.5:
            items.append({"type": "message", "role": "assistant", "content": "done"})
        if rng.random() < 0.1:
            items.append({"type": "item_reference", "id": f"ref_{turn}"})
    return items


def links(item: dict) -> tuple[set[str], set[str]]:
    """(call ids the item makes, call ids it answers), read from the raw JSON, not through the view."""
    kind = item.get("type")
    if kind in CALLS:
        return {item["call_id"] if "call_id" in item else item["id"]}, set()
    for result_kind, link in CALLS.values():
        if kind == result_kind:
            return set(), {item[link]}
    return set(), set()


def assert_cut_is_safe(items: list[dict], cut: int) -> None:
    """Nothing before `cut` is bound to something at or after it."""
    if cut <= 0 or cut >= len(items):
        return
    made_before = set().union(*(links(i)[0] for i in items[:cut]))
    answered_after = set().union(*(links(i)[1] for i in items[cut:]))
    assert not made_before & answered_after, (cut, made_before & answered_after)
    assert items[cut - 1].get("type") != "reasoning", (cut, items[cut - 1], items[cut])


SEEDS = range(40)


@pytest.mark.parametrize("seed", SEEDS)
def test_no_cut_separates_a_call_from_its_result_or_a_reasoning_item_from_its_successor(seed):
    items = agent_history(seed)
    for keep in range(len(items) + 1):
        head, tail = split(items, VIEW, keep)
        assert head <= tail <= len(items)
        assert_cut_is_safe(items, tail)
    for index in range(len(items) + 1):
        if can_cut(items, VIEW, index):
            assert_cut_is_safe(items, index)


@pytest.mark.parametrize("seed", SEEDS)
def test_summary_groups_never_split_a_pair(seed):
    items = agent_history(seed)
    starts = [first for first, _ in units(items, VIEW, 1, end=len(items), counter=COUNTER)]
    for first in starts:
        assert_cut_is_safe(items, first)
    for threshold in (1, 50, 500, 5000):
        for begin, end in groups(items, VIEW, 1, end=len(items), threshold=threshold, counter=COUNTER):
            assert_cut_is_safe(items, begin)
            assert_cut_is_safe(items, end)


@pytest.mark.parametrize("seed", SEEDS)
def test_compaction_keeps_every_item_in_place(seed):
    items = agent_history(seed)
    original = copy.deepcopy(items)
    settings = OffloadSettings(max_total_tokens=1000, max_tool_message_tokens=200)
    plan = plan_compaction(items, VIEW, settings, counter=COUNTER, namespace="ns")
    assert items == original  # the client's items are not mutated
    assert len(plan.items) == len(items)
    changed = 0
    for before, after in zip(items, plan.items):
        if before == after:
            continue
        changed += 1
        assert VIEW.role(before) == "tool" and set(before) == set(after) and list(before) == list(after)
        assert {k: v for k, v in before.items() if k != "output"} == {k: v for k, v in after.items() if k != "output"}
        assert not (
            before.get("type") == "function_call_output"
            and before["call_id"]
            in {i.get("call_id") for i in items if i.get("name") == "context_reload" and not i.get("namespace")}
        )
    assert changed == len(plan.offloads)
    if any(len(json.dumps(i)) > 30_000 and VIEW.tool_text(i) for i in items[:-4]):
        assert changed  # something large was there to offload


# ---------------------------------------------------------------- the stream rewriter, hostile orders


def _rewrite(event_lists: list[list[dict]]) -> list[dict]:
    rewriter = StreamRewriter(INJECTED_TOOLS)
    out: list[dict] = []
    for n, evs in enumerate(event_lists):
        if n:
            rewriter.next_round()
        for event in evs:
            out += rewriter.feed(event)
    return out + rewriter.finish()


def _round(resp_id: str, *items: dict) -> list[dict]:
    from tests.harness.responses import events, response, usage

    return events(response(*items, id=resp_id, usage=usage()))


def test_a_mixed_round_gives_the_client_its_call_and_hides_the_injected_one():
    from tests.harness.responses import function_call, reasoning

    items = [
        reasoning("r1"),
        function_call("context_reload", {"ref": "abcdef12"}, call_id="c_inj"),
        reasoning("r2"),
        function_call("read_logs", {"p": 1}, call_id="c_client"),
        function_call("context_search", {"pattern": "x"}, call_id="c_inj2"),
        function_call("context_reload", {"ref": "zz"}, call_id="c_ns", namespace="client_ns"),
    ]
    out = _rewrite([_round("resp_1", *items)])
    final = out[-1]["response"]
    assert [(i["type"], i.get("call_id")) for i in final["output"]] == [
        ("reasoning", None),
        ("function_call", "c_client"),
        ("function_call", "c_ns"),
    ]
    text = json.dumps(out)
    assert "c_inj" not in text and "abcdef12" not in text and '"pattern"' not in text
    # non-streamed: the same
    from tests.harness.responses import response

    shown = hide_injected(response(*items), INJECTED_TOOLS)
    assert [(i["type"], i.get("call_id")) for i in shown["output"]] == [
        ("reasoning", None),
        ("function_call", "c_client"),
        ("function_call", "c_ns"),
    ]
    both = combine_rounds([response(*items[:2], id="resp_1"), response(*items[2:], id="resp_2")], INJECTED_TOOLS)
    assert both["id"] == "resp_1" and "c_inj" not in json.dumps(both)


def test_the_injected_tools_are_hidden_from_every_echo():
    from tests.harness.responses import events, message, response

    tools = [
        {"type": "function", "name": "read_logs"},
        {"type": "function", "name": "context_reload", "parameters": {}},
        {"type": "function", "name": "context_search", "parameters": {}},
    ]
    choice = {
        "type": "allowed_tools",
        "mode": "auto",
        "tools": [{"type": "function", "name": "read_logs"}, {"type": "function", "name": "context_search"}],
    }
    resp = response(message("hi"), request={"tools": tools, "tool_choice": choice}, id="resp_1")
    out = _rewrite([events(resp)])
    assert [e["type"] for e in out][:2] == ["response.created", "response.in_progress"]
    assert out[0]["response"]["tools"] == tools[:1] == out[-1]["response"]["tools"]
    assert out[-1]["response"]["tool_choice"]["tools"] == choice["tools"][:1]
    assert "context_" not in json.dumps(out)
    shown = hide_injected(resp, INJECTED_TOOLS)
    assert "context_" not in json.dumps(shown) and shown["tools"] == tools[:1]


def test_only_done_events_or_only_a_terminal_event_still_hide_the_injected_call():
    from tests.harness.responses import function_call, message

    items = [function_call("context_reload", {"ref": "abcdef12"}, call_id="c_inj"), message("visible")]
    evs = _round("resp_1", *items)
    only_done = [
        e
        for e in evs
        if e["type"] not in ("response.output_item.added",)
        and not e["type"].startswith("response.function_call_arguments")
    ]
    only_terminal = [evs[0], evs[-1]]
    for variant in (only_done, only_terminal):
        out = _rewrite([variant])
        assert "context_reload" not in json.dumps(out) and "abcdef12" not in json.dumps(out)
        assert out[-1]["response"]["output"][0]["content"][0]["text"] == "visible"


# ---------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    "raw",
    [
        b'{"input": [{"type": "function_call_output", "call_id": "c", "output": {"a": 1}}]}',
        b'{"input": [{"type": "computer_call_output", "call_id": "c", "output": {"type": "computer_screenshot"}}]}',
        b'{"input": [{"type": "weird", "content": "s", "payload": {"nested": [1]}, "output": 7}]}',
    ],
)
def test_odd_but_legal_items_parse_and_are_kept(raw):
    body = parse_responses_body(raw)
    assert RESPONSES.history(body) == body["input"]
    assert RESPONSES.with_history(body, RESPONSES.history(body)) == body
