"""Messages requests (`proxy.formats.messages._request`): the history a request carries and writes
back, the summary request, and the prompt caching the proxy adds."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from proxy.core import compression as cp
from proxy.core import jsonio
from proxy.core.compaction import plan_compaction
from proxy.core.settings import OffloadSettings
from proxy.core.texts import RELOAD_TOOL_SCHEMAS, SUMMARY_INSTRUCTION
from proxy.core.tokens import counter_for_model
from proxy.formats.messages import MESSAGES
from proxy.formats.messages._from_chat import message_answer
from proxy.formats.messages._items import PRIVATE_KEYS, blocks_of
from proxy.formats.messages._request import (
    EPHEMERAL,
    SUMMARY_MAX_TOKENS,
    has_cache_control,
    history,
    instruction_message,
    summary_max_tokens,
    with_caching,
    with_history,
)
from tests.unit.formats.test_messages import BODY, MESSAGES_, U0, U8

# --- messages_history ---
# Properties of the Messages history over generated conversations: byte-identical round trips,
# prefixes, and the core's compaction and compression keeping every message whole.

VIEW = MESSAGES.view
COUNTER = counter_for_model("claude-sonnet-4-5")

texts = st.text(min_size=0, max_size=30)
ids = st.text(alphabet="abcdefghij0123456789_", min_size=1, max_size=8).map(lambda s: "toolu_" + s)
extra = st.dictionaries(
    st.sampled_from(["cache_control", "citations", "x-unknown", "title"]),
    st.one_of(st.none(), st.integers(), texts, st.just({"type": "ephemeral"})),
    max_size=2,
)
text_block = st.builds(lambda t, e: {"type": "text", "text": t, **e}, texts, extra)
image_block = st.just({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}})
unknown_block = st.builds(
    lambda k, v: {"type": k, "value": v}, st.sampled_from(["future", "container_upload"]), st.integers()
)
result_content = st.one_of(texts, st.lists(st.one_of(text_block, image_block), max_size=3), st.none())
tool_result = st.builds(
    lambda i, c, err, e: {
        "type": "tool_result",
        "tool_use_id": i,
        "content": c,
        **({"is_error": err} if err is not None else {}),
        **e,
    },
    ids,
    result_content,
    st.one_of(st.none(), st.booleans()),
    extra,
)
user_block = st.one_of(text_block, image_block, unknown_block, tool_result, tool_result)
tool_use = st.builds(
    lambda i, n, a: {"type": "tool_use", "id": i, "name": n, "input": a},
    ids,
    st.sampled_from(["Bash", "Read", "context_reload"]),
    st.dictionaries(st.text(max_size=5), st.one_of(texts, st.integers()), max_size=3),
)
assistant_block = st.one_of(
    text_block,
    tool_use,
    unknown_block,
    st.builds(lambda t: {"type": "thinking", "thinking": t, "signature": "EqQBsig"}, texts),
    st.just({"type": "redacted_thinking", "data": "EmwKAhgB"}),
    st.builds(
        lambda i: {"type": "server_tool_use", "id": "srv" + i, "name": "web_search", "input": {"query": "q"}}, ids
    ),
)
user = st.builds(
    lambda c, e: {"role": "user", "content": c, **e},
    st.one_of(texts, st.lists(user_block, min_size=0, max_size=5)),
    st.dictionaries(st.just("x-other"), st.integers(), max_size=1),
)
assistant = st.builds(
    lambda c: {"role": "assistant", "content": c}, st.one_of(texts, st.lists(assistant_block, min_size=0, max_size=4))
)
message = st.one_of(user, assistant, st.just("not a message"), st.just({"role": "user"}))
conversations = st.lists(message, max_size=12)


@hsettings(max_examples=300, deadline=None)
@given(conversations, st.dictionaries(st.sampled_from(["model", "system", "zz"]), texts, max_size=3))
def test_history_round_trips_byte_for_byte(messages, rest):
    body = {**rest, "messages": messages}
    items = history(body)
    jsonio.dumps(items)  # plain JSON values
    assert jsonio.dumps(with_history(body, items)) == jsonio.dumps(body)
    for k in range(len(messages) + 1):  # the items of a prefix are a prefix of the items
        prefix = history({"messages": messages[:k]})
        assert items[: len(prefix)] == prefix
    assert all(VIEW.role(i) != "system" for i in items)


def _shape(messages: list) -> list:
    """What must survive any reduction: roles, block kinds and ids, in order."""
    out = []
    for m in messages:
        if not isinstance(m, dict):
            out.append(m)
            continue
        content = m.get("content")
        blocks = content if isinstance(content, list) else []
        out.append(
            (
                m.get("role"),
                [
                    (b.get("type"), b.get("id"), b.get("tool_use_id"), "cache_control" in b)
                    if isinstance(b, dict)
                    else b
                    for b in blocks
                ],
            )
        )
    return out


@hsettings(max_examples=200, deadline=None)
@given(conversations)
def test_compaction_keeps_every_message_whole(messages):
    body = {"messages": messages}
    settings = OffloadSettings(max_total_tokens=0, max_tool_message_tokens=1, keep_recent=0)
    plan = plan_compaction(history(body), VIEW, settings, counter=COUNTER, namespace="n" * 32)
    out = with_history(body, plan.items)["messages"]
    assert _shape(out) == _shape(messages)
    assert not any(
        isinstance(m, dict) and key in m for m in out for key in PRIVATE_KEYS
    )  # not as text: content may say it


def _plain_user(message) -> bool:
    """A user message a summary item may join (text, no tool_result)."""
    return (
        isinstance(message, dict)
        and message.get("role") == "user"
        and isinstance(message.get("content"), (str, list))
        and not any(isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks_of(message["content"]))
    )


def test_the_summary_after_the_task_joins_its_message_so_roles_alternate():
    task = {"role": "user", "content": "Fix the failing build."}
    later = {"role": "user", "content": [{"type": "text", "text": "Also keep the logs."}]}
    call = {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}]}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}
    answer = {"role": "assistant", "content": "Done."}
    body = {"messages": [task, call, result, later, answer, {"role": "user", "content": "Next?"}]}
    items = history(body)
    summary = VIEW.summary_item("S")
    out = with_history(body, cp.assemble(items, VIEW, 1, cut=4, summary=summary))["messages"]
    assert out == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Fix the failing build."},
                {"type": "text", "text": "S"},
                *later["content"],
            ],
        },
        answer,
        {"role": "user", "content": "Next?"},
    ]


@hsettings(max_examples=200, deadline=None)
@given(conversations, st.integers(min_value=0, max_value=6))
def test_compression_cuts_between_messages_only(messages, keep):
    body = {"messages": messages}
    items = history(body)
    head, tail = cp.split(items, VIEW, keep)
    snapshot = {"type": "text", "text": "⟦the summary of this test⟧"}
    summary = VIEW.summary_item(snapshot["text"])
    out = with_history(body, cp.assemble(items, VIEW, head, cut=tail, summary=summary))["messages"]
    kept = with_history(body, items[tail:])["messages"]
    assert head == cp.task_end(items, VIEW, 0)  # the task (a first user message, whole), when there is one
    task = with_history(body, items[:head])["messages"]
    assert len(task) == (1 if head else 0) and task == messages[: len(task)]
    # the task opens the output, the summary once, the kept messages are the client's last ones, whole
    # (the first may be merged after the summary's block)
    if task and isinstance(task[0].get("content"), (str, list)):
        assert blocks_of(out[0]["content"])[: len(blocks_of(task[0]["content"]))] == blocks_of(task[0]["content"])
    assert sum(block == snapshot for m in out if isinstance(m, dict) for block in blocks_of(m.get("content"))) == 1
    assert kept == messages[len(messages) - len(kept) :]
    # from the first kept message that no summary can join (not a plain user message), all as sent
    plain = next((i for i, m in enumerate(kept) if not _plain_user(m)), len(kept))
    if plain < len(kept):
        assert out[len(out) - (len(kept) - plain) :] == kept[plain:]
    assert not any(
        isinstance(m, dict) and key in m for m in out for key in PRIVATE_KEYS
    )  # not as text: content may say it


# --- messages_summary ---
# The Messages format's summary request (`--summary-request prefix`): the turn's system, tools and
# leading messages byte for byte, then the instruction; and how its answer is read.

INSTRUCTION = instruction_message(SUMMARY_INSTRUCTION)
CLIENT = {
    **BODY,
    "stop_sequences": ["\n\nHuman:"],
    "temperature": 1,
    "tool_choice": {"type": "auto"},
    "output_config": {"effort": "medium", "format": {"type": "json_schema", "schema": {"type": "object"}}},
}


def turn_and_summary(body: dict, items: list, cut: int, injected: bool) -> tuple[dict, dict]:
    turn = MESSAGES.rounds(body, items, RELOAD_TOOL_SCHEMAS, extra_usage=None).request(injected)
    endpoint, request = MESSAGES.summary_request(
        body, items[:cut], SUMMARY_INSTRUCTION, tools=RELOAD_TOOL_SCHEMAS if injected else (), model="claude-haiku-4-5"
    )
    assert endpoint == "messages"
    return turn, request


@pytest.mark.parametrize("injected", [True, False])
def test_the_summary_request_starts_with_the_turns_own_request(injected):
    items = MESSAGES.history(CLIENT)
    cut = items.index(MESSAGES_[7])  # before A7: a message boundary
    turn, request = turn_and_summary(CLIENT, items, cut, injected)
    n = len(MESSAGES_) - 2  # the messages before A7
    assert jsonio.dumps(request["messages"][:n]) == jsonio.dumps(turn["messages"][:n])
    assert request["messages"][n:] == [INSTRUCTION]
    assert jsonio.dumps(request["tools"]) == jsonio.dumps(turn["tools"])
    assert jsonio.dumps(request["system"]) == jsonio.dumps(turn["system"])
    assert request["thinking"] == CLIENT["thinking"] and request["tool_choice"] == {"type": "auto"}
    assert request["model"] == "claude-haiku-4-5" and request["max_tokens"] == 32000
    assert request["output_config"] == {"effort": "medium"} and request["temperature"] == 1
    assert request["metadata"] == CLIENT["metadata"]
    for gone in ("stream", "stop_sequences"):
        assert gone not in request, gone
    assert CLIENT["output_config"]["format"]  # the client's body is not changed


def test_a_prefix_with_the_prior_summary_is_forwarded_as_the_turn_forwards_it():
    final = {"role": "assistant", "content": [{"type": "text", "text": "Linted."}]}
    later = {"role": "user", "content": "And the docs?"}
    body = {
        **BODY,
        "messages": [
            *MESSAGES_,
            final,
            later,
            {"role": "assistant", "content": "Sure."},
            {"role": "user", "content": "Go on."},
        ],
    }
    items = MESSAGES.history(body)
    summary = cp.summary_item(VIEW, "<state_snapshot>s</state_snapshot>", "REFabc123", count=11, tokens=900)
    whole = cp.assemble(items, VIEW, 1, cut=items.index(later), summary=summary)  # [U0, summary, U8 (kept), later, …]
    turn = MESSAGES.rounds(body, whole, RELOAD_TOOL_SCHEMAS, extra_usage=None).request(True)
    _, request = MESSAGES.summary_request(body, whole[:3], SUMMARY_INSTRUCTION, tools=RELOAD_TOOL_SCHEMAS, model="m")
    # one user message of the task, the summary and U8; the turn's holds `later` too, after the same blocks
    first = request["messages"][0]["content"]
    assert jsonio.dumps(turn["messages"][0]["content"][: len(first)]) == jsonio.dumps(first)
    assert turn["messages"][0]["content"][len(first) :] == [{"type": "text", "text": "And the docs?"}]
    assert request["messages"][1:] == [INSTRUCTION]
    _, alone = MESSAGES.summary_request(body, whole[:2], SUMMARY_INSTRUCTION, tools=(), model="m")
    # the task and the summary, one message; the instruction never merged into it
    assert alone["messages"] == [{"role": "user", "content": [*U0["content"], *summary["content"]]}, INSTRUCTION]


@pytest.mark.parametrize(
    "choice, expected",
    [
        ({"type": "any"}, {"type": "none"}),
        ({"type": "tool", "name": "Bash"}, {"type": "none"}),
        ({"type": "none"}, {"type": "none"}),
        ({"type": "auto", "disable_parallel_tool_use": True}, {"type": "auto", "disable_parallel_tool_use": True}),
    ],
)
def test_only_a_tool_choice_forcing_a_call_is_replaced(choice, expected):
    _, request = MESSAGES.summary_request(
        {**BODY, "tool_choice": choice}, MESSAGES.history(BODY)[:1], SUMMARY_INSTRUCTION, tools=(), model="m"
    )
    assert request["tool_choice"] == expected


@pytest.mark.parametrize(
    "body, expected",
    [
        ({}, SUMMARY_MAX_TOKENS),
        ({"max_tokens": 1024}, SUMMARY_MAX_TOKENS),
        ({"max_tokens": 64000, "thinking": {"type": "disabled"}}, SUMMARY_MAX_TOKENS),
        ({"max_tokens": 32000, "thinking": {"type": "enabled", "budget_tokens": 10000}}, 32000),
        ({"thinking": {"type": "enabled", "budget_tokens": 10000}}, 10000 + SUMMARY_MAX_TOKENS),
        ({"max_tokens": 5000, "thinking": {"type": "enabled", "budget_tokens": 8000}}, 8000 + SUMMARY_MAX_TOKENS),
        ({"max_tokens": 20000, "thinking": {"type": "adaptive"}}, 20000),
    ],
)
def test_max_tokens(body, expected):
    assert summary_max_tokens(body) == expected


def test_calls_left_unanswered_at_the_end_of_the_prefix_are_closed():
    calling = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_x", "name": "Bash", "input": {}},
        ],
    }
    body = {"model": "m", "messages": [U8, calling]}
    _, request = MESSAGES.summary_request(body, MESSAGES.history(body), SUMMARY_INSTRUCTION, tools=(), model="m")
    assert request["messages"][:2] == [U8, calling]
    assert request["messages"][2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "is_error": True}, INSTRUCTION["content"][0]],
    }


def test_summary_answer_reads_the_text_and_everything_sent():
    answer = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "…", "signature": "sig"},
            {"type": "text", "text": "<state_snapshot>"},
            {"type": "text", "text": "done</state_snapshot>"},
        ],
        "stop_reason": "end_turn",
        "usage": {
            "input_tokens": 12,
            "cache_read_input_tokens": 9000,
            "cache_creation_input_tokens": 40,
            "output_tokens": 700,
        },
    }
    assert MESSAGES.summary_answer(answer) == ("<state_snapshot>done</state_snapshot>", 9052, 700)
    assert MESSAGES.summary_answer(message_answer("x", model="m", input_tokens=3, output_tokens=4)) == ("x", 3, 4)
    assert MESSAGES.summary_answer({"content": []}) == ("", 0, 0)
    for bad in (None, [], {"type": "error", "error": {"type": "api_error"}}, {"content": "text"}):
        with pytest.raises(ValueError):
            MESSAGES.summary_answer(bad)


# --- messages_cache_control ---
# Whether a Messages request asks for caching anywhere (`has_cache_control`): the walk made
# fast for long histories answers as the plain recursive definition does, on any JSON.

_OPAQUE = {"input_schema", "input"}


def reference(body: dict) -> bool:
    def carries(value: Any) -> bool:
        if isinstance(value, list):
            return any(carries(v) for v in value)
        if isinstance(value, dict):
            return "cache_control" in value or any(carries(v) for k, v in value.items() if k not in _OPAQUE)
        return False

    return "cache_control" in body or any(carries(body.get(k)) for k in ("tools", "system", "messages"))


keys = st.sampled_from(["cache_control", "content", "input", "input_schema", "type", "text", "source", "x"])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=30,
)
bodies = st.dictionaries(
    st.sampled_from(["messages", "system", "tools", "model", "cache_control"]), json_values, max_size=4
)


@settings(max_examples=400, deadline=None)
@given(bodies)
def test_the_walk_answers_as_the_recursive_definition(body):
    assert has_cache_control(body) is reference(body)


def test_a_breakpoint_anywhere_a_client_puts_one_leaves_the_request_as_it_is():
    mark = {"cache_control": dict(EPHEMERAL)}
    for body in (
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a", **mark}]}]},
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "r", **mark}]}
                    ],
                }
            ]
        },
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "document",
                            "source": {"type": "content", "content": [{"type": "text", "text": "d", **mark}]},
                        }
                    ],
                }
            ]
        },
        {"messages": [], "system": [{"type": "text", "text": "s", **mark}]},
        {"messages": [], "tools": [{"name": "t", "input_schema": {}, **mark}]},
    ):
        assert has_cache_control(body) and with_caching(body) is body


def test_a_property_or_an_argument_named_cache_control_is_not_a_breakpoint():
    body = {
        "tools": [{"name": "t", "input_schema": {"properties": {"cache_control": {"type": "string"}}}}],
        "messages": [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "c", "name": "t", "input": {"cache_control": "x"}}],
            }
        ],
    }
    assert not has_cache_control(body) and with_caching(body)["cache_control"] == EPHEMERAL


def test_the_bodys_bytes_spare_the_walk_for_a_clients_own_caching(monkeypatch):
    """`mentions` (the bytes searched for the key, `RawJson.may_hold`): bytes without it mean no
    block holds it, so the blocks are not walked; bytes with it are walked as before."""
    from proxy.formats.messages import _request

    walked: list[int] = []
    real = _request.has_cache_control
    monkeypatch.setattr(_request, "has_cache_control", lambda body: walked.append(1) or real(body))
    plain = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    raw = jsonio.RawJson.of(jsonio.dumps(plain))
    assert with_caching(plain, mentions=raw.may_hold)["cache_control"] == EPHEMERAL and walked == []
    own = {
        **plain,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": EPHEMERAL}]}],
    }
    raw = jsonio.RawJson.of(jsonio.dumps(own))
    assert with_caching(own, mentions=raw.may_hold) is own and walked == [1]  # the client's own: left to it
    assert with_caching(own) is own and walked == [1, 1]  # no bytes given: walked
