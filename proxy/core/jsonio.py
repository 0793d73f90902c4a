"""JSON in and out of the proxy, pure: orjson with the standard library as a fallback, the
narrowing of client JSON (`object_or`, `array_or`, `string_or`), how a body's bytes are read as
text, large bodies read and written without holding the interpreter long, and what a parsed
JSON value holds in memory (`footprint`).
"""

from __future__ import annotations

import codecs
import json
import json.scanner
import math
import re
import sys
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from proxy.errors import Failure, Kind

# ==================== json in and out
# JSON in and out of the proxy: orjson (several times faster on 1 MB chat bodies), with the
# standard library as a fallback for what orjson refuses or would change (lone surrogates,
# integers past 64 bits). Input bytes must be valid UTF-8 (`\\ud83d`, an escape, is valid).
#
# Output is always valid UTF-8: a lone surrogate (`"\\ud83d"` in a request, common in truncated
# tool output) goes out escaped exactly like that, never as the invalid bytes it would encode to.
#
# Numbers: every number is finite, in and out. `NaN`, `Infinity` and literals that overflow a
# double (`1e400`) are refused by `loads` (a ValueError naming the number), and `dumps` never
# writes `NaN` or `Infinity`. An integer of any size comes back out exactly as it came in
# (orjson reads integers past 64 bits as floats, so such a document is read by the standard
# library instead).

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class TooDeep(Failure, ValueError):
    """JSON nested deeper than the parsers handle (orjson stops at 1024 levels)."""

    kind = Kind.UNPROCESSABLE


class NonFinite(Failure, ValueError):
    """A number JSON cannot carry: NaN, Infinity, or a literal too large for a double."""

    kind = Kind.UNPROCESSABLE


D = TypeVar("D")

JsonObject = dict[str, Any]
"""A JSON object as parsed (`loads`): keys are strings, values any JSON value. The type of the
request bodies, items and events the proxy reads from clients and upstreams."""


def object_or(value: Any, default: D) -> dict[str, Any] | D:
    """`value` when it is a JSON object (a dict), else `default`: a field read where the client
    may have sent any JSON type."""
    return value if isinstance(value, dict) else default


def array_or(value: Any, default: D) -> list[Any] | D:
    """`value` when it is a JSON array (a list), else `default`."""
    return value if isinstance(value, list) else default


def string_or(value: Any, default: D) -> str | D:
    """`value` when it is a JSON string, else `default`."""
    return value if isinstance(value, str) else default


