"""proxy.core.compaction: the compaction plan, the providers' own context management as the
planners respect it, the proxy's compaction tokens."""

from __future__ import annotations

import base64
import copy
import json

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from proxy.core import compaction as ct
from proxy.core import compression as cp
from proxy.core import jsonio
from proxy.core.compaction import (
    CLIENT_SUMMARY_PREFIXES,
    ProviderContext,
    clearable_calls,
    client_summary_end,
    live_start,
    plan_compaction,
    trigger_index,
)
from proxy.core.settings import OffloadSettings
from proxy.core.texts import fold_ref, is_marker, refs_in
from proxy.core.tokens import counter_for_model
from proxy.formats.chat import VIEW
from proxy.formats.chat import VIEW as CHAT_VIEW
from proxy.formats.messages import MESSAGES
from proxy.formats.responses import RESPONSES
from tests.harness.history import agent_history, big_text, big_text_over

# ==================== compaction
# The pure compaction planner: thresholds, tail, determinism, idempotence, pairing, parts.

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


# ==================== compaction token


def test_a_token_reads_back_in_its_namespace_only():
    rid = ct.record_id_for("ns-a", b"[1]")
    token = ct.make_token(rid, "ns-a", "secret")
    assert token.startswith(ct.PREFIX) and len(token) < 80
    assert ct.read_token(token, "ns-a", "secret") == rid.hex()
    with pytest.raises(ct.TokenError, match="not issued to this credential"):
        ct.read_token(token, "ns-b", "secret")
    with pytest.raises(ct.TokenError):
        ct.read_token(token, "ns-a", "another secret")


def test_the_same_content_gives_the_same_token_and_other_content_another():
    assert ct.record_id_for("ns", b"x") == ct.record_id_for("ns", b"x")
    assert ct.record_id_for("ns", b"x") != ct.record_id_for("ns", b"y")
    assert ct.record_id_for("ns", b"x") != ct.record_id_for("other", b"x")


@pytest.mark.parametrize(
    "token",
    [
        ct.PREFIX,
        ct.PREFIX + "!!!!",
        ct.PREFIX + "A" * 10,
        ct.PREFIX + "A" * 5000,
        ct.PREFIX + base64.urlsafe_b64encode(b"\0" * 40).decode(),
        "offload-compaction-v9:abc",
    ],
)
def test_malformed_and_unknown_versions_are_refused(token):
    assert ct.is_ours(token)
    with pytest.raises(ct.TokenError):
        ct.read_token(token, "ns", None)


def test_a_flipped_bit_is_refused():
    token = ct.make_token(ct.record_id_for("ns", b"x"), "ns")
    raw = bytearray(base64.urlsafe_b64decode(token[len(ct.PREFIX) :] + "=="))
    raw[3] ^= 1
    forged = ct.PREFIX + base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
    with pytest.raises(ct.TokenError):
        ct.read_token(forged, "ns")


@pytest.mark.parametrize("value", [None, 1, [], {}, "gAAAAABfoo", ""])
def test_other_values_are_not_ours(value):
    assert not ct.is_ours(value)


def test_a_token_is_read_by_the_api_it_was_made_for_only():
    rid = ct.record_id_for("ns", b"[]")
    responses, messages = ct.make_token(rid, "ns", "s"), ct.make_token(rid, "ns", "s", api="messages")
    assert responses != messages
    assert ct.read_token(responses, "ns", "s") == ct.read_token(messages, "ns", "s", api="messages") == rid.hex()
    with pytest.raises(ct.TokenError, match="another API"):
        ct.read_token(messages, "ns", "s")
    with pytest.raises(ct.TokenError, match="another API"):
        ct.read_token(responses, "ns", "s", api="messages")
    with pytest.raises(ct.TokenError, match="not issued"):  # another namespace's, of either API
        ct.read_token(messages, "ns-b", "s", api="messages")


def _canonical() -> str:
    return ct.make_token(ct.record_id_for("ns", b"[1]"), "ns", "s")


