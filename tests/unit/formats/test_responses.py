"""proxy.formats.responses: the Responses API view, request helpers and the reload rounds.

Fixtures are trimmed from real requests of the Codex CLI 0.169 and openai-agents 0.24 and from
the SSE a fake Responses server sends them (the event sequence the real API streams).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from proxy.core.view import ItemView
from proxy.formats.responses._items import ResponsesView, is_injected, needs_client
from proxy.formats.responses._request import colliding_tool_names, history, inject_tools, responses_tool, with_history
from proxy.formats.responses._rounds import (
    TERMINAL_EVENTS,
    StreamRewriter,
    add_usage,
    calls_to_run,
    combine_rounds,
    hide_injected,
    injected_only,
    injected_results,
    reasoning_replayable,
    round_items,
)

NAMES = frozenset({"context_reload", "context_search"})
VIEW = ResponsesView(NAMES)

# A trimmed copy of proxy.core.texts.RELOAD_TOOL_SCHEMAS (chat-style).
CHAT_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "context_reload",
            "description": "Return offloaded context by its reference.",
            "parameters": {"type": "object", "properties": {"ref": {"type": "string"}}, "required": ["ref"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "context_search",
            "description": "Search offloaded context.",
            "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}}, "required": ["pattern"]},
        },
    },
]

# ---- input items, as Codex and openai-agents send them ----------------------------------------

DEV = {
    "type": "message",
    "id": "msg_cab6dae4-ebbe-5380-8880-b382bbeeceb6",
    "role": "developer",
    "content": [{"type": "input_text", "text": "You are a coding agent running in the Codex CLI."}],
}
ENV = {
    "type": "message",
    "id": "msg_01a20382-a0b1-7eb1-a34e-254bf598116e",
    "role": "user",
    "content": [{"type": "input_text", "text": "<environment_context>\n  <cwd>/work</cwd>\n</environment_context>"}],
}
PROMPT = {
    "type": "message",
    "id": "msg_01a20382-a0f0-7f31-b771-213fecef2b75",
    "role": "user",
    "content": [{"type": "input_text", "text": "Run seq 1 3000"}],
}
FC = {
    "type": "function_call",
    "status": "completed",
    "id": "fc_a59eff91d3df42cb89b8e787",
    "name": "exec_command",
    "arguments": '{"cmd": "seq 1 3000"}',
    "call_id": "call_e97e5e8cb45d49f9a7088f94",
}
FCO = {
    "type": "function_call_output",
    "id": "fco_01a20382-b1be-7d21-8b16-509f88891b9c",
    "call_id": "call_e97e5e8cb45d49f9a7088f94",
    "output": "Chunk ID: 65e56c\nWall time: 3.0077 seconds\nProcess exited with code 0\nOutput:\n1\n2\n3\n",
}
ASSISTANT = {
    "type": "message",
    "status": "completed",
    "id": "msg_fba8214f1b71433296053d13",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "FINAL: done, saw the output.", "annotations": [], "logprobs": []}],
}
AGENTS_USER = {"content": "Call big_tool then summarize.", "role": "user"}  # no "type"
AGENTS_FC = {
    "arguments": "{}",
    "call_id": "call_d6ef543a56a743e295b63ed7",
    "name": "big_tool",
    "type": "function_call",
    "id": "fc_34a6eb166c294936ad0245fc",
    "status": "completed",
}
AGENTS_FCO = {
    "call_id": "call_d6ef543a56a743e295b63ed7",
    "output": "line 00000 xxxxxxxx\nline 00001 xxxxxxxx\n",
    "type": "function_call_output",
}
REASONING = {
    "id": "rs_68c1",
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "**Checking output**"}],
    "encrypted_content": "gAAAAABo-opaque",
}
CUSTOM_CALL = {
    "type": "custom_tool_call",
    "id": "ctc_1",
    "status": "completed",
    "call_id": "call_patch",
    "name": "apply_patch",
    "input": "*** Begin Patch\n*** End Patch",
}
CUSTOM_OUT = {"type": "custom_tool_call_output", "call_id": "call_patch", "output": "Success. Updated: a.py"}
LOCAL_SHELL = {
    "type": "local_shell_call",
    "id": "lsh_1",
    "call_id": "call_ls",
    "status": "completed",
    "action": {"type": "exec", "command": ["bash", "-lc", "ls"], "env": {}},
}
LOCAL_SHELL_OUT = {"type": "local_shell_call_output", "id": "call_ls", "output": '{"output": "a.py\\n"}'}
COMPUTER = {
    "type": "computer_call",
    "id": "cu_1",
    "call_id": "call_cu",
    "status": "completed",
    "action": {"type": "screenshot"},
    "pending_safety_checks": [],
}
COMPUTER_OUT = {
    "type": "computer_call_output",
    "call_id": "call_cu",
    "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"},
}
MCP_CALL = {
    "type": "mcp_call",
    "id": "mcp_1",
    "server_label": "deepwiki",
    "name": "ask_question",
    "arguments": '{"q": "x"}',
    "output": "The answer is 42.",
    "error": None,
    "status": "completed",
}
WEB_SEARCH = {
    "type": "web_search_call",
    "id": "ws_1",
    "status": "completed",
    "action": {"type": "search", "query": "python 3.13"},
}
FILE_SEARCH = {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": ["x"], "results": None}
ITEM_REF = {"type": "item_reference", "id": "msg_old"}
INJECTED_FC = {
    "type": "function_call",
    "id": "fc_inj1",
    "status": "completed",
    "name": "context_reload",
    "arguments": '{"ref": "qEAmudp95nmOMZH2"}',
    "call_id": "call_inj1",
}
INJECTED_FCO = {"type": "function_call_output", "call_id": "call_inj1", "output": "step0 line 0: value=0"}
UNKNOWN = {"type": "frobnicate", "id": "fr_1", "payload": {"nested": [1, 2, 3]}}


# ---- the view -----------------------------------------------------------------------------------


def test_view_satisfies_the_item_view_protocol() -> None:
    view: ItemView = VIEW
    for name in (
        "role",
        "tool_text",
        "with_tool_text",
        "text",
        "calls",
        "answers",
        "attached",
        "injected_calls",
        "summary_item",
        "transcript",
    ):
        assert callable(getattr(view, name))


@pytest.mark.parametrize(
    ("item", "role"),
    [
        (DEV, "system"),
        ({"type": "message", "role": "system", "content": "be brief"}, "system"),
        ({"role": "developer", "content": "no type"}, "system"),
        (ENV, "user"),
        (PROMPT, "user"),
        (AGENTS_USER, "user"),
        (ASSISTANT, "assistant"),
        ({"role": "assistant", "content": "easy"}, "assistant"),
        (FC, "assistant"),
        (AGENTS_FC, "assistant"),
        (INJECTED_FC, "assistant"),
        (CUSTOM_CALL, "assistant"),
        (LOCAL_SHELL, "assistant"),
        (COMPUTER, "assistant"),
        (REASONING, "assistant"),
        (WEB_SEARCH, "assistant"),
        (FILE_SEARCH, "assistant"),
        (MCP_CALL, "assistant"),
        (ITEM_REF, "assistant"),
        ({"id": "msg_old"}, "assistant"),
        (
            {"type": "mcp_approval_request", "id": "mcpr_1", "name": "x", "arguments": "{}", "server_label": "s"},
            "assistant",
        ),
        (FCO, "tool"),
        (AGENTS_FCO, "tool"),
        (CUSTOM_OUT, "tool"),
        (LOCAL_SHELL_OUT, "tool"),
        (COMPUTER_OUT, "tool"),
        ({"type": "shell_call_output", "call_id": "c", "output": []}, "tool"),
        ({"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True}, "tool"),
        ({"type": "some_future_call_output", "call_id": "c"}, "tool"),
        ({"type": "additional_tools", "role": "developer", "tools": []}, "system"),
        ({"type": "message", "role": "critic", "content": "?"}, "other"),
        (UNKNOWN, "other"),
        ({"type": "compaction", "encrypted_content": "x"}, "other"),
        ("not an item", "other"),
        (None, "other"),
    ],
)
def test_role_of_every_item_type(item: Any, role: str) -> None:
    assert VIEW.role(item) == role


def test_message_text_from_a_string_or_parts() -> None:
    assert VIEW.text(AGENTS_USER) == "Call big_tool then summarize."
    assert VIEW.text(PROMPT) == "Run seq 1 3000"
    assert VIEW.text(ASSISTANT) == "FINAL: done, saw the output."
    mixed = {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "a"},
            {"type": "input_image", "image_url": "data:image/png;base64,AA"},
            {"type": "input_file", "file_id": "file-1"},
            {"type": "input_text", "text": "b"},
        ],
    }
    assert VIEW.text(mixed) == "a\nb"
    assert VIEW.text({"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}) is None
    assert VIEW.text(REASONING) is None and VIEW.text(FC) is None


@pytest.mark.parametrize(
    ("item", "text"),
    [
        (FCO, FCO["output"]),
        (AGENTS_FCO, AGENTS_FCO["output"]),
        (CUSTOM_OUT, "Success. Updated: a.py"),
        (LOCAL_SHELL_OUT, '{"output": "a.py\\n"}'),
        (MCP_CALL, "The answer is 42."),
        ({"type": "apply_patch_call_output", "call_id": "c", "status": "completed", "output": "patched"}, "patched"),
        (
            {
                "type": "function_call_output",
                "call_id": "c",
                "output": [
                    {"type": "input_text", "text": "first"},
                    {"type": "input_image", "image_url": "data:,"},
                    {"type": "output_text", "text": "second"},
                ],
            },
            "first\nsecond",
        ),
        ({"type": "custom_tool_call_output", "call_id": "c", "output": [{"type": "input_text", "text": "x"}]}, "x"),
        (
            {
                "type": "function_call_output",
                "call_id": "c",
                "output": [{"type": "input_image", "image_url": "data:,"}],
            },
            None,
        ),
        (COMPUTER_OUT, None),
        ({"type": "shell_call_output", "call_id": "c", "output": [{"stdout": "x", "stderr": "", "outcome": {}}]}, None),
        ({**MCP_CALL, "output": None}, None),
        (FC, None),
        (PROMPT, None),
        (REASONING, None),
        (UNKNOWN, None),
    ],
)
def test_tool_text(item: dict, text: str | None) -> None:
    assert VIEW.tool_text(item) == text


def test_with_tool_text_keeps_every_key_and_their_order() -> None:
    out = VIEW.with_tool_text(FCO, "[offloaded tool result: 5 tokens, ref=abcdefgh]")
    assert list(out) == list(FCO) == ["type", "id", "call_id", "output"]
    assert out == {**FCO, "output": "[offloaded tool result: 5 tokens, ref=abcdefgh]"}
    assert FCO["output"].startswith("Chunk ID")  # the original is untouched
    with_status = {
        "type": "function_call_output",
        "id": "fco_1",
        "call_id": "c",
        "output": "big",
        "status": "completed",
        "caller": {"type": "direct"},
    }
    assert list(VIEW.with_tool_text(with_status, "small")) == list(with_status)


def test_with_tool_text_on_parts_keeps_non_text_parts_in_place() -> None:
    item = {
        "type": "function_call_output",
        "call_id": "c",
        "output": [
            {"type": "input_image", "image_url": "data:,"},
            {"type": "input_text", "text": "first"},
            {"type": "input_file", "file_id": "file-1"},
            {"type": "input_text", "text": "second"},
        ],
    }
    out = VIEW.with_tool_text(item, "marker")
    assert out["output"] == [
        {"type": "input_image", "image_url": "data:,"},
        {"type": "input_text", "text": "marker"},
        {"type": "input_file", "file_id": "file-1"},
    ]
    assert len(item["output"]) == 4


@pytest.mark.parametrize(
    "item",
    [
        FCO,
        AGENTS_FCO,
        CUSTOM_OUT,
        LOCAL_SHELL_OUT,
        MCP_CALL,
        {
            "type": "function_call_output",
            "call_id": "c",
            "output": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}],
        },
    ],
)
def test_with_tool_text_round_trips(item: dict) -> None:
    replaced = VIEW.with_tool_text(item, "new text")
    assert VIEW.tool_text(replaced) == "new text"
    assert VIEW.with_tool_text(replaced, VIEW.tool_text(item)) == VIEW.with_tool_text(item, VIEW.tool_text(item))
    assert {k: v for k, v in replaced.items() if k != "output"} == {k: v for k, v in item.items() if k != "output"}
    assert VIEW.answers(replaced) == VIEW.answers(item) and VIEW.role(replaced) == VIEW.role(item)


@pytest.mark.parametrize("item", [PROMPT, FC, COMPUTER_OUT, UNKNOWN])
def test_with_tool_text_refuses_items_without_tool_text(item: dict) -> None:
    with pytest.raises(ValueError):
        VIEW.with_tool_text(item, "x")


def test_calls_and_answers_by_call_id() -> None:
    assert VIEW.calls(FC) == ("call_e97e5e8cb45d49f9a7088f94",) and VIEW.answers(FCO) == FC["call_id"]
    assert VIEW.calls(AGENTS_FC) == (AGENTS_FCO["call_id"],) and VIEW.answers(AGENTS_FCO) == AGENTS_FC["call_id"]
    assert VIEW.calls(CUSTOM_CALL) == ("call_patch",) and VIEW.answers(CUSTOM_OUT) == "call_patch"
    assert VIEW.calls(LOCAL_SHELL) == ("call_ls",) and VIEW.answers(LOCAL_SHELL_OUT) == "call_ls"
    assert VIEW.calls(COMPUTER) == ("call_cu",) and VIEW.answers(COMPUTER_OUT) == "call_cu"
    assert VIEW.calls({"type": "mcp_approval_request", "id": "mcpr_1"}) == ("mcpr_1",)
    assert VIEW.answers({"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True}) == "mcpr_1"
    for item in (PROMPT, ASSISTANT, REASONING, WEB_SEARCH, MCP_CALL, ITEM_REF, UNKNOWN):
        assert VIEW.calls(item) == () and VIEW.answers(item) is None
    assert VIEW.answers(FC) is None and VIEW.calls(FCO) == ()


def _fc(n: int, name: str = "exec_command") -> dict:
    return {
        "type": "function_call",
        "id": f"fc_{n}",
        "status": "completed",
        "name": name,
        "arguments": "{}",
        "call_id": f"call_{n}",
    }


def _out(n: int) -> dict:
    return {"type": "function_call_output", "call_id": f"call_{n}", "output": f"out {n}"}


def test_attached_keeps_parallel_calls_and_their_results_together() -> None:
    items = [PROMPT, _fc(1), _fc(2), _out(1), _out(2), ASSISTANT]
    pairs = [VIEW.attached(a, b) for a, b in zip(items, items[1:])]
    assert pairs == [False, True, True, True, False]


def test_attached_lets_sequential_calls_be_cut_between_turns() -> None:
    items = [_fc(1), _out(1), _fc(2), _out(2), PROMPT]
    assert [VIEW.attached(a, b) for a, b in zip(items, items[1:])] == [True, False, True, False]


def test_attached_keeps_reasoning_with_what_follows() -> None:
    assert VIEW.attached(REASONING, _fc(1))
    assert VIEW.attached(REASONING, ASSISTANT)
    assert VIEW.attached(REASONING, WEB_SEARCH)
    assert not VIEW.attached(_out(1), REASONING)
    assert not VIEW.attached(PROMPT, REASONING)
    items = [PROMPT, REASONING, _fc(1), _out(1), REASONING, ASSISTANT]
    assert [VIEW.attached(a, b) for a, b in zip(items, items[1:])] == [False, True, True, False, True]


def test_attached_other_kinds_of_calls() -> None:
    assert VIEW.attached(CUSTOM_CALL, CUSTOM_OUT) and VIEW.attached(LOCAL_SHELL, LOCAL_SHELL_OUT)
    assert VIEW.attached(COMPUTER, COMPUTER_OUT)
    assert not VIEW.attached(MCP_CALL, PROMPT) and not VIEW.attached(PROMPT, FCO)
    assert not VIEW.attached(ASSISTANT, PROMPT)


def test_injected_calls() -> None:
    assert VIEW.injected_calls(INJECTED_FC) == ("call_inj1",)
    assert VIEW.injected_calls({**INJECTED_FC, "name": "context_search"}) == ("call_inj1",)
    assert VIEW.injected_calls(FC) == ()
    assert VIEW.injected_calls(INJECTED_FCO) == ()
    assert VIEW.injected_calls({**INJECTED_FC, "namespace": "tools"}) == ()  # a client's namespaced tool
    assert VIEW.injected_calls({**INJECTED_FC, "type": "custom_tool_call"}) == ()
    assert ResponsesView(()).injected_calls(INJECTED_FC) == ()


def test_summary_item() -> None:
    text = "[offloaded history: …]\n<state_snapshot>…</state_snapshot>"
    item = VIEW.summary_item(text)
    assert item == {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    assert VIEW.role(item) == "user" and VIEW.text(item).startswith("[offloaded history")


@pytest.mark.parametrize(
    ("item", "label", "text"),
    [
        (DEV, "developer", "You are a coding agent running in the Codex CLI."),
        (AGENTS_USER, "user", "Call big_tool then summarize."),
        (ASSISTANT, "assistant", "FINAL: done, saw the output."),
        (FC, 'assistant calls exec_command({"cmd": "seq 1 3000"})', ""),
        (
            {**FC, "namespace": "multi_agent_v1", "name": "spawn_agent"},
            'assistant calls multi_agent_v1.spawn_agent({"cmd": "seq 1 3000"})',
            "",
        ),
        (FCO, "tool result (call_e97e5e8cb45d49f9a7088f94)", FCO["output"]),
        (CUSTOM_CALL, "assistant calls apply_patch(*** Begin Patch\n*** End Patch)", ""),
        (LOCAL_SHELL, "assistant runs bash -lc ls", ""),
        (COMPUTER_OUT, "tool result (call_cu)", "[screenshot]"),
        (MCP_CALL, 'assistant calls deepwiki.ask_question({"q": "x"})', "The answer is 42."),
        (REASONING, "assistant reasoning", "**Checking output**"),
    ],
)
def test_transcript(item: dict, label: str, text: str) -> None:
    assert VIEW.transcript(item) == (f"[{label}]", text)


def test_transcript_of_parts_and_of_unknown_items() -> None:
    label, text = VIEW.transcript(
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "see"},
                {"type": "input_image", "image_url": "data:,"},
                {"type": "input_file", "filename": "a.pdf", "file_data": "…"},
            ],
        }
    )
    assert (label, text) == ("[user]", "see\n[image]\n[file a.pdf]")
    label, text = VIEW.transcript(WEB_SEARCH)
    assert label == "[assistant web search call]" and "python 3.13" in text
    label, text = VIEW.transcript(UNKNOWN)
    assert label == "[frobnicate]" and json.loads(text) == {"payload": {"nested": [1, 2, 3]}}


def test_transcript_of_a_tool_result_with_an_image_names_it_without_its_base64() -> None:
    image = {"type": "input_image", "image_url": "data:image/png;base64," + "iVBORw0KGgo" * 1000}
    for kind in ("function_call_output", "custom_tool_call_output"):
        label, text = VIEW.transcript({"type": kind, "call_id": "c", "output": [image]})
        assert (label, text) == ("[tool result (c)]", "[image]")
    _, text = VIEW.transcript(
        {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_text", "text": "saved"}, image]}
    )
    assert text == "saved"


def test_unknown_items_are_never_changed() -> None:
    before = copy.deepcopy(UNKNOWN)
    for method in (
        VIEW.role,
        VIEW.tool_text,
        VIEW.text,
        VIEW.calls,
        VIEW.answers,
        VIEW.injected_calls,
        VIEW.transcript,
    ):
        method(UNKNOWN)
    assert UNKNOWN == before
    assert with_history({"input": []}, [UNKNOWN])["input"][0] is UNKNOWN


# ---- request helpers ----------------------------------------------------------------------------

CODEX_TOOLS = [
    {
        "type": "function",
        "name": "exec_command",
        "description": "Runs a command in a PTY.",
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": {"cmd": {"type": "string"}},
            "required": ["cmd"],
            "additionalProperties": False,
        },
    },
    {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "Tools for spawning and managing sub-agents.",
        "tools": [
            {"type": "function", "name": "close_agent", "strict": False, "parameters": {"type": "object"}},
            {"type": "function", "name": "spawn_agent", "strict": False, "parameters": {"type": "object"}},
        ],
    },
    {
        "type": "custom",
        "name": "apply_patch",
        "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"},
    },
    {"type": "tool_search", "execution": "client"},
    {"type": "web_search", "external_web_access": True},
]
CODEX_BODY = {
    "model": "fake-model",
    "stream": True,
    "input": [DEV, ENV, PROMPT, FC, FCO],
    "tools": CODEX_TOOLS,
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "reasoning": {"summary": "auto"},
    "store": False,
    "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "019a-session",
}
AGENTS_BODY = {
    "model": "fake-model",
    "include": [],
    "input": [AGENTS_USER, AGENTS_FC, AGENTS_FCO],
    "instructions": "You are a probe agent.",
    "tools": [
        {
            "name": "big_tool",
            "parameters": {"type": "object", "properties": {}},
            "strict": True,
            "type": "function",
            "description": "Return a very large blob of text about a topic.",
        }
    ],
}


def test_history_of_a_list_is_a_copy() -> None:
    items = history(CODEX_BODY)
    assert items == CODEX_BODY["input"] and items is not CODEX_BODY["input"]
    assert history(AGENTS_BODY)[0] is AGENTS_USER


def test_history_of_a_string_and_of_nothing() -> None:
    assert history({"model": "m", "input": "hello"}) == [{"role": "user", "content": "hello"}]
    assert history({"model": "m"}) == [] and history({"input": None}) == [] and history({"input": {"x": 1}}) == []
    body = {"model": "m", "input": "hello"}
    assert VIEW.role(history(body)[0]) == "user"
    assert body["input"] == "hello"  # unchanged until the caller rewrites it


def test_with_history_keeps_the_other_keys_in_their_order() -> None:
    items = [DEV, ENV, PROMPT, FC, VIEW.with_tool_text(FCO, "small")]
    out = with_history(CODEX_BODY, items)
    assert list(out) == list(CODEX_BODY)
    assert out["input"] == items and out["input"] is not items
    assert CODEX_BODY["input"][4] is FCO  # the body given is not changed
    out = with_history({"model": "m", "input": "hi", "store": False}, [AGENTS_USER])
    assert list(out) == ["model", "input", "store"] and out["input"] == [AGENTS_USER]
    string_body = {"model": "m", "input": "hi", "previous_response_id": "resp_2"}
    assert with_history(string_body, history(string_body)) == string_body  # left as it was: still a string


def test_responses_tool_from_a_chat_schema() -> None:
    assert responses_tool(CHAT_SCHEMAS[0]) == {
        "type": "function",
        "name": "context_reload",
        "description": "Return offloaded context by its reference.",
        "parameters": {"type": "object", "properties": {"ref": {"type": "string"}}, "required": ["ref"]},
        "strict": False,
    }


def test_inject_tools_next_to_hosted_tools() -> None:
    before = copy.deepcopy(CODEX_BODY)
    out = inject_tools(CODEX_BODY, CHAT_SCHEMAS)
    assert CODEX_BODY == before
    assert list(out) == list(CODEX_BODY)
    assert out["tools"][:5] == CODEX_TOOLS
    assert [t["name"] for t in out["tools"][5:]] == ["context_reload", "context_search"]
    assert all(t["type"] == "function" and t["strict"] is False for t in out["tools"][5:])
    assert out["tools"][6]["parameters"]["required"] == ["pattern"]


def test_inject_tools_without_tools_and_idempotent() -> None:
    out = inject_tools({"model": "m", "input": "hi"}, CHAT_SCHEMAS)
    assert list(out) == ["model", "input", "tools"] and len(out["tools"]) == 2
    assert inject_tools(out, CHAT_SCHEMAS)["tools"] == out["tools"]
    assert inject_tools({"tools": "bogus"}, CHAT_SCHEMAS) == {"tools": "bogus"}
    assert [t["name"] for t in inject_tools({"tools": None}, CHAT_SCHEMAS)["tools"]] == sorted(NAMES)


def test_inject_tools_widens_an_allowed_tools_choice() -> None:
    choice = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "exec_command"}]}
    out = inject_tools({**CODEX_BODY, "tool_choice": choice}, CHAT_SCHEMAS)
    assert out["tool_choice"]["tools"] == [
        {"type": "function", "name": "exec_command"},
        {"type": "function", "name": "context_reload"},
        {"type": "function", "name": "context_search"},
    ]
    assert choice["tools"] == [{"type": "function", "name": "exec_command"}]
    assert inject_tools({**CODEX_BODY, "tool_choice": "required"}, CHAT_SCHEMAS)["tool_choice"] == "required"


def test_colliding_tool_names() -> None:
    assert colliding_tool_names(CODEX_BODY, NAMES) == set()
    assert colliding_tool_names(AGENTS_BODY, NAMES) == set()
    function = {"type": "function", "name": "context_reload"}
    assert colliding_tool_names({"tools": [function]}, NAMES) == {"context_reload"}
    assert colliding_tool_names({"tools": [{"type": "custom", "name": "context_search"}]}, NAMES) == {"context_search"}
    nested = {"type": "namespace", "name": "mine", "tools": [{"type": "function", "name": "context_search"}]}
    assert colliding_tool_names({"tools": [*CODEX_TOOLS, nested]}, NAMES) == {"context_search"}
    empty_namespace = {"type": "namespace", "name": "context_reload", "tools": []}
    assert colliding_tool_names({"tools": [empty_namespace]}, NAMES) == set()
    assert colliding_tool_names({"tools": "bogus"}, NAMES) == set() and colliding_tool_names({}, NAMES) == set()
    # after injection the proxy's own tools are found: a re-injection check must run on the client's body
    assert colliding_tool_names(inject_tools(CODEX_BODY, CHAT_SCHEMAS), NAMES) == set(NAMES)


# ---- non-streamed rounds ----------------------------------------------------------------------

USAGE = {
    "input_tokens": 100,
    "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
    "output_tokens": 20,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 120,
}


def _response(
    rid: str,
    output: list,
    *,
    status: str = "completed",
    usage: dict | None = USAGE,
    tools: list | None = None,
    created_at: int = 1795355659,
) -> dict:
    """A Response object shaped like the API's (trimmed from fake-json-nonstream-message.json)."""
    return {
        "id": rid,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "model": "m",
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [] if tools is None else tools,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": copy.deepcopy(usage),
        "user": None,
        "metadata": {},
    }


