"""The pure compaction planner: thresholds, tail, determinism, idempotence, pairing, parts."""

from __future__ import annotations

import copy
import json

from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from proxy.core.compaction import plan_compaction
from proxy.core.markers import is_marker, refs_in
from proxy.core.settings import OffloadSettings
from proxy.core.texts import fold_ref
from proxy.core.tokens import counter_for_model
from proxy.formats.chat import VIEW
from tests.harness.history import agent_history, big_text, big_text_over

COUNTER = counter_for_model("gpt-4o")
NS = "a" * 32


def plan(messages, **overrides):
    return plan_compaction(messages, VIEW, OffloadSettings(**overrides), counter=COUNTER, namespace=NS)


def test_below_threshold_nothing_changes():
    messages = agent_history(steps=2, lines=50)
    result = plan(messages, max_total_tokens=1_000_000)
    assert result.items == messages and not result.offloads
    assert result.tokens_before == result.tokens_after


def test_large_tool_results_offloaded_except_recent_tail():
    messages = agent_history(steps=4)
    result = plan(messages, max_total_tokens=1000, max_tool_message_tokens=500)
    tool_indices = [i for i, m in enumerate(messages) if m["role"] == "tool"]
    assert len(result.offloads) == 3  # the last message (a tool result) is the kept tail
    for i in tool_indices[:-1]:
        content = result.items[i]["content"]
        assert is_marker(content) and len(content) < 1000  # head, preview (at most 700 chars), trailer
        assert refs_in(content)[0] in {o.ref for o in result.offloads}
    assert result.items[tool_indices[-1]] == messages[tool_indices[-1]]
    assert result.tokens_after < result.tokens_before / 3
    assert {o.text for o in result.offloads} == {messages[i]["content"] for i in tool_indices[:-1]}


def test_keep_recent_counts_messages():
    messages = agent_history(steps=4)
    assert len(plan(messages, max_total_tokens=1000, keep_recent=0).offloads) == 4
    assert len(plan(messages, max_total_tokens=1000, keep_recent=3).offloads) == 2
    assert len(plan(messages, max_total_tokens=1000, keep_recent=100).offloads) == 0


def test_small_tool_results_stay():
    messages = agent_history(steps=4, lines=20)
    assert not plan(messages, max_total_tokens=100, max_tool_message_tokens=2000).offloads


def test_unset_threshold_follows_a_small_trigger():
    messages = agent_history(steps=4, lines=60)  # results of a few hundred tokens each
    sizes = [COUNTER.text(m["content"]) for m in messages if m["role"] == "tool"]
    assert max(sizes) < 6000
    assert not plan(messages, max_total_tokens=1_000_000).offloads  # a big trigger: 6,000 a result
    small = plan(messages, max_total_tokens=3 * min(sizes) - 3)  # a third of it: every result above
    assert len(small.offloads) == 3  # all but the kept tail
    assert not plan(messages, max_total_tokens=3 * min(sizes) - 3, max_tool_message_tokens=6000).offloads


def test_a_trigger_under_3_tokens_compacts_as_3_does():
    """A third of a trigger of 0 to 2 tokens rounds to 0: the unset threshold was then 6,000, so
    compact mode kept every result under it (a replay of 16 results of ~3,000 tokens forwarded
    49,077 tokens a turn at max_total_tokens 2, 9,622 at 3)."""
    messages = agent_history(steps=4, lines=60)
    assert max(COUNTER.text(m["content"]) for m in messages if m["role"] == "tool") < 6000
    for trigger in (0, 1, 2, 3, 10):
        assert len(plan(messages, mode="compact", max_total_tokens=trigger).offloads) == 3, trigger


def test_mode_off_never_offloads():
    assert not plan(agent_history(), mode="off", max_total_tokens=0).offloads