@pytest.mark.parametrize(
    "spelling",
    [
        lambda t: t + "=",  # padding
        lambda t: t + "==",
        lambda t: t[:40] + "!!" + t[40:],  # characters outside the alphabet, skipped by a lenient decoder
        lambda t: t[:40] + "\n" + t[40:],  # whitespace inside
        lambda t: t + "\n",
        lambda t: " " + t,
        lambda t: t + " ",
        lambda t: ct.PREFIX + t[len(ct.PREFIX) :][:-2] + "+/",  # the standard alphabet's characters
        lambda t: t[:-1],  # a character short
        lambda t: t + "A",  # a character more
        lambda t: t.upper(),
        lambda t: ct.PREFIX.upper() + t[len(ct.PREFIX) :],
        lambda t: t[:-1] + chr(ord(t[-1]) ^ 1),  # the last character's unused bits set (same bytes, another spelling)
    ],
)
def test_only_the_canonical_spelling_is_read(spelling):
    token = _canonical()
    assert ct.read_token(token, "ns", "s")  # the token itself reads back
    other = spelling(token)
    assert other != token and ct.is_ours(other)
    with pytest.raises(ct.TokenError):
        ct.read_token(other, "ns", "s")


def test_the_unused_bits_of_the_last_character_are_checked():
    token = _canonical()
    body = token[len(ct.PREFIX) :]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(body[-1])
    assert last % 4 == 0  # 32 bytes in 43 characters: two bits to spare, written as zeros
    for spare in (1, 2, 3):
        same_bytes = ct.PREFIX + body[:-1] + alphabet[last + spare]
        assert base64.urlsafe_b64decode(same_bytes[len(ct.PREFIX) :] + "=") == base64.urlsafe_b64decode(body + "=")
        with pytest.raises(ct.TokenError, match="exact spelling"):
            ct.read_token(same_bytes, "ns", "s")


@pytest.mark.parametrize(
    "value", [" offload-compaction-v1:x", "OFFLOAD-COMPACTION-V1:x", "x" * 100 + "Offload-Compaction-v1"]
)
def test_any_spelling_claiming_to_be_ours_is_ours(value):
    assert ct.is_ours(value)


def test_sealed_fields_finds_a_token_in_any_encrypted_content_at_any_depth():
    token = _canonical()
    doc = {
        "input": [
            {"type": "message", "content": [{"type": "input_text", "text": token}]},
            {"type": "reasoning", "encrypted_content": token},
            {"type": "x", "deep": [[{"encrypted_content": " " + token}]]},
            {"type": "compaction", "encrypted_content": "gAAAAAprovider"},
        ]
    }
    assert list(ct.sealed_fields(doc)) == ["input[1].encrypted_content", "input[2].deep[0][0].encrypted_content"]
    deep: dict = {"encrypted_content": token}
    for _ in range(5000):  # no recursion limit
        deep = {"a": [deep]}
    assert len(list(ct.sealed_fields(deep))) == 1
    assert ct.may_hold_token(b'{"encrypted_content":"x"}') and not ct.may_hold_token(b'{"a":"offload-compaction-v1:"}')


def test_sealed_fields_finds_a_token_inside_an_encrypted_content_of_another_type():
    """An array or an object as the `encrypted_content` (no API's shape) hides no token of ours:
    each is named by its own path, which is no compaction position."""
    token = _canonical()
    doc = {
        "input": [
            {"type": "compaction", "encrypted_content": [token]},
            {"type": "reasoning", "encrypted_content": {"a": [1, {"b": token}], "c": "x"}},
            {"type": "compaction", "encrypted_content": [None, "gAAAA", 3, {"d": None}]},
            {"type": "x", "other": [token]},
        ]
    }
    assert list(ct.sealed_fields(doc)) == ["input[0].encrypted_content[0]", "input[1].encrypted_content.a[1].b"]


def test_sealed_fields_quotes_a_key_that_is_no_plain_name():
    """A key spelled like a path (`input[1]`, `a.b`) is named quoted: no path of one field is
    another's."""
    token = _canonical()
    doc = {"input[1]": {"encrypted_content": token}, "input": [{"x-y": {"encrypted_content": token}}]}
    assert sorted(ct.sealed_fields(doc)) == sorted(
        ['["input[1]"].encrypted_content', 'input[0]["x-y"].encrypted_content']
    )