INJECTED_TOOLS_ECHO = [CODEX_TOOLS[0], *(responses_tool(s) for s in CHAT_SCHEMAS)]


def test_injected_only() -> None:
    search = {**INJECTED_FC, "id": "fc_inj2", "call_id": "call_inj2", "name": "context_search", "arguments": "{}"}
    assert injected_only(_response("r", [REASONING, INJECTED_FC]), NAMES)
    assert injected_only(_response("r", [INJECTED_FC, search]), NAMES)
    assert injected_only(_response("r", [REASONING, ASSISTANT, INJECTED_FC]), NAMES)  # text along with the call
    assert injected_only(_response("r", [WEB_SEARCH, MCP_CALL, INJECTED_FC]), NAMES)  # hosted tools ran upstream
    assert injected_only({"id": "r", "output": [INJECTED_FC]}, NAMES)  # minimal: no status
    assert not injected_only(_response("r", [INJECTED_FC, FC]), NAMES)
    assert not injected_only(_response("r", [INJECTED_FC, CUSTOM_CALL]), NAMES)
    assert not injected_only(_response("r", [INJECTED_FC, {"type": "mcp_approval_request", "id": "m"}]), NAMES)
    assert not injected_only(_response("r", [INJECTED_FC, {"type": "tool_search_call", "execution": "client"}]), NAMES)
    assert not injected_only(_response("r", [INJECTED_FC, {"type": "teleport_call", "call_id": "t"}]), NAMES)
    assert not injected_only(_response("r", [ASSISTANT]), NAMES)
    assert not injected_only(_response("r", [REASONING, FC]), NAMES)
    assert not injected_only(_response("r", [INJECTED_FC], status="incomplete"), NAMES)
    assert not injected_only(_response("r", [{**INJECTED_FC, "namespace": "x"}]), NAMES)
    assert not injected_only({"error": {"message": "x"}}, NAMES)


