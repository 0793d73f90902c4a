"""The SSE parser against arbitrary chunking."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

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
