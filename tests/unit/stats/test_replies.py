"""Which session a stored Responses answer belongs to (`proxy.stats.replies`)."""

from __future__ import annotations

import pytest

from proxy.stats.replies import MAX_ID_CHARS, Replies
from proxy.store.memory import MemoryStore
from proxy.store.sealing import Sealer

pytestmark = pytest.mark.anyio
NS = "n" * 32


async def test_a_noted_link_is_found_before_the_store_has_it():
    """The turn continuing from an answer can come before its link is written to the store."""
    replies, store = Replies(), MemoryStore()
    replies.note(NS, "resp_1", session="s-1")
    assert await replies.find(store, NS, "resp_1", sealer=Sealer(None)) == "s-1"
    assert await Replies().find(store, NS, "resp_1", sealer=Sealer(None)) is None  # another worker: the store only


async def test_a_remembered_link_is_found_by_another_worker():
    store = MemoryStore()
    await Replies().remember(store, NS, "resp_2", session="s-2", ttl=60, sealer=Sealer(None))
    assert await Replies().find(store, NS, "resp_2", sealer=Sealer(None)) == "s-2"
    assert await Replies().find(store, "o" * 32, "resp_2", sealer=Sealer(None)) is None  # another tenant's


async def test_bounded_and_long_ids_ignored():
    replies = Replies(max_known=2)
    for n in range(3):
        replies.note(NS, f"resp_{n}", session=f"s{n}")
    store = MemoryStore()
    assert [await replies.find(store, NS, f"resp_{n}", sealer=Sealer(None)) for n in range(3)] == [None, "s1", "s2"]
    replies.note(NS, "r" * (MAX_ID_CHARS + 1), session="x")
    assert await replies.find(store, NS, "r" * (MAX_ID_CHARS + 1), sealer=Sealer(None)) is None
