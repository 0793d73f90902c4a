"""Threshold compaction fields read when emulating, the betas the upstream is not sent, and the
Messages compaction blocks of a request (proxy.formats.*.threshold, proxy.formats.messages._emulation)."""

import pytest

from proxy.core.compaction import Threshold
from proxy.errors import ProxyError
from proxy.formats.context_threshold import MAX_ENTRIES
from proxy.formats.messages._emulation import (
    ANTHROPIC_DEFAULT_TRIGGER,
    messages_threshold,
    replace_compaction_blocks,
    without_emulated_betas,
)
from proxy.formats.responses._compaction import responses_threshold
from proxy.http.error_map import status_of
from proxy.offload.records import CompactionRecords
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore


def test_responses_threshold_reads_one_compaction_entry():
    assert responses_threshold(None) is None
    assert responses_threshold([]) is None
    assert responses_threshold([{"type": "compaction", "compact_threshold": 2000}]) == Threshold(2000)
    assert responses_threshold([{"type": "compaction"}]) == Threshold(None)  # the proxy's own trigger
    assert responses_threshold([{"type": "compaction", "compact_threshold": 2**31 - 1}]).tokens == 2**31 - 1
    with pytest.raises(ProxyError):
        responses_threshold([{"type": "compaction", "compact_threshold": 2**31}])


@pytest.mark.parametrize("value", ["2000", 2000.0, True, False, -1, 0, 999, [2000], {"n": 2000}])
def test_a_bad_compact_threshold_is_a_400_naming_it(value):
    with pytest.raises(ProxyError) as caught:
        responses_threshold([{"type": "compaction", "compact_threshold": value}])
    assert status_of(caught.value) == 400 and caught.value.param == "context_management[0].compact_threshold"


def test_entries_are_bounded():
    with pytest.raises(ProxyError) as caught:
        responses_threshold([{"type": "compaction"}] * (MAX_ENTRIES + 1))
    assert caught.value.param == "context_management"
    with pytest.raises(ProxyError) as caught:
        messages_threshold({"edits": [{"type": "clear_thinking_20251015"}] * 10_000})
    assert caught.value.param == "context_management.edits"


def test_messages_threshold_reads_the_compact_edit_and_its_defaults():
    assert messages_threshold(None) is None and messages_threshold({}) is None
    assert messages_threshold({"edits": [{"type": "clear_tool_uses_20250919"}]}) is None  # another emulation's
    assert messages_threshold({"edits": [{"type": "compact_20260112"}]}) == Threshold(ANTHROPIC_DEFAULT_TRIGGER)
    edit = {
        "type": "compact_20260112",
        "trigger": {"type": "input_tokens", "value": 5000},
        "pause_after_compaction": True,
        "instructions": "Only decisions.",
    }
    assert messages_threshold({"edits": [edit]}) == Threshold(5000, True, "Only decisions.")


@pytest.mark.parametrize(
    "field, value, param",
    [
        ("trigger", {"type": "input_tokens", "value": "5000"}, "trigger.value"),
        ("trigger", {"type": "input_tokens"}, "trigger.value"),
        ("trigger", {"type": "tool_uses", "value": 5000}, "trigger"),
        ("trigger", 5000, "trigger"),
        ("pause_after_compaction", 1, "pause_after_compaction"),
        ("instructions", ["x"], "instructions"),
        ("instructions", "  ", "instructions"),
    ],
)
def test_a_bad_compact_edit_is_a_400_naming_the_field(field, value, param):
    with pytest.raises(ProxyError) as caught:
        messages_threshold({"edits": [{"type": "compact_20260112", field: value}]})
    assert caught.value.param == f"context_management.edits[0].{param}"


def test_only_the_emulated_betas_are_left_out():
    headers = [
        (b"x-api-key", b"k"),
        (b"anthropic-beta", b"compact-2026-01-12, files-api-2025-04-14,context-management-2025-06-27"),
    ]
    assert without_emulated_betas(headers) == [(b"x-api-key", b"k"), (b"anthropic-beta", b"files-api-2025-04-14")]
    assert without_emulated_betas([(b"Anthropic-Beta", b"compact-2026-01-12")]) == []


# ---------------------------------------------------------------------------------------------- blocks


@pytest.fixture
def records(tmp_path):
    return CompactionRecords(SQLiteStore(tmp_path), "ns-a", 3600, sealer=Sealer(None))


def user(text):
    return {"role": "user", "content": text}


def holder(*blocks, role="assistant"):
    return {"role": role, "content": list(blocks)}


BLOCK = {"type": "compaction", "content": "Earlier: fixed.", "cache_control": {"type": "ephemeral"}}


@pytest.mark.anyio
async def test_a_block_becomes_text_and_the_messages_before_it_go(records):
    messages = [
        user("old"),
        holder({"type": "text", "text": "pre"}, BLOCK, {"type": "text", "text": "Done."}),
        user("next"),
    ]
    assert await replace_compaction_blocks(messages, records, emulating=True) == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Earlier: fixed.", "cache_control": {"type": "ephemeral"}}],
        },
        holder({"type": "text", "text": "pre"}, {"type": "text", "text": "Done."}),
        user("next"),
    ]
    in_user = [user("old"), holder({"type": "text", "text": "a"}, BLOCK, role="user")]
    assert await replace_compaction_blocks(in_user, records, emulating=True) == [
        holder(
            {"type": "text", "text": "a"},
            {"type": "text", "text": "Earlier: fixed.", "cache_control": {"type": "ephemeral"}},
            role="user",
        )
    ]
    assert await replace_compaction_blocks(messages, records, emulating=False) is None  # the provider reads it
    assert await replace_compaction_blocks([user("no block")], records, emulating=True) is None


@pytest.mark.anyio
async def test_a_token_of_ours_is_replaced_whichever_way_the_request_goes(records):
    kept = [
        {"role": "user", "content": [{"type": "text", "text": "task"}, {"type": "text", "text": "[summary] ref=x"}]}
    ]
    token = await records.save(kept)
    block = {"type": "compaction", "content": "[summary] ref=x", "encrypted_content": token}
    messages = [user("old"), holder(block, {"type": "text", "text": "Done."}), user("next")]
    for emulating in (True, False):
        assert await replace_compaction_blocks(messages, records, emulating=emulating) == [
            *kept,
            holder({"type": "text", "text": "Done."}),
            user("next"),
        ]


@pytest.mark.anyio
async def test_a_token_for_another_api_or_another_namespace_is_refused(records, tmp_path):
    token = await records.save([{"type": "message", "role": "user", "content": "responses item"}])
    block = {"type": "compaction", "content": "s", "encrypted_content": token}
    with pytest.raises(ProxyError, match="another API"):
        await replace_compaction_blocks([holder(block)], records, emulating=True)
    other = CompactionRecords(records.store, "ns-b", 3600, sealer=Sealer(None))
    with pytest.raises(ProxyError) as caught:
        await replace_compaction_blocks([holder(block)], other, emulating=True)
    assert status_of(caught.value) == 400 and caught.value.param == "messages[0].content[0]"