def test_needs_client_and_is_injected() -> None:
    assert is_injected(INJECTED_FC, NAMES) and not is_injected(FC, NAMES) and not is_injected(INJECTED_FCO, NAMES)
    assert [
        needs_client(i, NAMES)
        for i in (
            FC,
            CUSTOM_CALL,
            LOCAL_SHELL,
            COMPUTER,
            INJECTED_FC,
            WEB_SEARCH,
            FILE_SEARCH,
            MCP_CALL,
            ASSISTANT,
            REASONING,
            UNKNOWN,
        )
    ] == [True, True, True, True, False, False, False, False, False, False, False]
    assert not needs_client({"type": "tool_search_call", "execution": "server"}, NAMES)


def test_round_items_calls_and_results() -> None:
    search = {
        **INJECTED_FC,
        "id": "fc_inj2",
        "call_id": "call_inj2",
        "name": "context_search",
        "arguments": '{"pattern": "error"}',
    }
    response = _response("resp_1", [REASONING, ASSISTANT, INJECTED_FC, search])
    assert round_items(response, NAMES) == [REASONING, ASSISTANT, INJECTED_FC, search]
    calls = calls_to_run(response, NAMES)
    assert calls == [INJECTED_FC, search]
    results = injected_results(calls, ["the original text", "no match"])
    assert results == [
        {"type": "function_call_output", "call_id": "call_inj1", "output": "the original text"},
        {"type": "function_call_output", "call_id": "call_inj2", "output": "no match"},
    ]
    nxt = [*history(CODEX_BODY), *round_items(response, NAMES), *results]
    tail = nxt[-7:]  # FCO, REASONING, ASSISTANT, INJECTED_FC, search, result, result
    assert [VIEW.attached(a, b) for a, b in zip(tail, tail[1:])] == [False, True, True, True, True, True]
    assert round_items(_response("r", [INJECTED_FC, FC]), NAMES) == [INJECTED_FC]  # a client call is never appended
    with pytest.raises(ValueError):
        injected_results(calls, ["only one"])


