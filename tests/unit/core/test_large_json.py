"""large_json: the parse of large bodies off the event loop gives exactly what `jsonio.loads`
gives (values and errors) on each of its three readers, a document of many containers goes
through the standard library with a hook per object, one of long plain arrays through the
Python scanner; `dumps_yielding` writes `jsonio.dumps`'s bytes."""

from __future__ import annotations

import pytest

from proxy.core import jsonio, large_json

DOCS = [
    b'{"a": [1, 2.5, -0, 1e300, "x", null, true, false, {"b": {}}], "c": ""}',
    b'{"big": 123456789012345678901234567890, "neg": -98765432109876543210}',
    b'{"s": "\\ud83d lone", "t": "\\u00e9\\n", "u": "\xc3\xa9"}',
    b'{"dup": 1, "dup": 2}',
    b'[[], {}, [[[]]], {"k": [{"k": [{}]}]}]',
    b' \n {"ws": 1} \n',
]
BAD = [
    b'{"n": NaN}',
    b'{"n": Infinity}',
    b'{"n": 1e400}',
    b'{"a": 1',
    b'{"s": "hi \xed\xa0\xbd"}',
    b'{"a": 1} x',
    b'{"s": "\xff"}',
]


@pytest.fixture(params=["orjson path", "hooked C scanner", "Python scanner"])
def threshold(request, monkeypatch):
    if request.param == "hooked C scanner":
        monkeypatch.setattr(large_json, "MANY_CONTAINERS", -1)
        monkeypatch.setattr(large_json, "MANY_VALUES", 10**9)
    if request.param == "Python scanner":
        monkeypatch.setattr(large_json, "MANY_CONTAINERS", -1)
        monkeypatch.setattr(large_json, "MANY_VALUES", -(10**9))
    return request.param


@pytest.mark.parametrize("raw", DOCS)
def test_same_values_as_loads(raw, threshold):
    assert large_json.loads_yielding(raw) == jsonio.loads(raw)
    assert jsonio.dumps(large_json.loads_yielding(raw)) == jsonio.dumps(jsonio.loads(raw))


@pytest.mark.parametrize("raw", BAD)
def test_refused_like_loads(raw, threshold):
    with pytest.raises(ValueError):
        large_json.loads_yielding(raw)


def test_too_deep_is_too_deep(threshold):
    with pytest.raises(jsonio.TooDeep):
        large_json.loads_yielding(b"[" * 100_000 + b"]" * 100_000)


def test_many_objects_take_the_hooked_parser(monkeypatch):
    seen = []
    monkeypatch.setattr(large_json, "_keep", lambda obj: seen.append(1) or obj)
    raw = (
        b'{"messages": [' + b",".join([b'{"role": "user", "content": [{"type": "text", "text": ""}]}'] * 30_000) + b"]}"
    )
    body = large_json.loads_yielding(raw)
    assert len(body["messages"]) == 30_000 and len(seen) == 60_001
    seen.clear()
    few = b'{"messages": [{"role": "tool", "content": "' + b"x" * 5_000_000 + b'"}]}'
    assert len(large_json.loads_yielding(few)["messages"][0]["content"]) == 5_000_000 and not seen


def test_long_plain_arrays_take_the_python_scanner(monkeypatch):
    import json.scanner

    made = []
    real = json.scanner.py_make_scanner
    monkeypatch.setattr(json.scanner, "py_make_scanner", lambda ctx: made.append(1) or real(ctx))
    raw = b'{"stop": [' + b",".join([b'""'] * 300_000) + b'], "n": [' + b",".join([b"7"] * 1000) + b"]}"
    body = large_json.loads_yielding(raw)
    assert len(body["stop"]) == 300_000 and body["n"][0] == 7 and made == [1]
    made.clear()
    csv = b'{"messages": [{"role": "tool", "content": "' + b"a,b,c\\n" * 200_000 + b'"}]}'
    assert large_json.loads_yielding(csv)["messages"][0]["content"].startswith("a,b,c")


@pytest.mark.parametrize(
    "obj",
    [
        {
            "model": "m",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "é\u2028\x00"}] * 1500}] * 3,
            "big": 2**70,
            "f": 1.5,
            "none": None,
            "t": True,
            "s": "\ud83d lone",
        },
        [[[[[list(range(600))]]]]],
        {"a": {"b": {"c": {"d": {"e": [{"f": [1] * 700}]}}}}},
        {},
        [],
        "x",
        3,
    ],
)
def test_dumps_yielding_writes_the_same_bytes(obj):
    assert large_json.dumps_yielding(obj) == jsonio.dumps(obj)


def test_dumps_yielding_writes_a_long_string_by_slices_byte_for_byte(monkeypatch):
    monkeypatch.setattr(large_json, "_STRING", 7)
    every = "".join(chr(c) for c in range(0x800) if not 0xD800 <= c <= 0xDFFF)
    for text in ('q"\\\n\t\x00\x1f\x7f/é\u2028 😀' * 5, every, "lone \ud83d then \udc00 end " * 3, "short"):
        for value in (text, {"k": [text, {"t": text}]}, [[[[[text]]]]]):
            assert large_json.dumps_yielding(value) == jsonio.dumps(value)
            assert jsonio.loads(large_json.dumps_yielding(value)) == value


@pytest.mark.parametrize(
    "at", [0, 1, large_json._SEARCH - 3, large_json._SEARCH - 1, large_json._SEARCH, 2 * large_json._SEARCH + 5]
)
def test_contains_finds_a_needle_wherever_it_lies_across_the_slices(at):
    needle = b"encrypted_content"
    raw = bytearray(b"A" * (3 * large_json._SEARCH))
    raw[at : at + len(needle)] = needle
    assert large_json.contains(bytes(raw), needle)
    assert not large_json.contains(bytes(raw).replace(needle, b"encrypted_kontent"), needle)
    assert large_json.contains(b"\\u00e9", b"\\u") and not large_json.contains(b"", b"\\u")
