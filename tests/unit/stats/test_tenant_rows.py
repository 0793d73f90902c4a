"""The admin's tenants table reads a bounded amount whatever the number of tenants: namespaces
are the clients' to make (a sub-tenant per X-Offload-Tenant value, a namespace per client key),
and it read the buckets of every namespace active that day on each refresh of the dashboard
(5,000 sub-tenants of one proxy key: 10 s per answer on Redis, the event loop held 2 s)."""

from __future__ import annotations

import time

import pytest

from proxy.stats import _reader as reader
from proxy.stats._counters import PriceTable, Turn, span_of
from proxy.stats._recorder import Recorder
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore

pytestmark = pytest.mark.anyio


class Reads:
    """A store that counts the hash keys read."""

    def __init__(self, inner) -> None:
        self.inner, self.keys = inner, 0

    async def hashes(self, keys):
        self.keys += len(keys)
        return await self.inner.hashes(keys)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def turn(ns: str, tokens: int, t: float) -> Turn:
    return Turn(
        namespace=ns,
        session=None,
        time=t,
        route="chat",
        model="gpt-4o",
        status=200,
        stream=False,
        tokens_before=tokens,
        tokens_after=tokens // 2,
        action="compact",
    )


async def test_the_table_lists_the_heaviest_tenants_and_reads_only_theirs(tmp_path):
    store = SQLiteStore(tmp_path)
    recorder = Recorder(PriceTable(None), retention=86400, max_queue=5000)
    recorder.start(store, Sealer(None))
    now = time.time()
    many = [f"{i:032x}" for i in range(3000)]
    for i, ns in enumerate(many):
        recorder.record(turn(ns, 100 + i, now))
    heavy = "f" * 32
    recorder.record(turn(heavy, 10**6, now))
    assert await recorder.flush() == 3001
    for window in ("1h", "24h", "7d", "30d"):
        span = span_of(window, now)
        counted = Reads(store)
        rows, more = await reader.tenant_rows(counted, span, {heavy: "big"})
        assert more is True and len(rows) == reader.MAX_TENANT_ROWS
        assert rows[0]["name"] == "big" and rows[0]["totals"]["requests"] == 1
        assert [r["tenant"] for r in rows[1:4]] == [many[2999], many[2998], many[2997]]
        assert counted.keys == reader.MAX_TENANT_ROWS * len(span.row_keys(heavy))
    few, more = await reader.tenant_rows(store, span_of("1h", now + 7200), {})
    assert few == [] and more is False  # nobody in that hour
    await recorder.stop()
    await store.close()