def test_reasoning_replayable() -> None:
    assert reasoning_replayable(CODEX_BODY)  # store false, encrypted content included
    assert reasoning_replayable(AGENTS_BODY)  # store omitted: the API's default stores
    assert not reasoning_replayable({**AGENTS_BODY, "store": False})
    assert reasoning_replayable({**AGENTS_BODY, "store": True})


def test_hide_injected_in_a_mixed_round() -> None:
    response = _response("resp_1", [REASONING, INJECTED_FC, FC], tools=INJECTED_TOOLS_ECHO)
    before = copy.deepcopy(response)
    out = hide_injected(response, NAMES)
    assert response == before
    assert out["output"] == [REASONING, FC]  # the reasoning led to the client's call too: it stays
    assert out["tools"] == [CODEX_TOOLS[0]]
    assert list(out) == list(response)


def test_hide_injected_drops_reasoning_that_led_only_to_injected_calls() -> None:
    rs2 = {**REASONING, "id": "rs_2"}
    output = [REASONING, INJECTED_FC, rs2, ASSISTANT]
    assert hide_injected(_response("r", output), NAMES)["output"] == [rs2, ASSISTANT]
    assert hide_injected(_response("r", [REASONING, ASSISTANT, INJECTED_FC]), NAMES)["output"] == [REASONING, ASSISTANT]
    assert hide_injected(_response("r", [REASONING]), NAMES)["output"] == [REASONING]  # followed by nothing
    assert hide_injected(_response("r", [ASSISTANT]), NAMES) == _response("r", [ASSISTANT])


