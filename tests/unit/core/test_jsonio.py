"""proxy.core.jsonio: JSON in and out, a body's bytes as text, large bodies off the event loop,
what a parsed value holds in memory."""

from __future__ import annotations

import json
import tracemalloc

import orjson
import pytest

from proxy.core import jsonio
from proxy.core.jsonio import footprint

# ==================== jsonio
# jsonio.loads reads UTF-8 only: the stdlib fallback would take surrogates encoded as bytes.


@pytest.mark.parametrize(
    "raw",
    [b'{"t": "hi \xed\xa0\xbd"}', '{"t": 1}'.encode("utf-16"), b'{"t": "\xc3"}', b'{"t": "\xed\xa0\xbd", "n": 1e400}'],
)
def test_invalid_utf8_bytes_are_refused(raw):
    with pytest.raises(ValueError, match="UTF-8"):
        jsonio.loads(raw)


def test_what_only_the_fallback_reads_still_parses():
    assert jsonio.loads(b'{"t": "hi \\ud83d"}') == {"t": "hi \ud83d"}  # an escape: valid JSON text
    assert jsonio.loads(b'\xef\xbb\xbf{"t": "caf\xc3\xa9"}') == {"t": "caf\u00e9"}  # UTF-8 with a BOM
    assert jsonio.loads(b'{"n": 36893488147419103232}') == {"n": 2**65}
    assert jsonio.loads('{"t": "\ud83d"}') == {"t": "\ud83d"}  # text is not bytes: nothing to decode


# ==================== footprint
# What a parsed JSON value holds in memory: within a small factor of what its parse allocates,
# whatever its shape (many small items, one long string, an object of many distinct keys).


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


# ==================== json text
# How JSON bytes are read as text (proxy.core.jsonio): the encoding a lenient reader takes
# them to be in, and the first character past any amount of whitespace in that encoding.

BODY = '{"items": [{"type": "compaction", "encrypted_content": "offload-compaction-v1:x"}]}'
CODECS = {  # what each spelling is read as: with its byte order mark, or told by its zero bytes
    "utf-8": "utf-8",
    "utf-8-sig": "utf-8-sig",
    "utf-16": "utf-16",
    "utf-16-le": "utf-16-le",
    "utf-16-be": "utf-16-be",
    "utf-32": "utf-32",
    "utf-32-le": "utf-32-le",
    "utf-32-be": "utf-32-be",
}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("lead", ["", " ", "\r\n\t ", " " * 300, "\n" * 70_000])
def test_each_encoding_is_told_and_read_past_any_whitespace(codec, lead):
    raw = (lead + BODY).encode(codec)
    assert jsonio.encoding(raw) == CODECS[codec]
    assert json.loads(raw) == json.loads(BODY)  # the stdlib reads every one of them: a lenient upstream would
    assert jsonio.first_character(raw) == "{"


@pytest.mark.parametrize("codec", CODECS)
def test_whitespace_only_or_nothing_has_no_first_character(codec):
    assert jsonio.first_character((" \n" * 40_000).encode(codec)) == ""
    assert jsonio.first_character(b"") == ""


def test_a_multipart_body_opens_with_its_boundary():
    assert jsonio.first_character(b"\r\n--xyz\r\nContent-Disposition: form-data\r\n\r\n{}\r\n--xyz--") == "-"


def test_bytes_that_are_no_text_are_read_with_replacements_not_errors():
    assert jsonio.first_character(b"\xff\xfe\x00\x00\x20") == "\ufffd"  # UTF-32's mark, then a unit cut short
    assert jsonio.first_character(b"\x80{") == "\ufffd"


def test_every_encoding_is_named():
    assert {jsonio.described(codec) for codec in CODECS.values()} == {
        "UTF-8",
        "UTF-8 with a byte order mark",
        "UTF-16 with a byte order mark",
        "UTF-16LE",
        "UTF-16BE",
        "UTF-32 with a byte order mark",
        "UTF-32LE",
        "UTF-32BE",
    }
    assert jsonio.UTF8 == {"utf-8", "utf-8-sig"}


# ==================== large json
# large_json: the parse of large bodies off the event loop gives exactly what `jsonio.loads`
# gives (values and errors) on each of its three readers, a document of many containers goes
# through the standard library with a hook per object, one of long plain arrays through the
# Python scanner; `dumps_yielding` writes `jsonio.dumps`'s bytes.

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
        monkeypatch.setattr(jsonio, "MANY_HELD", -1)
        monkeypatch.setattr(jsonio, "MANY_VALUES", 10**9)
    if request.param == "Python scanner":
        monkeypatch.setattr(jsonio, "MANY_HELD", -1)
        monkeypatch.setattr(jsonio, "MANY_VALUES", -(10**9))
    return request.param


@pytest.mark.parametrize("raw", DOCS)
def test_same_values_as_loads(raw, threshold):
    assert jsonio.loads_yielding(raw) == jsonio.loads(raw)
    assert jsonio.dumps(jsonio.loads_yielding(raw)) == jsonio.dumps(jsonio.loads(raw))


@pytest.mark.parametrize("raw", BAD)
def test_refused_like_loads(raw, threshold):
    with pytest.raises(ValueError):
        jsonio.loads_yielding(raw)


