"""Messages `compaction` blocks settled before a request goes on: every block of every message,
relayed or emulated; a token of the proxy's is never forwarded."""

import pytest

from proxy.core.compaction import PREFIX
from proxy.errors import ProxyError
from proxy.formats.messages._emulation import replace_compaction_blocks
from proxy.formats.responses import RESPONSES
from proxy.formats.responses._compaction import replace_tokens
from proxy.offload.records import CompactionRecords
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore

pytestmark = pytest.mark.anyio
SUMMARY = [{"role": "user", "content": "[summary] ref=abcdef12"}, {"role": "assistant", "content": "ok"}]


@pytest.fixture
def records(tmp_path):
    return CompactionRecords(SQLiteStore(tmp_path), "ns", 3600, sealer=Sealer(None), api="messages")


def block(token=None, content="s"):
    return {"type": "compaction", "content": content, **({"encrypted_content": token} if token else {})}


def holds_ours(messages) -> bool:
    return PREFIX in repr(messages)


@pytest.mark.parametrize("emulating", [True, False])
async def test_an_older_block_of_ours_before_a_failed_one_is_expanded(records, emulating):
    token = await records.save(SUMMARY)
    messages = [
        {"role": "user", "content": "old"},
        {"role": "assistant", "content": [block(token), {"type": "text", "text": "a"}]},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [block(content=None)]},
        {"role": "user", "content": "next"},
    ]
    out = await replace_compaction_blocks(messages, records, emulating=emulating)
    assert not holds_ours(out) and out[:2] == SUMMARY
    assert out[2] == {"role": "assistant", "content": [{"type": "text", "text": "a"}]}
    failed_kept = [m for m in out if m.get("content") == [block(content=None)]]
    assert bool(failed_kept) is (not emulating)  # a no-op: dropped for an emulated upstream, the provider's own


@pytest.mark.parametrize("emulating", [True, False])
async def test_two_blocks_of_ours_in_one_message_expand_the_newest(records, emulating):
    old, new = await records.save([{"role": "user", "content": "older"}]), await records.save(SUMMARY)
    messages = [
        {"role": "assistant", "content": [block(old), block(new), {"type": "text", "text": "a"}]},
        {"role": "user", "content": "next"},
    ]
    out = await replace_compaction_blocks(messages, records, emulating=emulating)
    assert out == [
        *SUMMARY,
        {"role": "assistant", "content": [{"type": "text", "text": "a"}]},
        {"role": "user", "content": "next"},
    ]


async def test_relayed_an_older_block_of_ours_before_the_providers_is_dropped(records):
    token = await records.save(SUMMARY)
    provider = block("EpYBnative==", "their summary")
    messages = [
        {"role": "assistant", "content": [block(token)]},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [block(token), {"type": "text", "text": "x"}]},
        {"role": "assistant", "content": [provider]},
        {"role": "user", "content": "next"},
    ]
    out = await replace_compaction_blocks(messages, records, emulating=False)
    assert out == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "text", "text": "x"}]},
        {"role": "assistant", "content": [provider]},
        {"role": "user", "content": "next"},
    ]
    emulated = await replace_compaction_blocks(messages, records, emulating=True)
    assert emulated == [
        {"role": "user", "content": [{"type": "text", "text": "their summary"}]},
        {"role": "user", "content": "next"},
    ]


async def test_a_record_holding_a_block_of_ours_is_expanded_in_turn(records):
    inner = await records.save(SUMMARY)
    # written directly, as a record made before records were kept free of tokens
    content = (
        b'[{"role":"assistant","content":[{"type":"compaction","content":"s","encrypted_content":"%s"}]}]'
        % inner.encode()
    )
    from proxy.core import compaction as compaction_token

    rid = compaction_token.record_id_for("ns", content)
    key = records._key(rid.hex())
    await records.store.put(key, records.sealer.seal(content, key), 3600)
    outer = compaction_token.make_token(rid, "ns", None, api="messages")
    out = await replace_compaction_blocks(
        [{"role": "assistant", "content": [block(outer)]}, {"role": "user", "content": "n"}], records, emulating=True
    )
    assert out == [*SUMMARY, {"role": "user", "content": "n"}]


async def test_a_record_may_not_hold_a_token(records):
    token = await records.save(SUMMARY)
    with pytest.raises(ValueError, match="may not hold"):
        await records.save([{"role": "assistant", "content": [block(token)]}])
    # a token in text is content
    assert await records.save([{"role": "user", "content": f"pasted {token}"}])


async def test_the_records_developer_item_the_client_sends_again_goes_once(tmp_path):
    responses = CompactionRecords(SQLiteStore(tmp_path), "ns", 3600, sealer=Sealer(None))
    dev = {"type": "message", "role": "developer", "content": "rules"}
    other = {"type": "message", "role": "system", "content": "be brief"}
    task = {"type": "message", "role": "user", "content": "task"}
    token = await responses.save([dev, other, task])
    item = {"type": "compaction", "encrypted_content": token}
    resent = {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]}
    for items, expected in [
        ([item, task], [dev, other, task, task]),  # sent alone: the record's instructions stand
        ([resent, item], [resent, other, task]),  # re-sent before it: once
        ([item, resent], [other, task, resent]),  # re-sent after it (Codex, before its next turn): once
    ]:
        assert await replace_tokens(items, RESPONSES.view, responses, emulating=True) == expected


async def test_a_failed_block_alone_is_dropped_when_emulating(records):
    messages = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": [block(content=None)]},
        {"role": "user", "content": "b"},
    ]
    assert await replace_compaction_blocks(messages, records, emulating=False) is None
    assert await replace_compaction_blocks(messages, records, emulating=True) == [messages[0], messages[2]]


async def test_a_malformed_older_block_is_a_400(records):
    messages = [{"role": "assistant", "content": [block(content=7)]}, {"role": "assistant", "content": [block()]}]
    with pytest.raises(ProxyError) as refused:
        await replace_compaction_blocks(messages, records, emulating=False)
    assert refused.value.param == "messages[0].content[0]"