def test_hide_injected_keeps_output_text_consistent() -> None:
    message = {
        **ASSISTANT,
        "content": [*ASSISTANT["content"], {"type": "output_text", "text": " Bye.", "annotations": []}],
    }
    response = {**_response("r", [INJECTED_FC, message]), "output_text": "stale"}
    assert hide_injected(response, NAMES)["output_text"] == "FINAL: done, saw the output. Bye."
    assert "output_text" not in hide_injected(_response("r", [message]), NAMES)


def test_combine_rounds() -> None:
    first = _response("resp_1", [REASONING, ASSISTANT, INJECTED_FC], tools=INJECTED_TOOLS_ECHO, created_at=100)
    second = _response("resp_2", [{**ASSISTANT, "id": "msg_2"}], tools=INJECTED_TOOLS_ECHO, created_at=200)
    out = combine_rounds([first, second], NAMES, extra_usage={"input_tokens": 5, "output_tokens": 1, "total_tokens": 6})
    assert out["id"] == "resp_1" and out["created_at"] == 100
    assert out["output"] == [REASONING, ASSISTANT, {**ASSISTANT, "id": "msg_2"}]
    assert out["usage"] == {
        "input_tokens": 205,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 41,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 246,
    }
    assert out["tools"] == [CODEX_TOOLS[0]] and list(out) == list(second)
    assert combine_rounds([second], NAMES) == second | {"tools": [CODEX_TOOLS[0]]}
    no_usage = combine_rounds([_response("a", [], usage=None)], NAMES, extra_usage={"input_tokens": 5})
    assert no_usage["usage"] is None


