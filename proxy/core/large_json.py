"""JSON of large request bodies, read and written off the event loop without holding the GIL
for long, so the loop's other requests go on meanwhile.

orjson (and the standard library's C scanner between its callbacks) holds the GIL for a whole
document: about 1 µs per value, so 2 s for a body of 2 M small objects, during which the event
loop cannot run even when the parse is in another thread. Which reader a document gets is
decided by counting bytes (cheap, a slice at a time, counting those inside strings too):

- few containers and few commas (a few huge strings, or an ordinary history): orjson, fast and
  held briefly;
- many containers: the standard library's C scanner with a Python hook per object and number,
  where the interpreter may switch threads;
- many more commas than containers (long arrays of bare strings, numbers or literals, which get
  no hook): the standard library's Python scanner, slower but yielding at every value.

Values and errors are `proxy.core.jsonio.loads`'s in every case. `dumps_yielding` writes what
`jsonio.dumps` writes, byte for byte, a piece at a time.
"""

from __future__ import annotations

import json
import json.scanner
from typing import Any

from proxy.core import jsonio
from proxy.core.jsonio import JsonObject

MANY_CONTAINERS = 50_000
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


def _keep(obj: JsonObject) -> JsonObject:
    return obj


def _int(text: str) -> int:
    return int(text)


def _python_scanner_decoder() -> json.JSONDecoder:
    decoder = json.JSONDecoder(
        object_hook=_keep, parse_int=_int, parse_constant=jsonio._reject_constant, parse_float=jsonio._finite_float
    )
    # a scanner of its own per call: the Python one (typeshed declares neither this attribute nor
    # the module's pure-Python scanner, both in the standard library since 2.6)
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    return decoder


def loads_yielding(raw: bytes) -> Any:
    """`jsonio.loads(raw)`, for a large body parsed off the event loop (see the module docstring)."""
    containers = _count(raw, (b"{", b"["), MANY_CONTAINERS)
    commas = _count(raw, (b",",), 4 * containers + MANY_VALUES)
    if containers <= MANY_CONTAINERS and commas <= MANY_VALUES:
        return jsonio.loads(raw)
    text = jsonio._utf8_text(raw)  # strict: invalid UTF-8 is a ValueError
    try:
        if commas > 4 * containers + MANY_VALUES:
            return _python_scanner_decoder().decode(text)
        return json.loads(
            text,
            object_hook=_keep,
            parse_int=_int,
            parse_constant=jsonio._reject_constant,
            parse_float=jsonio._finite_float,
        )
    except RecursionError:
        raise jsonio.TooDeep("JSON nested too deeply") from None


def dumps_yielding(obj: Any, *, depth: int = 0) -> bytes:
    """`jsonio.dumps(obj)`, byte for byte, written a piece at a time: the dicts of the top
    levels key by key, long lists element by element and long strings a slice at a time
    (escaping is per character, and a str holds code points: no slice splits a character),
    so no single call holds the GIL for the whole document."""
    kind = type(obj)
    if kind is str and len(obj) > _STRING:
        return b'"' + b"".join(jsonio.dumps(obj[at : at + _STRING])[1:-1] for at in range(0, len(obj), _STRING)) + b'"'
    if kind is dict and depth < 4:
        return (
            b"{"
            + b",".join(jsonio.dumps(str(k)) + b":" + dumps_yielding(v, depth=depth + 1) for k, v in obj.items())
            + b"}"
        )
    if kind is list and (depth < 4 or len(obj) > _PIECE):
        return b"[" + b",".join(dumps_yielding(v, depth=depth + 1) for v in obj) + b"]"
    return jsonio.dumps(obj)
