"""Compaction of every Responses item that carries a tool's output (the README's list).

One table: each output-bearing item type, a call before it where it has one, a 4.8 K-token
output. The output is replaced in place by a marker with `ref=` (every other field and the
item's position kept), the same item in a later, longer turn gets the very same bytes, and the
marker's ref names the stored text. The items the README says are kept stay verbatim.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.core.compaction import plan_compaction, present_refs
from proxy.core.markers import is_marker, refs_in
from proxy.core.settings import OffloadSettings
from proxy.core.tokens import counter_for_model
from proxy.formats.responses._items import ResponsesView
from tests.harness.history import big_text_over

VIEW = ResponsesView({"context_reload", "context_search"})
COUNTER = counter_for_model("gpt-4o")
NS = "b" * 32
SETTINGS = OffloadSettings(max_total_tokens=1000, max_tool_message_tokens=500)
BIG = big_text_over(4_800, COUNTER)  # 4.8 K tokens by the counter in use (tiktoken or the estimate)
USER = {"role": "user", "content": "Go on."}

# (name, the call before the output or None, the output item, the text that is offloaded)
OFFLOADED: list[tuple[str, dict | None, dict, str]] = [
    (
        "function_call_output",
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": BIG},
        BIG,
    ),
    (
        "function_call_output parts",
        {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "read", "arguments": "{}"},
        {
            "type": "function_call_output",
            "call_id": "c2",
            "output": [{"type": "input_text", "text": BIG}, {"type": "input_image", "image_url": "data:,"}],
        },
        BIG,
    ),
    (
        "custom_tool_call_output",
        {"type": "custom_tool_call", "id": "ctc_1", "call_id": "c3", "name": "apply_patch", "input": "*** Begin"},
        {"type": "custom_tool_call_output", "call_id": "c3", "output": BIG},
        BIG,
    ),
    (
        "custom_tool_call_output parts",
        {"type": "custom_tool_call", "id": "ctc_2", "call_id": "c4", "name": "apply_patch", "input": "*** Begin"},
        {"type": "custom_tool_call_output", "call_id": "c4", "output": [{"type": "input_text", "text": BIG}]},
        BIG,
    ),
    (
        "local_shell_call_output",
        {
            "type": "local_shell_call",
            "id": "lsh_1",
            "call_id": "c5",
            "status": "completed",
            "action": {"type": "exec", "command": ["ls"], "env": {}},
        },
        {"type": "local_shell_call_output", "id": "c5", "output": BIG},
        BIG,
    ),
    (
        "apply_patch_call_output",
        {
            "type": "apply_patch_call",
            "id": "apc_1",
            "call_id": "c6",
            "status": "completed",
            "operation": {"type": "update_file", "path": "a.py", "diff": "@@"},
        },
        {"type": "apply_patch_call_output", "call_id": "c6", "status": "completed", "output": BIG},
        BIG,
    ),
    (
        "mcp_call",
        None,
        {
            "type": "mcp_call",
            "id": "mcp_1",
            "server_label": "deepwiki",
            "name": "ask_question",
            "arguments": '{"q": "x"}',
            "output": BIG,
            "error": None,
            "status": "completed",
        },
        BIG,
    ),
]

# Outputs without offloadable text (README: kept as they are).
KEPT: list[tuple[str, dict, dict]] = [
    (
        "computer_call_output",
        {
            "type": "computer_call",
            "id": "cu_1",
            "call_id": "c7",
            "status": "completed",
            "action": {"type": "screenshot"},
            "pending_safety_checks": [],
        },
        {
            "type": "computer_call_output",
            "call_id": "c7",
            "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64," + "A" * 20_000},
        },
    ),
    (
        "shell_call_output",
        {"type": "shell_call", "id": "sh_1", "call_id": "c8", "status": "completed", "action": {"commands": ["ls"]}},
        {
            "type": "shell_call_output",
            "call_id": "c8",
            "output": [{"stdout": BIG, "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
        },
    ),
]


def turn(call: dict | None, output: dict, later: int = 0) -> list[Any]:
    """user, the call (if any), its output, a user message, then `later` more user messages."""
    return [
        USER,
        *([call] if call else []),
        output,
        USER,
        *([{"role": "user", "content": f"and {i}"} for i in range(later)]),
    ]


def plan(items: list[Any]):
    return plan_compaction(items, VIEW, SETTINGS, counter=COUNTER, namespace=NS)


@pytest.mark.parametrize(("name", "call", "output", "text"), OFFLOADED, ids=[row[0] for row in OFFLOADED])
def test_every_listed_output_is_offloaded_in_place(name: str, call: dict | None, output: dict, text: str) -> None:
    assert COUNTER.text(text) > 4_500
    items = turn(call, output)
    result = plan(items)
    position = items.index(output)
    assert len(result.items) == len(items) and [o.text for o in result.offloads] == [text]
    replaced = result.items[position]
    marker = VIEW.tool_text(replaced)
    assert marker is not None and is_marker(marker) and len(marker) < 2_000
    assert refs_in(marker) == [result.offloads[0].ref] == present_refs(result.items, VIEW)
    assert list(replaced) == list(output)  # the same keys, in the same order
    assert {k: v for k, v in replaced.items() if k != "output"} == {k: v for k, v in output.items() if k != "output"}
    for i, item in enumerate(items):
        if i != position:
            assert result.items[i] is item
    # planned again (the next turn sends the compacted item back): nothing changes
    assert plan(result.items).items == result.items and not plan(result.items).offloads
    # the same item in a later, longer turn becomes the very same bytes
    later = plan(turn(call, output, later=3))
    assert json.dumps(later.items[position]) == json.dumps(replaced)


@pytest.mark.parametrize(("name", "call", "output"), KEPT, ids=[row[0] for row in KEPT])
def test_outputs_without_offloadable_text_are_kept(name: str, call: dict, output: dict) -> None:
    items = [{"role": "user", "content": BIG}, *turn(call, output)]  # over the threshold whatever an image counts
    result = plan(items)
    assert result.tokens_before > SETTINGS.max_total_tokens
    assert result.items == items and not result.offloads


def test_an_mcp_call_beside_a_function_call_output_both_offloaded() -> None:
    """The report's case: a 4.8 K-token mcp_call output beside a 4.8 K-token function_call_output."""
    mcp_call = next(row[2] for row in OFFLOADED if row[0] == "mcp_call")
    _, call, output, _ = OFFLOADED[0]
    items = [USER, mcp_call, call, output, USER]
    result = plan(items)
    assert len(result.offloads) == 2
    assert is_marker(result.items[1]["output"]) and is_marker(result.items[3]["output"])
    assert {k: v for k, v in result.items[1].items() if k != "output"} == {
        k: v for k, v in mcp_call.items() if k != "output"
    }