@pytest.mark.parametrize(
    "raw, spells",
    [
        (b'{"input": "caf\\u00e9 \\u4e2d\\u6587"}', False),  # what ensure_ascii writes: no ASCII letter escaped
        (b'{"input": [{"\\u0065ncrypted_content": "x"}]}', True),  # the key spelled with an escape
        (b'{"input": "\\u0041"}', True),  # any printable ASCII escape is read (conservative)
        (b'{"input": "\\u001b[0m"}', False),  # a control character cannot spell the key
        (b'{"input": "plain"}', False),
        (b'{"input": "' + b"\\u00e9" * 300_000 + b'\\u0065"}', True),  # past the first slice
    ],
)
def test_which_escapes_may_spell_the_key(raw, spells):
    assert jsonio.escapes_ascii(raw) is spells
    assert ct.may_spell_token(raw) is spells


# ==================== provider context
# The providers' own context management in the pure planners: a provider compaction item is
# opaque, what precedes it is neither counted nor summarised, cuts fall after it, a
# compaction_trigger stays last, and compaction leaves to a clear edit what it may clear.

RV = RESPONSES.view
MV = MESSAGES.view
COMPACTION = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAB" + "Q" * 400}


def user(text):
    return {"role": "user", "content": text}


def call(i, name="exec"):
    return {"type": "function_call", "call_id": f"c{i}", "name": name, "arguments": "{}"}


def output(i, text):
    return {"type": "function_call_output", "call_id": f"c{i}", "output": text}


