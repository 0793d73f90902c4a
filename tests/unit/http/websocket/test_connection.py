"""The responses a WebSocket connection holds: continuations expanded into the whole history,
the oldest forgotten first, an id not held with store false refused."""

from __future__ import annotations

import pytest

from proxy.errors import ProxyError
from proxy.http.error_map import status_of
from proxy.http.websocket.connection import Budget, ConnectionChain


def user(text: str) -> dict:
    return {"type": "message", "role": "user", "content": text}


def answer(text: str) -> dict:
    return {
        "id": f"msg_{text}",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text}],
    }


def test_a_continuation_is_the_whole_history_without_previous_response_id():
    chain = ConnectionChain(4, 10_000)
    chain.hold("r1", {"input": "one", "store": False}, [answer("a1")], size=10)
    body = chain.expand({"input": [user("two")], "store": False, "previous_response_id": "r1", "model": "m"})
    assert body == {"input": [user("one"), answer("a1"), user("two")], "store": False, "model": "m"}
    chain.hold("r2", body, [answer("a2")], size=10)
    again = chain.expand({"input": "three", "previous_response_id": "r2", "store": False})
    assert [i.get("content") if i["role"] == "user" else i["id"] for i in again["input"]] == [
        "one",
        "msg_a1",
        "two",
        "msg_a2",
        "three",
    ]
    assert again["input"][0] is body["input"][0]  # items are shared, not copied


def test_the_oldest_is_forgotten_first():
    chain = ConnectionChain(2, 10_000)
    for name in ("r1", "r2", "r3"):
        chain.hold(name, {"input": name}, [], size=10)
    assert "r1" not in chain and "r2" in chain and "r3" in chain and len(chain) == 2
    chain.expand({"input": "x", "previous_response_id": "r2"})  # used: now the most recent
    chain.hold("r4", {"input": "r4"}, [], size=10)
    assert "r3" not in chain and "r2" in chain


def test_an_id_not_held_with_store_false_is_previous_response_not_found():
    with pytest.raises(ProxyError) as refused:
        ConnectionChain(2, 10_000).expand({"input": "x", "store": False, "previous_response_id": "resp_x"})
    assert (status_of(refused.value), refused.value.code, refused.value.param) == (
        400,
        "previous_response_not_found",
        "previous_response_id",
    )
    assert "resp_x" in refused.value.message


@pytest.mark.parametrize("previous", ["resp_x", 7, None])
def test_an_id_not_held_otherwise_goes_on_as_sent(previous):
    body = {"input": "x", "previous_response_id": previous}
    assert ConnectionChain(2, 10_000).expand(body) is body


def test_a_non_string_id_with_store_false_is_refused_too():
    with pytest.raises(ProxyError):
        ConnectionChain(2, 10_000).expand({"input": "x", "store": False, "previous_response_id": ["r"]})


TRIGGER = {"type": "compaction_trigger"}
ITEM = {"type": "compaction", "id": "cmp_1", "encrypted_content": "token"}


def test_a_response_to_a_compaction_trigger_is_held_without_its_trigger():
    chain = ConnectionChain(4, 10_000)
    chain.hold("r1", {"input": [user("one"), answer("a1"), TRIGGER], "store": False}, [ITEM], size=100)
    body = chain.expand({"input": [user("two")], "store": False, "previous_response_id": "r1"})
    assert body["input"] == [user("one"), answer("a1"), ITEM, user("two")]  # the item then the new items


@pytest.mark.parametrize(
    "kept", [[TRIGGER, user("one")], [{"type": ["compaction_trigger"]}], [{"type": None}], ["compaction_trigger"]]
)
def test_only_a_trailing_trigger_is_left_out(kept):
    chain = ConnectionChain(4, 10_000)
    chain.hold("r1", {"input": kept, "store": False}, [], size=100)
    assert chain.expand({"input": [], "store": False, "previous_response_id": "r1"})["input"] == kept


def test_held_responses_hold_at_most_max_bytes_together():
    chain = ConnectionChain(16, 1000)
    for name in ("r1", "r2", "r3"):
        chain.hold(name, {"input": name}, [], size=400)
    assert "r1" not in chain and "r2" in chain and "r3" in chain and chain.bytes == 800
    chain.hold("r4", {"input": "r4"}, [], size=900)  # the newest stays, the others go
    assert [name in chain for name in ("r2", "r3", "r4")] == [False, False, True] and chain.bytes == 900
    assert chain.size_of("r4") == 900 and chain.size_of("r2") == 0 and chain.size_of(["r4"]) == 0


def test_a_response_larger_than_max_bytes_alone_is_not_held():
    chain = ConnectionChain(16, 1000)
    chain.hold("small", {"input": "s"}, [], size=10)
    assert chain.hold("huge", {"input": "h"}, [], size=1001) is False
    assert (
        "huge" not in chain and "small" in chain and chain.bytes == 10 and len(chain) == 1
    )  # nothing forgotten for it


def test_the_workers_connections_hold_at_most_its_budget_together():
    """1,024 connections of --max-body-bytes each would hold 64 GiB: the worker's budget bounds them,
    a connection forgetting its own oldest first, a response that still does not fit not held."""
    budget = Budget(1000)
    one, two = ConnectionChain(16, 800, budget), ConnectionChain(16, 800, budget)
    assert one.hold("a1", {"input": "a"}, [], size=300) and one.hold("a2", {"input": "a"}, [], size=300)
    assert two.hold("b1", {"input": "b"}, [], size=300) and budget.used == 900
    assert two.hold("b2", {"input": "b"}, [], size=300)  # b1 forgotten for it: only two's own
    assert ("b1" in two, "b2" in two, "a1" in one, "a2" in one, budget.used) == (False, True, True, True, 900)
    assert not two.hold("b3", {"input": "b"}, [], size=500)  # two holds nothing else to forget
    assert len(two) == 0 and budget.used == 600
    one.clear()
    assert budget.used == 0 and len(one) == 0


def test_holding_an_id_again_replaces_it():
    chain = ConnectionChain(16, 1000)
    chain.hold("r1", {"input": "a"}, [], size=600)
    chain.hold("r1", {"input": "b"}, [], size=600)
    assert len(chain) == 1 and chain.bytes == 600
