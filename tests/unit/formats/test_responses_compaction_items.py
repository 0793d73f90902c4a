"""The proxy's compaction tokens: stored records, and their replacement in a Responses input."""

import pytest

from proxy.core.compaction_token import PREFIX, TokenError
from proxy.errors import ProxyError
from proxy.formats.responses import RESPONSES
from proxy.formats.responses.compaction_items import replace_tokens
from proxy.http.error_map import status_of
from proxy.offload.records import CompactionRecords
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore
from proxy.turn._context_tokens import begin

pytestmark = pytest.mark.anyio
VIEW = RESPONSES.view
SUMMARY = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "[summary] ref=abcdef12"}]}


def user(text):
    return {"type": "message", "role": "user", "content": text}


def compaction(content):
    return {"type": "compaction", "id": "cmp_1", "encrypted_content": content}


@pytest.fixture
def store(tmp_path):
    return SQLiteStore(tmp_path)


def records(store, namespace="ns-a", secret=None):
    return CompactionRecords(store, namespace, 3600, sealer=Sealer(secret), secret=secret)


async def test_a_record_round_trips_and_is_stored_once(store):
    mine = records(store, secret="k" * 32)
    token = await mine.save([SUMMARY])
    assert token.startswith(PREFIX)
    assert await mine.save([SUMMARY]) == token
    assert await mine.load(token) == [SUMMARY]
    with pytest.raises(TokenError):
        await records(store, "ns-b", secret="k" * 32).load(token)


async def test_the_newest_token_is_replaced_and_what_precedes_it_dropped(store):
    mine = records(store)
    token = await mine.save([SUMMARY])
    system = {"type": "message", "role": "developer", "content": "rules"}
    items = [system, user("old"), compaction(token), user("next")]
    out = await replace_tokens(items, VIEW, mine, emulating=True)
    assert out == [system, SUMMARY, user("next")]


async def test_no_compaction_item_changes_nothing(store):
    assert await replace_tokens([user("a")], VIEW, records(store), emulating=True) is None


async def test_a_provider_token_is_relayed_natively_and_refused_when_emulating(store):
    items = [user("a"), compaction("gAAAAABprovider"), user("b")]
    assert await replace_tokens(items, VIEW, records(store), emulating=False) is None
    with pytest.raises(ProxyError) as refused:
        await replace_tokens(items, VIEW, records(store), emulating=True)
    assert status_of(refused.value) == 400 and refused.value.param == "input[1].encrypted_content"


async def test_our_older_token_before_a_provider_one_is_dropped_when_relaying(store):
    token = await records(store).save([SUMMARY])
    items = [compaction(token), user("a"), compaction("gAAAAABprovider"), user("b")]
    out = await replace_tokens(items, VIEW, records(store), emulating=False)
    assert out == items[1:]


@pytest.mark.parametrize("emulating", [True, False])
async def test_another_namespaces_token_a_forged_one_and_an_expired_one_are_400(store, emulating):
    theirs = await records(store, "ns-b").save([SUMMARY])
    for token, why in [
        (theirs, "not issued to this credential"),
        (PREFIX + "AAAA", "not a compaction token"),
        (PREFIX[:-1] + "7:x", "version"),
    ]:
        with pytest.raises(ProxyError, match=why):
            await replace_tokens([compaction(token)], VIEW, records(store), emulating=emulating)
    mine = records(store)
    token = await mine.save([SUMMARY])
    await store.delete(mine._key(token_id(mine, token)))
    with pytest.raises(ProxyError, match="no longer holds"):
        await replace_tokens([compaction(token)], VIEW, mine, emulating=emulating)


def token_id(mine, token):
    from proxy.core.compaction_token import read_token

    return read_token(token, mine.namespace, mine.secret)


async def test_begin_takes_context_management_out_only_when_emulating(store):
    body = {"model": "m", "input": [user("a")], "context_management": [{"type": "compaction"}]}
    relayed = await begin(body, body["input"], fmt=RESPONSES, emulating=False, records=records(store))
    assert relayed.body is body and relayed.asked is None and not relayed.changed
    emulated = await begin(body, body["input"], fmt=RESPONSES, emulating=True, records=records(store))
    assert "context_management" not in emulated.body and emulated.asked == [{"type": "compaction"}]
    assert emulated.changed


@pytest.mark.parametrize("emulating", [True, False])
async def test_a_token_outside_a_compaction_item_is_a_400_and_in_text_is_content(store, emulating):
    mine = records(store)
    token = await mine.save([SUMMARY])
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": token}
    nested = {
        "type": "function_call_output",
        "call_id": "c",
        "output": [{"type": "compaction", "encrypted_content": token}],
    }
    for item, param in [(reasoning, "input[1].encrypted_content"), (nested, "input[1].output[0].encrypted_content")]:
        body = {"model": "m", "input": [user("a"), item, user("b")]}
        with pytest.raises(ProxyError) as refused:
            await begin(body, RESPONSES.history(body), fmt=RESPONSES, emulating=emulating, records=mine)
        assert status_of(refused.value) == 400 and refused.value.param == param
    body = {"model": "m", "input": [user(f"pasted {token}"), compaction(token.upper())]}
    with pytest.raises(ProxyError, match="exact spelling"):  # a compaction item: read, and not canonical
        await begin(body, RESPONSES.history(body), fmt=RESPONSES, emulating=emulating, records=mine)
    body = {"model": "m", "input": [user(f"pasted {token}"), user("b")]}
    begun = await begin(body, RESPONSES.history(body), fmt=RESPONSES, emulating=emulating, records=mine)
    assert begun.items == body["input"]  # text: content, as sent


async def test_a_chat_message_carrying_a_token_is_a_400(store):
    from proxy.formats.chat import CHAT

    token = await records(store).save([SUMMARY])
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "x", "encrypted_content": token}]}],
    }
    with pytest.raises(ProxyError) as refused:
        await begin(body, CHAT.history(body), fmt=CHAT, emulating=False, records=records(store))
    assert refused.value.param == "messages[0].content[0].encrypted_content"


async def test_a_large_input_is_checked_after_its_token_is_replaced_off_the_loop(store, monkeypatch):
    """The check that what a record brought holds no token walks the whole input: for a large
    body it runs in the CPU pool (1.5 M empty objects beside a token held /healthz 2-4 s)."""
    import json
    import threading

    from proxy.turn import _context_tokens as emulation_request

    threads: list[str] = []
    stray = emulation_request._stray

    def spy(value, **kwargs):
        threads.append(threading.current_thread().name)
        return stray(value, **kwargs)

    monkeypatch.setattr(emulation_request, "_stray", spy)
    mine = records(store)
    token = await mine.save([SUMMARY])
    body = {
        "model": "m",
        "input": [compaction(token), user("x" * (2 << 20)), {"type": "reasoning", "encrypted_content": "g"}],
    }
    raw = json.dumps(body).encode()
    begun = await begin(body, body["input"], fmt=RESPONSES, emulating=False, records=mine, raw=raw)
    assert begun.replaced and begun.items[0] == SUMMARY
    assert len(threads) == 2 and all(name.startswith("offload-cpu") for name in threads), threads