def test_deterministic_and_content_addressed():
    a = plan(agent_history(), max_total_tokens=1000)
    b = plan(agent_history(), max_total_tokens=1000)
    assert a.items == b.items and [o.ref for o in a.offloads] == [o.ref for o in b.offloads]
    other_tenant = plan_compaction(
        agent_history(), VIEW, OffloadSettings(max_total_tokens=1000), counter=COUNTER, namespace="b" * 32
    )
    assert {o.ref for o in other_tenant.offloads}.isdisjoint({o.ref for o in a.offloads})


def test_same_message_same_replacement_on_every_turn():
    """A growing history: earlier replacements are byte-identical turn after turn (prompt cache)."""
    history = agent_history(steps=8)
    previous = None
    for turn in range(5, len(history) + 1):
        forwarded = plan(history[:turn], max_total_tokens=1000).items
        if previous is not None:
            # everything the previous turn forwarded, except its kept tail, is unchanged
            assert forwarded[: len(previous) - 1] == previous[: len(previous) - 1]
        previous = forwarded


def test_idempotent():
    first = plan(agent_history(), max_total_tokens=1000)
    second = plan(first.items, max_total_tokens=1000)
    assert second.items == first.items and not second.offloads
    assert second.refs == first.refs


def test_pairing_order_and_count_untouched():
    messages = agent_history()
    original = copy.deepcopy(messages)
    result = plan(messages, max_total_tokens=1000)
    assert messages == original  # the input is not mutated
    assert len(result.items) == len(messages)
    for before, after in zip(messages, result.items):
        assert before["role"] == after["role"]
        assert before.get("tool_calls") == after.get("tool_calls")
        assert before.get("tool_call_id") == after.get("tool_call_id")


def test_multipart_content_text_offloaded_other_parts_kept():
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    messages = agent_history(steps=2)
    messages[3]["content"] = [{"type": "text", "text": big_text("parts")}, image]
    result = plan(messages, max_total_tokens=1000)
    content = result.items[3]["content"]
    assert is_marker(content[0]["text"]) and content[1] == image
    assert big_text("parts") in {o.text for o in result.offloads}


def test_reload_results_never_offloaded():
    messages = agent_history(steps=2)
    messages += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "r1", "type": "function", "function": {"name": "context_reload", "arguments": '{"ref":"x"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "r1", "content": big_text("reloaded")},
        {"role": "user", "content": "go on"},
    ]
    result = plan(messages, max_total_tokens=1000)
    assert result.items[-2]["content"] == big_text("reloaded")


def test_odd_messages_do_not_break_the_planner():
    messages = [
        None,
        "text",
        {"role": "tool"},
        {"role": "tool", "content": 5},
        {"no": "role"},
        {"role": "tool", "tool_call_id": "x", "content": big_text("odd")},
        {"role": "user", "content": "hi"},
    ]
    result = plan(messages, max_total_tokens=10)
    assert len(result.items) == len(messages) and len(result.offloads) == 1


message_strategy = st.one_of(
    st.builds(lambda t: {"role": "user", "content": t}, st.text(max_size=50)),
    st.builds(
        lambda n: {"role": "tool", "tool_call_id": f"c{n}", "content": big_text(f"h{n}", n)}, st.integers(0, 300)
    ),
    st.builds(
        lambda n: {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": f"c{n}", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        st.integers(0, 300),
    ),
    # look-alikes of the proxy's markers: compacted like any other content, idempotence still holds
    st.builds(
        lambda n: {
            "role": "tool",
            "tool_call_id": f"s{n}",
            "content": "[offloaded tool result: 1 tokens, ref=spoofed1]\n" + big_text(f"s{n}", n),
        },
        st.integers(0, 300),
    ),
)


@hsettings(max_examples=60, deadline=None)
@given(
    st.lists(message_strategy, max_size=12),
    st.integers(0, 5000),
    st.integers(1, 3000),
    st.integers(0, 4),
    st.integers(1, 30_000),
)
def test_invariants_hold_for_any_history(messages, max_total, max_tool, keep, max_fresh):
    options = {
        "max_total_tokens": max_total,
        "max_tool_message_tokens": max_tool,
        "keep_recent": keep,
        "max_fresh_tool_message_tokens": max_fresh,
    }
    result = plan(messages, **options)
    assert len(result.items) == len(messages)
    for i, (before, after) in enumerate(zip(messages, result.items)):
        assert {k: v for k, v in before.items() if k != "content"} == {k: v for k, v in after.items() if k != "content"}
        if i >= len(messages) - keep:  # the tail as sent, but for a result folded as it arrives (`proxy.core.fold`)
            assert (
                before == after
                or fold_ref(after["content"]) is not None
                or (  # or one over the fresh cap
                    is_marker(after["content"]) and COUNTER.text(before["content"]) > max_fresh
                )
            )
    again = plan(result.items, **options)
    assert again.items == result.items and not again.offloads
    assert json.dumps(plan(messages, **options).items) == json.dumps(result.items)


# ---------------------------------------------------------------- a fresh result of any size (issue 38)


def with_result(messages: list[dict], text: str, call: str) -> list[dict]:
    return [
        *messages,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call, "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": call, "content": text},
    ]