def big(n=3000):
    return "\n".join(f"line {k} of a long tool output" for k in range(n // 6))


def test_views_mark_provider_compaction_items():
    assert RV.is_provider_compaction(COMPACTION)
    assert not RV.is_provider_compaction(user("x")) and not RV.is_provider_compaction(call(1))
    assert RV.is_compaction_trigger({"type": "compaction_trigger"})
    assert not RV.is_compaction_trigger(COMPACTION)
    block = {"type": "compaction", "content": "summary", "encrypted_content": "opaque"}
    assert MV.is_provider_compaction({"role": "assistant", "content": [block, {"type": "text", "text": "go on"}]})
    assert not MV.is_provider_compaction({"role": "assistant", "content": "compaction"})
    assert not MV.is_provider_compaction({"role": "user", "content": [{"type": "text", "text": "compaction"}]})
    assert not CHAT_VIEW.is_provider_compaction({"role": "user", "content": "compaction"})


def test_live_start_is_after_the_newest_compaction_item():
    items = [user("a"), COMPACTION, user("b"), dict(COMPACTION, id="cmp_2"), user("c")]
    assert live_start(items, RV) == 4
    assert live_start([user("a")], RV) == 0
    assert trigger_index([user("a"), {"type": "compaction_trigger"}], RV) == 1
    assert trigger_index([user("a")], RV) is None


def test_split_starts_after_the_newest_compaction_item():
    items = [
        {"role": "developer", "content": "d"},
        user("old " * 50),
        COMPACTION,
        {"role": "developer", "content": "d2"},
        *(user(f"new {k}") for k in range(6)),
    ]
    head, tail = cp.split(items, RV, keep_recent=2)
    assert head == 4 and tail == len(items) - 2  # the compaction item and what precedes it are the kept head


def test_compaction_trigger_stays_in_the_tail_even_with_no_kept_tail():
    items = [*(user(f"m {k}") for k in range(5)), {"type": "compaction_trigger"}]
    assert cp.split(items, RV, keep_recent=0) == (1, 5)  # the first user message is the task: never summarised


def test_items_before_the_compaction_never_count_nor_go_into_a_summary():
    old = [user("word " * 300) for _ in range(10)]  # far above the trigger, but ignored by the provider
    new = [user(f"new {k}") for k in range(4)]
    items = [*old, COMPACTION, *new]
    settings = OffloadSettings(max_total_tokens=500)
    assert cp.decide(items, RV, settings, counter=COUNTER, prior=None).action == "none"
    assert cp.decide(old + new, RV, settings, counter=COUNTER, prior=None).action == "summarize"  # the same without it
    newer = [*items, *(user("word " * 100) for _ in range(8))]
    d = cp.decide(newer, RV, settings, counter=COUNTER, prior=None)
    assert d.action == "summarize" and d.head == len(old) + 1  # the summarised part starts after it
    assembled = cp.assemble(newer, RV, d.head, cut=d.cut, summary=RV.summary_item("S"))
    assert assembled[: len(old) + 1] == [*old, COMPACTION]  # kept verbatim, in place


def test_compaction_ignores_what_precedes_the_compaction_item():
    old = [call(1), output(1, big()), user("u")]
    items = [*old, COMPACTION, user("new"), call(2), output(2, big()), user("last")]
    frozen = copy.deepcopy(items)
    plan = plan_compaction(
        items, RV, OffloadSettings(max_total_tokens=1000, max_tool_message_tokens=100), counter=COUNTER, namespace=NS
    )
    assert plan.items[:4] == frozen[:4]  # the old output is not compacted: the provider ignores it
    assert is_marker(plan.items[6]["output"]) and len(plan.offloads) == 1
    assert plan.tokens_before == COUNTER.messages(frozen)  # the headers still count what is forwarded
    # the trigger counts only what follows the compaction item
    small_after = [*old, COMPACTION, user("new")]
    quiet = plan_compaction(
        small_after,
        RV,
        OffloadSettings(max_total_tokens=1000, max_tool_message_tokens=100),
        counter=COUNTER,
        namespace=NS,
    )
    assert quiet.items == small_after and not quiet.offloads


def test_clearable_calls_spare_the_recent_and_the_excluded():
    items = [call(1), output(1, "a"), call(2, "read"), output(2, "b"), call(3), output(3, "c"), call(4), output(4, "d")]
    ctx = ProviderContext(clears_tool_results=True, keep_tool_uses=2, exclude_tools=frozenset({"read"}))
    assert clearable_calls(items, RV, ctx) == {"c1"}
    assert clearable_calls(items, RV, ProviderContext()) == set()
    assert clearable_calls(items, RV, ProviderContext(clears_tool_results=True, keep_tool_uses=0)) == {
        "c1",
        "c2",
        "c3",
        "c4",
    }


def test_compaction_leaves_to_the_clear_edit_what_it_may_clear():
    items = [
        user("go"),
        call(1),
        output(1, big()),
        call(2, "read"),
        output(2, big()),
        call(3),
        output(3, big()),
        call(4),
        output(4, big()),
        user("last"),
    ]
    settings = OffloadSettings(max_total_tokens=1000, max_tool_message_tokens=100)
    ctx = ProviderContext(clears_tool_results=True, keep_tool_uses=2, exclude_tools=frozenset({"read"}))
    plan = plan_compaction(items, RV, settings, counter=COUNTER, namespace=NS, provider=ctx)
    compacted = {
        i
        for i, item in enumerate(plan.items)
        if item.get("type") == "function_call_output" and is_marker(item["output"])
    }
    assert compacted == {4, 6, 8}  # c2 (excluded), c3 and c4 (the 2 kept); c1 is the provider's to clear
    assert (
        len(plan_compaction(items, RV, settings, counter=COUNTER, namespace=NS).offloads) == 4
    )  # without the edit: all


# Codex CLI's local compaction: the summary user message it builds (codex-rs/core/templates/compact/summary_prefix.md)
CODEX_SUMMARY = (
    CLIENT_SUMMARY_PREFIXES[0] + " You also have access to the state of the tools that were used by "
    "that language model. [...] use the information in this summary to assist with your own analysis:\n"
    "steps 1-3 done"
)


def codex_summary(view_kind="responses"):
    if view_kind == "chat":
        return user(CODEX_SUMMARY)
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": CODEX_SUMMARY}]}


def test_client_summary_end_is_after_the_newest_client_summary():
    first, second = codex_summary(), codex_summary()
    items = [user("task"), first, call(1), output(1, "x"), second, user("go on")]
    assert client_summary_end(items, RV) == 5  # the newest one
    assert client_summary_end(items[:4], RV) == 2
    assert client_summary_end([user("task"), call(1)], RV) == 0
    assert client_summary_end([user("task"), call(1)], RV, start=1) == 1
    assert client_summary_end([user("a"), user(CODEX_SUMMARY)], CHAT_VIEW) == 2
    assert client_summary_end([{"role": "user", "content": [{"type": "text", "text": CODEX_SUMMARY}]}], MV) == 1
    # only a user message: the same text from the model, or inside a tool result, is no boundary
    said = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": CODEX_SUMMARY}]}
    assert client_summary_end([user("task"), said, call(1), output(1, CODEX_SUMMARY)], RV) == 0
    # nor a user message that merely quotes it later on
    assert client_summary_end([user("task"), user("see: " + CODEX_SUMMARY)], RV) == 0


def test_claude_codes_compaction_summary_is_a_boundary_too():
    claude = {
        "role": "user",
        "content": [
            {
                "type": "text",
                "text": CLIENT_SUMMARY_PREFIXES[1] + " The summary below "
                "covers the earlier portion of the conversation.\n\nSummary: ...",
            }
        ],
    }
    items = [{"role": "user", "content": "task"}, claude, {"role": "user", "content": "go on"}]
    assert client_summary_end(items, MV) == 2


def test_no_summary_folds_a_client_summary_with_what_follows_it():
    """After Codex compacted, its history is [instructions, context, recent user messages, the
    summary, new work]: the proxy summarises only the new work, the rest stays verbatim, in place."""
    kept = [
        {"role": "developer", "content": "d"},
        user("<environment_context/>"),
        user("Run six steps."),
        codex_summary(),
    ]
    work = [x for k in range(4, 12) for x in (call(k), output(k, "word " * 120))]
    items = [*kept, *work]
    head, tail = cp.split(items, RV, keep_recent=2)
    assert head == len(kept) and tail == len(items) - 2
    d = cp.decide(items, RV, OffloadSettings(max_total_tokens=500), counter=COUNTER, prior=None)
    assert d.action == "summarize" and d.head == len(kept)
    assembled = cp.assemble(items, RV, d.head, cut=d.cut, summary=RV.summary_item("S"))
    assert assembled[: len(kept)] == kept and assembled[len(kept)] == RV.summary_item("S")
    # without the client summary the same history is summarised from after the task (its first user message)
    plain = [*kept[:3], *work]
    assert cp.decide(plain, RV, OffloadSettings(max_total_tokens=500), counter=COUNTER, prior=None).head == 2
    # and nothing is summarised while the work after the client summary stays small
    assert (
        cp.decide([*kept, *work[:2]], RV, OffloadSettings(max_total_tokens=500), counter=COUNTER, prior=None).action
        == "none"
    )


def test_a_provider_compaction_item_after_a_client_summary_wins():
    items = [user("task"), codex_summary(), user("a"), COMPACTION, *(user(f"new {k}") for k in range(6))]
    assert cp.split(items, RV, keep_recent=2) == (4, len(items) - 2)
    items = [user("task"), COMPACTION, user("a"), codex_summary(), *(user(f"new {k}") for k in range(6))]
    assert cp.split(items, RV, keep_recent=2) == (4, len(items) - 2)


@pytest.mark.parametrize("fmt", ["chat", "responses", "messages"])
def test_a_turn_planned_on_an_earlier_turns_counts_plans_what_a_plan_from_the_start_does(fmt, monkeypatch):
    """The next turn of a conversation, parsed anew, takes the counts of the items its previous
    turn counted (`TokenCounter.recall`): the same plan, byte for byte, as a worker that never
    saw the conversation makes."""
    from proxy.core import tokens
    from proxy.formats.messages import body_from_chat
    from proxy.formats.responses import items_from_chat

    def items(n: int) -> tuple[list, object]:
        chat = json.loads(json.dumps(agent_history(steps=40, lines=60)[:n]))
        if fmt == "chat":
            return chat, VIEW
        if fmt == "responses":
            return items_from_chat(chat), RESPONSES.view
        return body_from_chat(chat, model="claude-sonnet-4-5")["messages"], MESSAGES.view

    settings = OffloadSettings(max_total_tokens=3000)
    monkeypatch.setattr(tokens, "_recent", tokens._RecentCounts(tokens.RECENT_HISTORIES, tokens.RECENT_BYTES))
    first, view = items(70)
    plan_compaction(first, view, settings, counter=COUNTER.for_request(), namespace=NS)
    second, _ = items(76)
    counter = COUNTER.for_request()
    resumed = plan_compaction(second, view, settings, counter=counter, namespace=NS)
    assert counter._found is not None  # it went on from the earlier turn's counts
    monkeypatch.setattr(tokens, "_recent", tokens._RecentCounts(tokens.RECENT_HISTORIES, tokens.RECENT_BYTES))
    whole = plan_compaction(items(76)[0], view, settings, counter=COUNTER.for_request(), namespace=NS)
    assert json.dumps(resumed.items) == json.dumps(whole.items) and resumed.offloads == whole.offloads
    assert (resumed.tokens_before, resumed.tokens_after, resumed.refs) == (
        whole.tokens_before,
        whole.tokens_after,
        whole.refs,
    )
