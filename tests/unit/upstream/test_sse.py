"""The SSE parser against arbitrary chunking."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.upstream import sse

STREAM = b'data: {"a":1}\n\n: keep-alive\n\ndata: {"b":\ndata: 2}\r\n\r\nevent: x\ndata:[DONE]\n\n'


async def collect(chunks):
    async def gen():
        for c in chunks:
            yield c

    return [d async for d in sse.iter_data(gen())]


@given(st.lists(st.integers(1, len(STREAM) - 1), max_size=8))
def test_any_split_gives_the_same_events(cuts):
    import asyncio

    points = sorted(set(cuts))
    parts = [STREAM[a:b] for a, b in zip([0, *points], [*points, len(STREAM)])]
    assert asyncio.run(collect(parts)) == ['{"a":1}', '{"b":\n2}', "[DONE]"]


@pytest.mark.anyio
async def test_trailing_event_without_blank_line():
    assert await collect([b"data: x"]) == ["x"]


def test_encode():
    assert sse.encode({"a": "é"}) == 'data: {"a":"é"}\n\n'.encode()
    assert sse.DONE_EVENT == b"data: [DONE]\n\n"


async def _chunks(parts):
    for part in parts:
        yield part


@pytest.mark.anyio
@pytest.mark.parametrize("size", [1, 2, 3, 7, 100])
async def test_events_parse_the_same_however_the_chunks_fall(size):
    body = b"data: a\n\ndata: b\r\ndata: c\r\n\r\n: comment\nevent: x\ndata:d\n\ndata: tail"
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    assert [d async for d in sse.iter_data(_chunks(parts))] == ["a", "b\nc", "d", "tail"]


@pytest.mark.anyio
async def test_an_event_past_the_size_cap_ends_the_stream(monkeypatch):
    monkeypatch.setattr(sse, "MAX_EVENT_BYTES", 1000)
    parts = [b"data: ok\n\n", b"data: " + b"x" * 600, b"y" * 600, b"\n\n"]
    seen = []
    with pytest.raises(ValueError):
        async for d in sse.iter_data(_chunks(parts)):
            seen.append(d)
    assert seen == ["ok"]