def test_a_fresh_result_over_the_cap_is_compacted_on_arrival_and_one_under_it_goes_whole():
    history = agent_history(steps=2, lines=50)
    huge, large = big_text_over(25_000, COUNTER, "huge"), big_text_over(24_000, COUNTER, "large")[:-200]
    assert COUNTER.text(huge) > 25_000 >= COUNTER.text(large) > 20_000
    result = plan(with_result(history, huge, "call_huge"))
    content = result.items[-1]["content"]
    assert is_marker(content) and len(content) < 1000
    assert [(o.ref, o.text) for o in result.offloads] == [(refs_in(content)[0], huge)]
    assert result.tokens_after < 3_000 < 25_000 < result.tokens_before
    whole = plan(with_result(history, large, "call_large"))
    assert whole.items[-1]["content"] == large and not whole.offloads  # the newest result under the cap: whole


def test_a_result_compacted_fresh_keeps_its_bytes_on_every_later_turn():
    huge = big_text_over(25_000, COUNTER, "huge")
    turns = [with_result(agent_history(steps=2, lines=50), huge, "call_huge")]
    for k in range(4):
        turns.append(with_result(turns[-1], big_text(f"later{k}", 30 * k + 5), f"call_later{k}"))
    sent = [[json.dumps(m, sort_keys=True) for m in plan(messages).items] for messages in turns]
    for before, after in zip(sent, sent[1:]):
        assert after[: len(before)] == before  # the preview made on arrival, forwarded as it was
    for cap in (1_000, 10_000):  # a cap under the tool-result threshold: compacted fresh, and as an older result
        ones = [
            plan(messages, max_fresh_tool_message_tokens=cap, max_tool_message_tokens=20_000).items
            for messages in turns
        ]
        assert all(is_marker(items[len(turns[0]) - 1]["content"]) for items in ones)
        assert all(items[len(turns[0]) - 1] == ones[0][-1] for items in ones)


def test_under_the_trigger_or_without_compaction_a_fresh_result_goes_whole():
    huge = big_text_over(25_000, COUNTER, "huge")
    messages = with_result(agent_history(steps=1, lines=20), huge, "call_huge")
    assert plan(messages, max_total_tokens=1_000_000).items == messages  # the history fits the trigger
    compress = plan_compaction(
        messages, VIEW, OffloadSettings(mode="compress"), counter=COUNTER, namespace=NS, compact=False
    )  # as the pipeline plans compression alone
    assert compress.items == messages
    assert plan(messages, mode="off").items == messages
    assert plan(messages, max_fresh_tool_message_tokens=10_000_000).items == messages  # the cap lifted


def test_no_fold_points_to_a_result_compacted_for_its_size():
    huge = big_text_over(25_000, COUNTER, "huge")
    messages = with_result(with_result(agent_history(steps=1, lines=20), huge, "call_1"), huge, "call_2")
    result = plan(messages)
    assert result.folded == 0 and is_marker(result.items[-1]["content"]) and is_marker(result.items[-3]["content"])
    assert result.items[-1]["content"] == result.items[-3]["content"]  # the same content: the same ref and preview