def test_add_usage() -> None:
    second = {
        "input_tokens": 300,
        "input_tokens_details": {"cached_tokens": 256, "cache_write_tokens": 4},
        "output_tokens": 50,
        "output_tokens_details": {"reasoning_tokens": 32},
        "total_tokens": 350,
    }
    before = copy.deepcopy(second)
    total = add_usage(USAGE, second)
    assert total == {
        "input_tokens": 400,
        "input_tokens_details": {"cached_tokens": 256, "cache_write_tokens": 4},
        "output_tokens": 70,
        "output_tokens_details": {"reasoning_tokens": 32},
        "total_tokens": 470,
    }
    assert second == before and USAGE["input_tokens"] == 100
    assert add_usage(None, USAGE) == USAGE and add_usage(None, USAGE) is not USAGE
    assert add_usage(USAGE, None) == USAGE and add_usage(None, None) is None
    nested = add_usage(
        {"input_tokens_details": {"cache_write_tokens_details": {"ttl_30m_tokens": 1}}},
        {"input_tokens_details": {"cache_write_tokens_details": {"ttl_30m_tokens": 2, "ttl_12h_tokens": 3}}},
    )
    assert nested == {
        "input_tokens_details": {"cache_write_tokens_details": {"ttl_30m_tokens": 3, "ttl_12h_tokens": 3}}
    }


# ---- streamed rounds ------------------------------------------------------------------------------


class Round:
    """The SSE events (parsed `data`) of one upstream round, as the API streams them."""

    def __init__(self, rid: str, *, tools: list | None = None, created_at: int = 1795355658) -> None:
        self.rid, self.tools, self.created_at = rid, tools, created_at
        self.events: list[dict] = []
        self.output: list[dict] = []

    def _add(self, kind: str, **fields: Any) -> Round:
        self.events.append({"type": kind, "sequence_number": len(self.events), **fields})
        return self

    def _response(self, status: str, usage: dict | None) -> dict:
        return _response(
            self.rid, list(self.output), status=status, usage=usage, tools=self.tools, created_at=self.created_at
        )

    def start(self) -> Round:
        self._add("response.created", response=self._response("in_progress", None))
        return self._add("response.in_progress", response=self._response("in_progress", None))

    def reasoning(self, item_id: str, summary: str) -> Round:
        index = len(self.output)
        self._add(
            "response.output_item.added", output_index=index, item={"id": item_id, "type": "reasoning", "summary": []}
        )
        self._add(
            "response.reasoning_summary_part.added",
            item_id=item_id,
            output_index=index,
            summary_index=0,
            part={"type": "summary_text", "text": ""},
        )
        self._add(
            "response.reasoning_summary_text.delta", item_id=item_id, output_index=index, summary_index=0, delta=summary
        )
        self._add(
            "response.reasoning_summary_text.done", item_id=item_id, output_index=index, summary_index=0, text=summary
        )
        self._add(
            "response.reasoning_summary_part.done",
            item_id=item_id,
            output_index=index,
            summary_index=0,
            part={"type": "summary_text", "text": summary},
        )
        item = {
            "id": item_id,
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": summary}],
            "encrypted_content": f"gAAAA-{item_id}",
        }
        self.output.append(item)
        return self._add("response.output_item.done", output_index=index, item=item)

    def call(self, item_id: str, name: str, arguments: str, call_id: str) -> Round:
        index = len(self.output)
        item = {
            "id": item_id,
            "type": "function_call",
            "status": "in_progress",
            "arguments": "",
            "call_id": call_id,
            "name": name,
        }
        self._add("response.output_item.added", output_index=index, item=item)
        self._add("response.function_call_arguments.delta", item_id=item_id, output_index=index, delta=arguments)
        self._add(
            "response.function_call_arguments.done", item_id=item_id, output_index=index, name=name, arguments=arguments
        )
        done = {**item, "status": "completed", "arguments": arguments}
        self.output.append(done)
        return self._add("response.output_item.done", output_index=index, item=done)

    def message(self, item_id: str, *chunks: str) -> Round:
        index, text = len(self.output), "".join(chunks)
        self._add(
            "response.output_item.added",
            output_index=index,
            item={"id": item_id, "type": "message", "status": "in_progress", "role": "assistant", "content": []},
        )
        self._add(
            "response.content_part.added",
            item_id=item_id,
            output_index=index,
            content_index=0,
            part={"type": "output_text", "text": "", "annotations": [], "logprobs": []},
        )
        for chunk in chunks:
            self._add(
                "response.output_text.delta",
                item_id=item_id,
                output_index=index,
                content_index=0,
                delta=chunk,
                logprobs=[],
            )
        self._add(
            "response.output_text.done", item_id=item_id, output_index=index, content_index=0, text=text, logprobs=[]
        )
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        self._add("response.content_part.done", item_id=item_id, output_index=index, content_index=0, part=part)
        item = {"id": item_id, "type": "message", "status": "completed", "role": "assistant", "content": [part]}
        self.output.append(item)
        return self._add("response.output_item.done", output_index=index, item=item)

    def end(self, kind: str = "response.completed", usage: dict | None = USAGE) -> Round:
        status = {"response.completed": "completed", "response.incomplete": "incomplete", "response.failed": "failed"}[
            kind
        ]
        return self._add(kind, response=self._response(status, usage))


def drive(rounds: list[Round], *, extra_usage: dict | None = None) -> tuple[list[dict], StreamRewriter, list[dict]]:
    """Run the loop as the proxy would; returns (the client's events, the rewriter, the input appended)."""
    rewriter = StreamRewriter(NAMES, extra_usage=extra_usage)
    client: list[dict] = []
    appended: list[dict] = []
    for n, round_ in enumerate(rounds):
        before = copy.deepcopy(round_.events)
        for event in round_.events:
            client += rewriter.feed(event)
        assert round_.events == before  # the upstream events are not changed
        if not rewriter.injected_only:
            assert n == len(rounds) - 1, "the loop stopped early"
            break
        calls = rewriter.calls_to_run
        appended += rewriter.round_items
        appended += injected_results(calls, [f"result of {c['name']}" for c in calls])
        rewriter.next_round()
    client += rewriter.finish()
    return client, rewriter, appended


def check_one_response(events: list[dict], rid: str) -> dict:
    """The invariants of one client-visible stream; returns its terminal response."""
    types = [e["type"] for e in events]
    assert types[0] == "response.created" and types.count("response.created") == 1
    assert types.count("response.in_progress") <= 1
    terminals = [e for e in events if e["type"] in TERMINAL_EVENTS]
    assert len(terminals) == 1 and events[-1] is terminals[0]
    numbers = [e["sequence_number"] for e in events]
    assert numbers == list(range(numbers[0], numbers[0] + len(events)))  # strictly increasing, no gaps
    added = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    assert added == list(range(len(added)))  # contiguous, in order
    indexed = {e["output_index"] for e in events if "output_index" in e}
    assert indexed == set(added)
    for e in events:
        if "response" in e:
            assert e["response"]["id"] == rid
            assert not any(t.get("name") in NAMES for t in e["response"]["tools"])
    done = {e["output_index"]: e["item"] for e in events if e["type"] == "response.output_item.done"}
    final = terminals[0]["response"]
    assert final["output"] == [done[i] for i in range(len(done))]
    assert not any(is_injected(item, NAMES) for item in final["output"])
    _validate(events)
    _accumulate_like_the_sdk(events, final)
    return final


