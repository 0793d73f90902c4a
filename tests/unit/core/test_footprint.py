"""What a parsed JSON value holds in memory: within a small factor of what its parse allocates,
whatever its shape (many small items, one long string, an object of many distinct keys)."""

from __future__ import annotations

import tracemalloc

import orjson
import pytest

from proxy.core.footprint import footprint


def allocated(raw: bytes) -> tuple[object, int]:
    tracemalloc.start()
    try:
        value = orjson.loads(raw)
        return value, tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    "body",
    [
        {"input": [{"role": "user", "content": ""}] * 20_000},  # 580 KB of JSON, ~5 MB of objects
        {"input": [{"role": "user", "content": [{"type": "input_text", "text": ""}] * 20}] * 500},
        {"input": [{"role": "user", "content": "a line of tool output " * 5000}] * 10},
        {f"key{i}": i for i in range(50_000)},  # distinct keys: each one a string of its own
        {"text": "x" * 100_000 + "\U0001f600"},  # one astral character: 4 bytes a character
        # long keys in small objects: no reader shares them (orjson caches keys of up to 64 bytes)
        {"input": [{"type": "message", "role": "user", "content": "hi", "K" * 400_000: 1}]},
        {"input": [{"role": "user", f"{i:0200d}": 1} for i in range(2_000)]},
    ],
)
def test_footprint_is_what_the_parse_holds_within_a_small_factor(body):
    raw = orjson.dumps(body)
    value, held = allocated(raw)
    assert held * 0.9 <= footprint(value) <= held * 1.6, (footprint(value), held, len(raw))


def test_small_items_hold_several_times_their_json():
    raw = orjson.dumps({"input": [{"role": "user", "content": ""}] * 20_000})
    assert footprint(orjson.loads(raw)) > 6 * len(raw)


def test_a_value_nested_deeper_than_the_stack_is_counted_too():
    """orjson reads 1,000 levels; a recursive walk alone failed there (a 1011 close of the
    WebSocket, logged as a bug, for one frame of brackets)."""
    deep: list = []
    for _ in range(5_000):
        deep = [deep, {"k": "v"}]
    shallow = [[], {"k": "v"}]
    assert footprint(deep) == 5_000 * (footprint(shallow) - footprint([])) + footprint([])


def test_a_long_key_is_counted_deeper_than_the_stack_too():
    def nested(key: str) -> list:
        deep: list = [{key: 1}]
        for _ in range(5_000):
            deep = [deep]
        return deep

    assert footprint(nested("K" * 100_000)) - footprint(nested("K")) > 100_000