def test_too_deep_is_too_deep(threshold):
    with pytest.raises(jsonio.TooDeep):
        jsonio.loads_yielding(b"[" * 100_000 + b"]" * 100_000)


def test_many_objects_take_the_hooked_parser(monkeypatch):
    seen = []
    monkeypatch.setattr(jsonio, "_keep", lambda obj: seen.append(1) or obj)
    # past MANY_HELD containers and commas in all, with few commas: hooked for its containers alone
    raw = b'{"messages": [' + b",".join([b'{"content": [{}]}'] * 100_000) + b"]}"
    body = jsonio.loads_yielding(raw)
    assert len(body["messages"]) == 100_000 and len(seen) == 200_001
    seen.clear()
    few = b'{"messages": [{"role": "tool", "content": "' + b"x" * 5_000_000 + b'"}]}'
    assert len(jsonio.loads_yielding(few)["messages"][0]["content"]) == 5_000_000 and not seen


def test_long_plain_arrays_take_the_python_scanner(monkeypatch):
    import json.scanner

    made = []
    real = json.scanner.py_make_scanner
    monkeypatch.setattr(json.scanner, "py_make_scanner", lambda ctx: made.append(1) or real(ctx))
    raw = b'{"stop": [' + b",".join([b'""'] * 300_000) + b'], "n": [' + b",".join([b"7"] * 1000) + b"]}"
    body = jsonio.loads_yielding(raw)
    assert len(body["stop"]) == 300_000 and body["n"][0] == 7 and made == [1]
    made.clear()
    csv = b'{"messages": [{"role": "tool", "content": "' + b"a,b,c\\n" * 200_000 + b'"}]}'
    assert jsonio.loads_yielding(csv)["messages"][0]["content"].startswith("a,b,c")


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
    assert jsonio.dumps_yielding(obj) == jsonio.dumps(obj)


def test_dumps_yielding_writes_a_long_string_by_slices_byte_for_byte(monkeypatch):
    monkeypatch.setattr(jsonio, "_STRING", 7)
    every = "".join(chr(c) for c in range(0x800) if not 0xD800 <= c <= 0xDFFF)
    for text in ('q"\\\n\t\x00\x1f\x7f/é\u2028 😀' * 5, every, "lone \ud83d then \udc00 end " * 3, "short"):
        for value in (text, {"k": [text, {"t": text}]}, [[[[[text]]]]]):
            assert jsonio.dumps_yielding(value) == jsonio.dumps(value)
            assert jsonio.loads(jsonio.dumps_yielding(value)) == value


@pytest.mark.parametrize("at", [0, 1, jsonio._SEARCH - 3, jsonio._SEARCH - 1, jsonio._SEARCH, 2 * jsonio._SEARCH + 5])
def test_contains_finds_a_needle_wherever_it_lies_across_the_slices(at):
    needle = b"encrypted_content"
    raw = bytearray(b"A" * (3 * jsonio._SEARCH))
    raw[at : at + len(needle)] = needle
    assert jsonio.contains(bytes(raw), needle)
    assert not jsonio.contains(bytes(raw).replace(needle, b"encrypted_kontent"), needle)
    assert jsonio.contains(b"\\u00e9", b"\\u") and not jsonio.contains(b"", b"\\u")


def test_a_long_historys_many_containers_are_read_by_orjson_and_a_document_of_many_more_is_not(monkeypatch):
    """What orjson reads holding the GIL is bounded by containers and commas together: a long
    conversation (a container or two per message, past the 50,000 containers that once sent it to
    the hooked scanner) is read at orjson's speed; a document of more is not."""
    read_whole: list[int] = []
    real = jsonio.loads
    monkeypatch.setattr(jsonio, "loads", lambda raw: read_whole.append(len(raw)) or real(raw))
    history = orjson.dumps({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}] * 40_000})
    assert jsonio._count(history, (b"{", b"["), 10**9) > 100_000  # past the old bound on containers alone
    assert jsonio.loads_yielding(history) == real(history) and read_whole == [len(history)]
    read_whole.clear()
    many = orjson.dumps([{"a": 1}] * (jsonio.MANY_HELD // 2 + 1))
    assert jsonio.loads_yielding(many) == real(many) and read_whole == []


@pytest.mark.parametrize(
    "raw, holds",
    [
        (b'{"messages": [{"content": [{"type": "text", "text": "x", "cache_control": {}}]}]}', True),
        (b'{"messages": [{"content": "a \\"cache_control\\" in a text is no key"}]}', False),
        (b'{"messages": [{"content": [{"cache\\u005fcontrol": {}}]}]}', True),  # spelled with an escape
        (b'{"messages": [{"content": "caf\\u00e9"}]}', False),  # ensure_ascii's escapes spell no key
        (b'{"messages": []}', False),
    ],
)
def test_the_raw_bytes_say_whether_a_key_may_be_held(raw, holds):
    """`RawJson.may_hold`: False only when no object of the document can hold the key."""
    spelled = jsonio.RawJson.of(raw)
    assert spelled.may_hold(b'"cache_control"') is holds
    if not holds:
        assert "cache_control" not in json.dumps(jsonio.loads(raw)).replace('\\"cache_control\\"', "")
