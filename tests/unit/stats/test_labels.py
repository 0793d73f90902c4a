"""What the dashboard shows of a tenant and of its data: the label the recorder was told (a
client key's fingerprint; sealed at rest with an encryption key), and when the window's first
request was (the page's default window fits the data)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from proxy.stats import _reader as reader
from proxy.stats._counters import PriceTable, Turn, span_of
from proxy.stats._recorder import Recorder, label_key, turn_of
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore
from proxy.telemetry import RequestRecord

pytestmark = pytest.mark.anyio
A, B, C = "a" * 32, "b" * 32, "c" * 32


def turn(ns: str, t: float, label: str | None = None) -> Turn:
    return Turn(
        namespace=ns,
        session="s",
        time=t,
        route="chat",
        model="gpt-4o",
        status=200,
        stream=False,
        tokens_before=1000,
        tokens_after=400,
        action="compact",
        label=label,
    )


async def recorded(store, *turns: Turn, sealer: Sealer = Sealer(None)) -> Recorder:
    recorder = Recorder(PriceTable(), retention=86400)
    recorder.start(store, sealer)
    for t in turns:
        recorder.record(t)
    assert await recorder.flush() == len(turns)
    await recorder.stop()
    return recorder


def test_the_turn_carries_the_callers_label_but_never_lists_it():
    rec = RequestRecord("chat", "POST")
    rec.tokens_before, rec.tokens_after, rec.status = 100, 50, 200
    caller = SimpleNamespace(namespace=A, kind="client", label="sk-proj…AbCd")
    made = turn_of(rec, {"path": "/v1/chat/completions", "headers": [], "state": {"caller": caller}})
    assert made.label == "sk-proj…AbCd" and "label" not in made.row()


async def test_labels_are_stored_and_read_back_for_the_tenants_table(tmp_path):
    store = SQLiteStore(tmp_path)
    now = time.time()
    await recorded(store, turn(A, now, "sk-proj…AbCd"), turn(B, now, "sk-ant…WXYZ"), turn(C, now))
    rows, _ = await reader.tenant_rows(store, span_of("1h", now), {B: "team-b"})
    labels = {r["tenant"]: (r["name"], r["label"]) for r in rows}
    # the tenants-file name first, else the label, else the namespace's digits
    assert labels == {A: (A[:12], "sk-proj…AbCd"), B: ("team-b", "team-b"), C: (C[:12], C[:12])}
    await store.close()


async def test_a_label_is_sealed_at_rest_with_an_encryption_key(tmp_path):
    store = SQLiteStore(tmp_path)
    sealer = Sealer("an-encryption-key-for-tests")
    await recorded(store, turn(A, time.time(), "sk-proj…AbCd"), sealer=sealer)
    raw = await store.get(label_key(A))
    assert raw is not None and b"AbCd" not in raw
    assert await reader.tenant_labels(store, [A], {}, sealer=sealer) == {A: "sk-proj…AbCd"}
    assert await reader.tenant_labels(store, [A], {}, sealer=Sealer("another-key")) == {A: None}  # never garbage
    await store.close()


async def test_a_label_is_written_once_a_while_not_on_every_flush(tmp_path):
    class Puts:
        def __init__(self, inner):
            self.inner, self.puts = inner, []

        async def put(self, key, value, ttl):
            self.puts.append(key)
            await self.inner.put(key, value, ttl)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    store = Puts(SQLiteStore(tmp_path))
    recorder = Recorder(PriceTable(), retention=86400)
    recorder.start(store, Sealer(None))
    for _ in range(3):
        recorder.record(turn(A, time.time(), "sk…1111"))
        await recorder.flush()
    recorder.record(turn(A, time.time(), "sk…2222"))  # a new label (the same hash, another key's print)
    await recorder.flush()
    await recorder.stop()
    assert store.puts == [label_key(A)] * 2
    assert await reader.tenant_labels(store, [A], {}) == {A: "sk…2222"}
    await store.inner.close()


async def test_first_seen_is_the_windows_first_request(tmp_path):
    store = SQLiteStore(tmp_path)
    now = time.time()
    empty = await reader.window_stats(store, span_of("24h", now), A)
    assert empty["first_seen"] is None
    await recorded(store, turn(A, now - 3 * 3600 - 30), turn(A, now - 600), turn(B, now - 120))
    day = await reader.window_stats(store, span_of("24h", now), A)
    assert day["first_seen"] == int((now - 3 * 3600 - 30) // 60) * 60  # its minute
    assert (await reader.window_stats(store, span_of("1h", now), A))["first_seen"] == int((now - 600) // 60) * 60
    week = await reader.window_stats(store, span_of("7d", now), A)
    assert week["first_seen"] == int((now - 3 * 3600 - 30) // 3600) * 3600  # its hour
    assert (await reader.window_stats(store, span_of("24h", now), B))["first_seen"] == int((now - 120) // 60) * 60
    await store.close()