def _event_models() -> dict[str, Any]:
    from typing import get_args

    from openai.types.responses import ResponseStreamEvent

    union = get_args(ResponseStreamEvent)[0]
    return {get_args(cls.model_fields["type"].annotation)[0]: cls for cls in get_args(union)}


def _validate(events: list[dict]) -> None:
    """Every client event parses as the openai SDK's model of its type (a ResponseStreamEvent)."""
    models = _event_models()
    for event in events:
        models[event["type"]].model_validate(event)


def _accumulate_like_the_sdk(events: list[dict], final: dict) -> None:
    """`client.responses.stream()` accumulates events in ResponseStreamState, which refuses a
    response id that changes, duplicate output indexes and content before its item."""
    try:
        from openai import omit
        from openai.lib.streaming.responses._responses import ResponseStreamState
    except ImportError:  # a private module of the SDK: the check is skipped if it moves
        return
    models = _event_models()
    state = ResponseStreamState(input_tools=omit, text_format=omit)
    for event in events:
        state.handle_event(models[event["type"]].model_validate(event))
    if events[-1]["type"] == "response.completed":
        parsed = state._completed_response
        assert parsed is not None and parsed.id == final["id"]
        assert [item.id for item in parsed.output] == [item["id"] for item in final["output"]]


def test_the_sdk_refuses_a_response_id_that_changes_midstream() -> None:
    """Why every round is announced under the first round's id."""
    first = Round("resp_1").start().message("msg_1", "x")
    events = [*first.events, Round("resp_2").end().events[0] | {"sequence_number": len(first.events)}]
    with pytest.raises(RuntimeError, match="identity changed"):
        _accumulate_like_the_sdk(events, {})


def test_a_stream_without_injected_calls_passes_unchanged() -> None:
    upstream = Round("resp_1").start().message("msg_1", "FINAL: done, s", "aw the output.").end()
    client, rewriter, _ = drive([upstream])
    assert client == upstream.events
    assert rewriter.response_id == rewriter.last_response_id == "resp_1"
    check_one_response(client, "resp_1")


def test_two_rounds_reasoning_and_injected_call_then_text() -> None:
    first = (
        Round("resp_1", tools=INJECTED_TOOLS_ECHO, created_at=100)
        .start()
        .reasoning("rs_1", "**Reloading the output**")
        .call("fc_inj", "context_reload", '{"ref": "qEAmudp95nmOMZH2"}', "call_inj")
        .end()
    )
    second = (
        Round("resp_2", tools=INJECTED_TOOLS_ECHO, created_at=200)
        .start()
        .message("msg_2", "FINAL: the output ", "ends with 3000.")
        .end(usage={**USAGE, "input_tokens": 300, "total_tokens": 320})
    )
    client, rewriter, appended = drive([first, second])
    final = check_one_response(client, "resp_1")
    assert [e["type"] for e in client] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert final["output"] == [second.output[0]]
    assert final["created_at"] == 100 and final["status"] == "completed"
    assert final["usage"] == {
        "input_tokens": 400,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 40,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 440,
    }
    assert rewriter.last_response_id == "resp_2"
    # the second round's input got the reasoning (with its encrypted content), the call and its result
    assert appended == [
        first.output[0],
        first.output[1],
        {"type": "function_call_output", "call_id": "call_inj", "output": "result of context_reload"},
    ]


def test_what_the_loop_reads_after_an_injected_round() -> None:
    first = (
        Round("resp_1")
        .start()
        .reasoning("rs_1", "think")
        .call("fc_a", "context_reload", '{"ref": "abcdefgh"}', "call_a")
        .call("fc_b", "context_search", '{"pattern": "err"}', "call_b")
        .end()
    )
    rewriter = StreamRewriter(NAMES)
    client = [out for event in first.events for out in rewriter.feed(event)]
    assert [e["type"] for e in client] == ["response.created", "response.in_progress"]
    assert rewriter.ended and rewriter.injected_only and not rewriter.errored
    assert [(c["call_id"], c["name"], c["arguments"]) for c in rewriter.calls_to_run] == [
        ("call_a", "context_reload", '{"ref": "abcdefgh"}'),
        ("call_b", "context_search", '{"pattern": "err"}'),
    ]
    assert rewriter.round_items == first.output
    rewriter.next_round()
    assert not rewriter.ended and not rewriter.injected_only and rewriter.calls_to_run == []


def test_three_rounds_with_visible_text_in_every_round() -> None:
    first = (
        Round("resp_1")
        .start()
        .message("msg_1", "Let me reload that.")
        .call("fc_1", "context_reload", "{}", "call_1")
        .end()
    )
    second = (
        Round("resp_2").start().reasoning("rs_2", "still looking").call("fc_2", "context_search", "{}", "call_2").end()
    )
    third = Round("resp_3").start().reasoning("rs_3", "got it").message("msg_3", "Done.").end()
    client, _, appended = drive([first, second, third])
    final = check_one_response(client, "resp_1")
    assert [item["id"] for item in final["output"]] == ["msg_1", "rs_3", "msg_3"]
    assert final["usage"]["total_tokens"] == 360
    assert [item.get("id", item["type"]) for item in appended] == [
        "msg_1",
        "fc_1",
        "function_call_output",
        "rs_2",
        "fc_2",
        "function_call_output",
    ]


def test_a_mixed_round_returns_the_client_call_and_hides_the_injected_one() -> None:
    upstream = (
        Round("resp_1", tools=INJECTED_TOOLS_ECHO)
        .start()
        .reasoning("rs_1", "two things to do")
        .call("fc_inj", "context_reload", '{"ref": "abcdefgh"}', "call_inj")
        .call("fc_930811d9", "exec_command", '{"cmd": "seq 1 3000"}', "call_3652de34")
        .end()
    )
    client, rewriter, appended = drive([upstream])
    final = check_one_response(client, "resp_1")
    assert not rewriter.injected_only and appended == []
    assert [item["id"] for item in final["output"]] == ["rs_1", "fc_930811d9"]  # the reasoning led to the client call
    assert [e["output_index"] for e in client if e["type"] == "response.output_item.done"] == [0, 1]
    assert all(e.get("item_id") != "fc_inj" for e in client)
    assert final == hide_injected(upstream.events[-1]["response"], NAMES)


def test_reasoning_events_are_held_until_the_next_item_shows_what_it_led_to() -> None:
    upstream = Round("resp_1").start().reasoning("rs_1", "plan").message("msg_1", "hi").end()
    rewriter = StreamRewriter(NAMES)
    sent_after: list[int] = []
    for event in upstream.events:
        sent_after.append(len(rewriter.feed(event)))
    # created, in_progress; the 6 reasoning events held; the message's added releases them with itself
    assert sent_after[:8] == [1, 1, 0, 0, 0, 0, 0, 0] and sent_after[8] == 7
    final = check_one_response([*_replay(upstream, NAMES)], "resp_1")
    assert [item["id"] for item in final["output"]] == ["rs_1", "msg_1"]


