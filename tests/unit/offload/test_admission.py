"""The credential check is the caller gate's admission, settled by the step about to store, never
made by a store write: an invented key stores nothing, a known-good key is asked once, a
request that stores nothing asks nothing."""

from __future__ import annotations

import asyncio

import pytest

from proxy.core.compaction import Offload
from proxy.offload.records import RefStore
from proxy.offload.tenant import ADMITTED, Admission, CredentialCheck, CredentialRejected, Quota
from proxy.store.memory import MemoryStore


def _refs(store: MemoryStore, admission: Admission) -> RefStore:
    return RefStore(store, "ns", 600, quota=Quota(store, "scope", limit=0, ttl=600, admission=admission))


def _offload(text: str) -> Offload:
    return Offload(f"ref-{len(text)}", "tool", text, 10)


def _asking(status: int | None) -> tuple[Admission, list[int]]:
    asked: list[int] = []

    async def ask() -> int | None:
        asked.append(1)
        return status

    return Admission(CredentialCheck(), "scope", ask), asked


def test_an_invented_key_stores_nothing():
    async def run() -> None:
        store = MemoryStore()
        admission, asked = _asking(401)
        refs = _refs(store, admission)
        await refs.admit()
        with pytest.raises(CredentialRejected):
            await refs.save([_offload("x" * 50)], [])
        assert asked == [1]
        assert (await refs.load("ref-50")) is None
        await refs.admit()  # the refusal is remembered: not asked again
        assert asked == [1]

    asyncio.run(run())


def test_a_known_good_key_is_asked_once():
    async def run() -> None:
        store = MemoryStore()
        admission, asked = _asking(200)
        refs = _refs(store, admission)
        for text in ("a" * 40, "b" * 60):
            await refs.admit()
            assert await refs.save([_offload(text)], []) == {f"ref-{len(text)}"}
        assert asked == [1]

    asyncio.run(run())


def test_a_request_storing_nothing_asks_nothing():
    async def run() -> None:
        admission, asked = _asking(200)
        refs = _refs(MemoryStore(), admission)
        assert await refs.save([], []) == set()
        assert asked == []

    asyncio.run(run())


def test_a_write_not_admitted_first_is_refused_without_asking():
    async def run() -> None:
        admission, asked = _asking(200)
        with pytest.raises(CredentialRejected):  # the store handle never asks the upstream itself
            await _refs(MemoryStore(), admission).save([_offload("c" * 30)], [])
        assert asked == []

    asyncio.run(run())


def test_an_unanswered_ask_admits_nothing_and_is_asked_again():
    async def run() -> None:
        admission, asked = _asking(None)
        assert not await admission.settle() and not admission.admitted
        assert not await admission.settle() and asked == [1, 1]

    asyncio.run(run())


def test_a_caller_the_proxy_vouches_for_is_admitted_without_a_check():
    async def run() -> None:
        assert ADMITTED.admitted and await ADMITTED.settle()
        assert await _refs(MemoryStore(), ADMITTED).save([_offload("d" * 20)], []) == {"ref-20"}

    asyncio.run(run())