def _reject_constant(name: str) -> Any:
    raise NonFinite(f"{name} is not valid JSON (numbers must be finite)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        shown = text if len(text) <= 40 else f"{text[:20]}…{text[-10:]}"
        raise NonFinite(f"the number {shown} is out of range (not a finite double)")
    return value


# orjson reads an integer literal outside [-2**63, 2**64) as a float (rounded): one of those
# is a float at least this large in magnitude, which a document rarely holds otherwise.
_BIG = float(2**63)


def _maybe_rounded_integer(value: Any) -> bool:
    """Does the parsed `value` hold a float of magnitude >= 2**63 (possibly a big integer)?"""
    if type(value) is float:
        return not -_BIG < value < _BIG
    if type(value) is not dict and type(value) is not list:
        return False
    stack = [value]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        for child in node.values() if type(node) is dict else node:
            kind = type(child)
            if kind is str:
                continue
            if kind is dict or kind is list:
                push(child)
            elif kind is float and not -_BIG < child < _BIG:
                return True
    return False


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Does `value` hold arrays/objects more than `limit` levels deep? (Iterative: no recursion.)"""
    if type(value) is not dict and type(value) is not list:
        return False
    stack = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        node, depth = pop()
        if depth > limit:
            return True
        for child in node.values() if type(node) is dict else node:
            if type(child) is dict or type(child) is list:
                push((child, depth + 1))
    return False


def _utf8_text(raw: bytes) -> str:
    """JSON bytes are UTF-8 (RFC 8259 §8.1; a UTF-8 byte order mark is allowed, as the stdlib
    allows it). The stdlib's bytes path would also take UTF-16/32 and, decoding with
    `surrogatepass`, a surrogate encoded as bytes (`\\xed\\xa0\\xbd`): invalid UTF-8 that a body
    forwarded unchanged would carry upstream. Both are a ValueError here."""
    try:
        return bytes(raw).decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not valid UTF-8 (byte {exc.start}: {exc.reason})") from None


def loads(raw: bytes | str) -> Any:
    """Parse JSON. Raises ValueError for invalid JSON (NonFinite for a non-finite number,
    TooDeep for nesting past the parsers' depth)."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "depth" in str(exc) or "recursion" in str(exc).lower():
            raise TooDeep(str(exc)) from None
    else:
        if not _maybe_rounded_integer(value):
            return value
    # orjson refuses lone surrogates and overflowing numbers, and rounds integers past 64
    # bits: the stdlib parser reads these exactly, and refuses every non-finite number.
    if not isinstance(raw, str):
        raw = _utf8_text(raw)
    try:
        return json.loads(raw, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise TooDeep("JSON nested too deeply") from None


def _escape_surrogate(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def dumps(obj: Any, *, sort_keys: bool = False) -> bytes:
    """Compact JSON, UTF-8, non-ASCII kept as is (lone surrogates escaped), integers exact.

    Never writes NaN or Infinity: orjson writes a non-finite float as null, the fallback
    raises ValueError (`loads` lets none in, so only the proxy's own arithmetic could make one).
    """
    try:
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS if sort_keys else 0)
    except TypeError:  # orjson.JSONEncodeError: a big integer or a surrogate
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys, allow_nan=False)
        # Raw surrogates can only stand inside JSON strings, where their escape means the same.
        return _LONE_SURROGATE.sub(_escape_surrogate, text).encode("utf-8")


def text_bytes(text: str) -> bytes:
    """A plain text as the store keeps it: UTF-8, a lone surrogate kept (`surrogatepass`), so
    `stored_text` gives back exactly the string that came in."""
    return text.encode("utf-8", "surrogatepass")


def stored_text(raw: bytes) -> str:
    """`text_bytes`'s string back; bytes that are not its (a store written by something else)
    are read with U+FFFD in place of what does not decode, never an error."""
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace")


# ==================== footprint
# What a parsed JSON value costs in memory, for what the proxy holds between requests.
#
# The JSON's length undercounts what its parse holds: `{"role":"user","content":""}` is 29
# characters and about 250 bytes of Python objects (a dict, its values, the list's pointer):
# 446,000 such items are 13 MB of JSON and 110 MB held. `footprint` counts every dict, list,
# string and number as `sys.getsizeof` does (a container with its pointers), an object shared by
# pointer once per reference (cautious: held histories share their items). The keys of a small
# object are not counted: the JSON readers share them (orjson caches short keys, the standard
# library's scanner memoizes them per document); those of an object of more than SHARED_KEYS
# are, each one (a million distinct keys are a million strings), and so is any key longer than
# SHARED_KEY_CHARS, wherever it is (orjson caches only short keys: one 4 MB key in an input item
# was counted as nothing, and a WebSocket connection held 16 such under a 64 MB budget).

SHARED_KEYS = 16  # an object with at most this many keys: its key strings are taken as shared
SHARED_KEY_CHARS = 64  # ... when at most this long (orjson's key cache holds keys of up to 64 bytes)
_SIZE = sys.getsizeof


def footprint(value: Any) -> int:
    """Bytes `value` (any JSON value) holds."""
    try:
        return _walk(value)
    except RecursionError:  # nested deeper than the interpreter's stack: walked with a list
        return _walk_flat(value)


def _walk(value: Any) -> int:
    kind = type(value)
    if kind is dict:
        total = _SIZE(value) + sum(map(_walk, value.values()))
        return total + (sum(map(_SIZE, value)) if len(value) > SHARED_KEYS else _long_keys(value))
    if kind is list:
        return _SIZE(value) + sum(map(_walk, value))
    return _SIZE(value)


def _walk_flat(value: Any) -> int:
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        total += _SIZE(item)
        if type(item) is dict:
            stack.extend(item.values())
            total += sum(map(_SIZE, item)) if len(item) > SHARED_KEYS else _long_keys(item)
        elif type(item) is list:
            stack.extend(item)
    return total


def _long_keys(value: dict[str, Any]) -> int:
    """Bytes of the keys of a small object that no JSON reader shares (longer than SHARED_KEY_CHARS)."""
    return sum(_SIZE(key) for key in value if len(key) > SHARED_KEY_CHARS)


# ==================== json text
# How the bytes of a JSON body are read as text. Pure.
#
# JSON on the wire is UTF-8 (RFC 8259 §8.1; a UTF-8 byte order mark is tolerated, as the stdlib
# tolerates it), and that is the only encoding the proxy reads a body in. Lenient readers (Python's
# `json.loads` on bytes, Express's body-parser) also take UTF-16 and UTF-32, told apart by a byte
# order mark or by where the zero bytes of the first characters are (RFC 4627 §3): `encoding` says
# which of these a body would be read as, so that a body the proxy refuses is refused naming it, and
# `first_character` finds how it opens in that encoding, past any amount of leading whitespace.

UTF8 = frozenset({"utf-8", "utf-8-sig"})
PIECE = 64 * 1024  # bytes decoded at a time while looking past leading whitespace
_WHITESPACE = " \t\r\n"  # JSON's whitespace (RFC 8259 §2)
_NAMES = {
    "utf-8": "UTF-8",
    "utf-8-sig": "UTF-8 with a byte order mark",
    "utf-16": "UTF-16 with a byte order mark",
    "utf-32": "UTF-32 with a byte order mark",
    "utf-16-le": "UTF-16LE",
    "utf-16-be": "UTF-16BE",
    "utf-32-le": "UTF-32LE",
    "utf-32-be": "UTF-32BE",
}


def encoding(raw: bytes) -> str:
    """The codec a lenient reader takes JSON bytes to be in: "utf-8", "utf-8-sig", "utf-16" or
    "utf-32" (after their byte order mark), or "utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"
    (no mark, told by the zero bytes of the first two characters)."""
    return json.detect_encoding(raw[:4])


def described(codec: str) -> str:
    """`codec` (one `encoding` returns) as a message names it."""
    return _NAMES.get(codec, codec)


def first_character(raw: bytes) -> str:
    """The first character of `raw` past JSON whitespace, read in its `encoding` ("" if none): "{"
    for an object whatever its encoding, "-" for a multipart body (its boundary). Decoded a PIECE
    at a time, so megabytes of leading whitespace cost no copy of the body."""
    decoder = codecs.getincrementaldecoder(encoding(raw))(errors="replace")
    view = memoryview(raw)
    for at in range(0, len(raw), PIECE):
        text = decoder.decode(view[at : at + PIECE], final=at + PIECE >= len(raw)).lstrip(_WHITESPACE)
        if text:
            return text[0]
    return ""


# ==================== large json
# JSON of large request bodies, read and written off the event loop without holding the GIL
# for long, so the loop's other requests go on meanwhile.
#
# orjson (and the standard library's C scanner between its callbacks) holds the GIL for a whole
# document: about 1 µs per value, so 2 s for a body of 2 M small objects, during which the event
# loop cannot run even when the parse is in another thread. Which reader a document gets is
# decided by counting bytes (cheap, a slice at a time, counting those inside strings too):
#
# - few containers and commas in all (`MANY_HELD`: a few huge strings, or a history however
#   long a session makes it): orjson, fast and held briefly;
# - many containers: the standard library's C scanner with a Python hook per object and number,
#   where the interpreter may switch threads;
# - many more commas than containers (long arrays of bare strings, numbers or literals, which get
#   no hook): the standard library's Python scanner, slower but yielding at every value.
#
# Values and errors are `loads`'s in every case. `dumps_yielding` writes what
# `dumps` writes, byte for byte, a piece at a time.

# What orjson may read holding the GIL: this many containers and commas in all (about 0.1 µs
# each, 0.26 µs in a dict of unique keys: 25-65 ms), at most MANY_VALUES of them commas. A long
# conversation has one or a few containers per message (a 2M-token Messages history: 52,000
# containers and 103,000 commas), so a bound on the sum reads it at orjson's speed where a bound
# on containers alone (50,000) sent it to the hooked scanner, three times slower, past 1.9M tokens.
MANY_HELD = 250_000
MANY_VALUES = 200_000  # commas
_SLICE = 4 * 1024 * 1024  # bytes counted at a time: other threads run between slices
_PIECE = 512  # dumps_yielding: a list this long, or any dict at the top levels, is written by parts
_STRING = 1 << 20  # dumps_yielding: a string longer than this is escaped a slice at a time
SEARCH_SLICE = _SEARCH = 1 << 20  # contains: bytes searched at a time


def _count(raw: bytes, marks: tuple[bytes, ...], limit: int) -> int:
    """Occurrences of `marks` in `raw`, counted up to `limit` (then a little past it)."""
    count = 0
    for start in range(0, len(raw), _SLICE):
        end = start + _SLICE
        count += sum(raw.count(mark, start, end) for mark in marks)
        if count > limit:
            break
    return count


def contains(raw: bytes, needle: bytes) -> bool:
    """`needle in raw`, searched a slice at a time: run off the event loop, it lets the loop run
    between slices (a short needle is searched at a few hundred MB/s: 20 ms and more for a body
    of 20 MB of screenshots, in one call that holds the GIL)."""
    overlap = len(needle) - 1
    return any(raw.find(needle, start, start + _SEARCH + overlap) >= 0 for start in range(0, len(raw), _SEARCH))


_ASCII_ESCAPE = re.compile(rb"\\u00[2-7][0-9A-Fa-f]")


def escapes_ascii(raw: bytes) -> bool:
    """Does the JSON text `raw` escape a printable ASCII character (`\\u0020` to `\\u007f`: what
    could spell a key otherwise)? Escapes of other characters (`\\u00e9`, `\\u4e2d`: what
    `ensure_ascii` writes) cannot. Searched a slice at a time, as `contains` searches."""
    if not contains(raw, b"\\u00"):
        return False
    step = SEARCH_SLICE
    return any(_ASCII_ESCAPE.search(raw, start, start + step + 5) for start in range(0, len(raw), step))


@dataclass(frozen=True)
class RawJson:
    """A body's bytes as they came, and whether they escape a printable ASCII character: asked
    once a request, for the steps that look for a key in the bytes instead of walking the
    parsed body (a few milliseconds against tens for a long history)."""

    raw: bytes
    escapes: bool

    @classmethod
    def of(cls, raw: bytes) -> RawJson:
        return cls(raw, escapes_ascii(raw))

    def may_hold(self, needle: bytes) -> bool:
        """Could the document hold `needle` (a quoted key, `b'"cache_control"'`), as it came or
        spelled with escapes? False: it holds none."""
        return self.escapes or contains(self.raw, needle)


def _keep(obj: JsonObject) -> JsonObject:
    return obj


def _int(text: str) -> int:
    return int(text)


def _python_scanner_decoder() -> json.JSONDecoder:
    decoder = json.JSONDecoder(
        object_hook=_keep, parse_int=_int, parse_constant=_reject_constant, parse_float=_finite_float
    )
    # a scanner of its own per call: the Python one (typeshed declares neither this attribute nor
    # the module's pure-Python scanner, both in the standard library since 2.6)
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    return decoder


def loads_yielding(raw: bytes) -> Any:
    """`jsonio.loads(raw)`, for a large body parsed off the event loop (see the module docstring)."""
    containers = _count(raw, (b"{", b"["), MANY_HELD)
    commas = _count(raw, (b",",), 4 * containers + MANY_VALUES)
    if containers + commas <= MANY_HELD and commas <= MANY_VALUES:
        return loads(raw)
    text = _utf8_text(raw)  # strict: invalid UTF-8 is a ValueError
    try:
        if commas > 4 * containers + MANY_VALUES:
            return _python_scanner_decoder().decode(text)
        return json.loads(
            text,
            object_hook=_keep,
            parse_int=_int,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
        )
    except RecursionError:
        raise TooDeep("JSON nested too deeply") from None


def dumps_yielding(obj: Any, *, depth: int = 0) -> bytes:
    """`jsonio.dumps(obj)`, byte for byte, written a piece at a time: the dicts of the top
    levels key by key, long lists element by element and long strings a slice at a time
    (escaping is per character, and a str holds code points: no slice splits a character),
    so no single call holds the GIL for the whole document."""
    kind = type(obj)
    if kind is str and len(obj) > _STRING:
        return b'"' + b"".join(dumps(obj[at : at + _STRING])[1:-1] for at in range(0, len(obj), _STRING)) + b'"'
    if kind is dict and depth < 4:
        return (
            b"{" + b",".join(dumps(str(k)) + b":" + dumps_yielding(v, depth=depth + 1) for k, v in obj.items()) + b"}"
        )
    if kind is list and (depth < 4 or len(obj) > _PIECE):
        return b"[" + b",".join(dumps_yielding(v, depth=depth + 1) for v in obj) + b"]"
    return dumps(obj)
