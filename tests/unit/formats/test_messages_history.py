"""Properties of the Messages history over generated conversations: byte-identical round trips,
prefixes, and the core's compaction and compression keeping every message whole."""

from __future__ import annotations

from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from proxy.core import compression as cp
from proxy.core import jsonio
from proxy.core.compaction import plan_compaction
from proxy.core.settings import OffloadSettings
from proxy.core.tokens import counter_for_model
from proxy.formats.messages import MESSAGES
from proxy.formats.messages._items import PRIVATE_KEYS, blocks_of
from proxy.formats.messages._request import history, with_history

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
