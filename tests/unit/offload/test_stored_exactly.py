"""Compaction records and offloaded items come back exactly as they went in: a lone surrogate
included, sealed or not; a large one is written and read in the CPU pool."""

from __future__ import annotations

import threading

import pytest

from proxy.offload.compaction_records import CompactionRecords
from proxy.offload.cpu_pool import LARGE_CHARS
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore

pytestmark = pytest.mark.anyio
LONE = "\ud83d"


@pytest.mark.parametrize("secret", [None, "correct horse"])
@pytest.mark.parametrize("size", [10, LARGE_CHARS + 10])
async def test_a_record_reads_back_exactly(tmp_path, secret, size, monkeypatch):
    threads: set[str] = set()

    def spy_seal(self, value, store_key, real=Sealer.seal):
        threads.add(threading.current_thread().name)
        return real(self, value, store_key)

    monkeypatch.setattr(Sealer, "seal", spy_seal)
    store = SQLiteStore(tmp_path)
    records = CompactionRecords(store, "n" * 32, 60, sealer=Sealer(secret), secret=secret)
    items = [
        {"role": "user", "content": f"fix {LONE} " + "x" * size},
        {"role": "assistant", "content": f"\udc00 é 😀 {LONE}"},
        {"n": 2**70, "f": 1.5},
    ]
    token = await records.save(items)
    assert await records.save(items) == token  # the same items, the same token
    assert await records.load(token) == items
    here = threading.current_thread().name
    assert (
        threads == ({here} if size < LARGE_CHARS else {t for t in threads if t.startswith("offload-cpu")}) and threads
    )
    await store.close()


async def test_a_large_offloaded_item_is_opened_off_the_loop_and_reads_back_exactly(tmp_path, monkeypatch):
    from proxy.core.compaction import Offload
    from proxy.offload import refs as refs_module
    from proxy.offload.refs import RefStore

    threads: list[str] = []
    real = refs_module.decode_item

    def spy(ref, plain):
        threads.append(threading.current_thread().name)
        return real(ref, plain)

    monkeypatch.setattr(refs_module, "decode_item", spy)
    store = SQLiteStore(tmp_path)
    refs = RefStore(store, "n" * 32, 60, sealer=Sealer("k"))
    small, large = f"fix {LONE} é", "".join(f"{i} {LONE}\n" for i in range(200_000))  # hard to compress
    await refs.save(
        [Offload("rsmall", "tool_result", small, 3), Offload("rlarge", "tool_result", large, 9)], ["rsmall", "rlarge"]
    )
    assert (await refs.load("rsmall")).text == small and (await refs.load("rlarge")).text == large
    assert threads[0] == threading.current_thread().name and threads[1].startswith("offload-cpu")
    await store.close()