def _replay(round_: Round, names: frozenset[str]) -> list[dict]:
    rewriter = StreamRewriter(names)
    return [out for event in round_.events for out in rewriter.feed(event)] + rewriter.finish()


def test_a_reasoning_item_at_the_end_of_a_round_is_released() -> None:
    upstream = Round("resp_1").start().message("msg_1", "x").reasoning("rs_1", "trailing").end("response.incomplete")
    client = _replay(upstream, NAMES)
    final = check_one_response(client, "resp_1")
    assert [item["id"] for item in final["output"]] == ["msg_1", "rs_1"] and final["status"] == "incomplete"


def test_an_incomplete_round_with_an_injected_call_ends_the_loop() -> None:
    upstream = (
        Round("resp_1").start().call("fc_inj", "context_reload", '{"ref": ', "call_inj").end("response.incomplete")
    )
    client, rewriter, _ = drive([upstream])
    assert not rewriter.injected_only
    final = check_one_response(client, "resp_1")
    assert final["output"] == [] and client[-1]["type"] == "response.incomplete"


def test_an_error_event_is_relayed_and_ends_the_loop() -> None:
    upstream = Round("resp_1").start().message("msg_1", "partial")
    upstream._add("error", code="server_error", message="The server had an error.", param=None)
    client, rewriter, _ = drive([upstream])
    assert rewriter.errored and not rewriter.ended and not rewriter.injected_only
    assert client[-1] == {
        "type": "error",
        "sequence_number": len(client) - 1,
        "code": "server_error",
        "message": "The server had an error.",
        "param": None,
    }
    assert not any(e["type"] in TERMINAL_EVENTS for e in client)
    _validate(client)


def test_an_error_in_a_later_round_keeps_numbering() -> None:
    first = Round("resp_1").start().call("fc_inj", "context_reload", "{}", "call_inj").end()
    second = Round("resp_2").start()
    second._add("error", code="rate_limit_exceeded", message="Slow down.", param=None)
    client, rewriter, _ = drive([first, second])
    assert [e["type"] for e in client] == ["response.created", "response.in_progress", "error"]
    assert [e["sequence_number"] for e in client] == [0, 1, 2]


def test_fail_ends_the_stream_when_a_later_round_cannot_be_sent() -> None:
    first = (
        Round("resp_1", tools=INJECTED_TOOLS_ECHO)
        .start()
        .message("msg_1", "Looking.")
        .call("fc_inj", "context_reload", "{}", "call_inj")
        .end()
    )
    rewriter = StreamRewriter(NAMES, extra_usage={"input_tokens": 7, "output_tokens": 3, "total_tokens": 10})
    client = [out for event in first.events for out in rewriter.feed(event)]
    assert rewriter.injected_only
    rewriter.next_round()
    client += rewriter.fail("Upstream answered 429 during a reload round.", code="rate_limit_exceeded")
    final = check_one_response(client, "resp_1")
    assert client[-1]["type"] == "response.failed"
    assert final["status"] == "failed"
    assert final["error"] == {"code": "rate_limit_exceeded", "message": "Upstream answered 429 during a reload round."}
    assert [item["id"] for item in final["output"]] == ["msg_1"]
    assert final["usage"]["total_tokens"] == 130
    assert rewriter.fail("again") == [] and rewriter.finish() == []


def test_extra_usage_is_added_once() -> None:
    upstream = Round("resp_1").start().message("msg_1", "x").end()
    client, _, _ = drive([upstream], extra_usage={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15})
    assert client[-1]["response"]["usage"]["total_tokens"] == 135


def test_a_minimal_stream_of_item_done_and_completed() -> None:
    """Codex accepts `response.output_item.done` + `response.completed` alone; so does the rewriter."""
    first = Round("resp_1").start().call("fc_inj", "context_reload", "{}", "call_inj").end()
    second = Round("resp_2").start().message("msg_2", "ok").end()
    minimal = [Round(r.rid) for r in (first, second)]
    for full, short in zip((first, second), minimal):
        kept = [e for e in full.events if e["type"] in ("response.output_item.done", "response.completed")]
        short.events = [{**e, "sequence_number": n} for n, e in enumerate(kept)]
    rewriter = StreamRewriter(NAMES)
    client = [out for event in minimal[0].events for out in rewriter.feed(event)]
    assert client == [] and rewriter.injected_only and rewriter.calls_to_run == [first.output[0]]
    rewriter.next_round()
    client += [out for event in minimal[1].events for out in rewriter.feed(event)] + rewriter.finish()
    assert [e["type"] for e in client] == ["response.output_item.done", "response.completed"]
    assert [e["sequence_number"] for e in client] == [0, 1]
    assert client[0]["output_index"] == 0 and client[1]["response"]["output"] == [second.output[0]]
    assert client[1]["response"]["id"] == "resp_1"


def test_a_stream_of_only_completed_takes_the_items_from_its_output() -> None:
    first = Round("resp_1").start().reasoning("rs_1", "r").call("fc_inj", "context_reload", "{}", "call_inj").end()
    second = Round("resp_2").start().message("msg_2", "ok").end()
    rewriter = StreamRewriter(NAMES)
    assert rewriter.feed(first.events[-1]) == []
    assert rewriter.injected_only and rewriter.round_items == first.output
    rewriter.next_round()
    rewriter.feed(second.events[-1])
    final = rewriter.finish()[0]["response"]
    assert final["id"] == "resp_1" and final["output"] == second.output


def test_a_client_namespace_tool_named_like_an_injected_one_is_not_hidden() -> None:
    upstream = Round("resp_1").start().call("fc_ns", "context_reload", "{}", "call_ns")
    for event in upstream.events:
        if "item" in event:
            event["item"] = {**event["item"], "namespace": "mine"}
    upstream.output[-1] = {**upstream.output[-1], "namespace": "mine"}
    upstream.end()
    client, rewriter, _ = drive([upstream])
    assert not rewriter.injected_only
    assert [item["id"] for item in check_one_response(client, "resp_1")["output"]] == ["fc_ns"]


def test_events_without_an_output_index_are_relayed_and_renumbered() -> None:
    first = Round("resp_1").start().call("fc_inj", "context_reload", "{}", "call_inj").end()
    second = Round("resp_2").start()
    second._add("response.audio.transcript.delta", delta="hel")
    second.message("msg_2", "ok").end()
    client, _, _ = drive([first, second])
    assert [e["type"] for e in client][:3] == [
        "response.created",
        "response.in_progress",
        "response.audio.transcript.delta",
    ]
    check_one_response(client, "resp_1")
