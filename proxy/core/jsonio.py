"""JSON in and out of the proxy: orjson (several times faster on 1 MB chat bodies), with the
standard library as a fallback for what orjson refuses or would change (lone surrogates,
integers past 64 bits). Input bytes must be valid UTF-8 (`\\ud83d`, an escape, is valid).

Output is always valid UTF-8: a lone surrogate (`"\\ud83d"` in a request, common in truncated
tool output) goes out escaped exactly like that, never as the invalid bytes it would encode to.

Numbers: every number is finite, in and out. `NaN`, `Infinity` and literals that overflow a
double (`1e400`) are refused by `loads` (a ValueError naming the number), and `dumps` never
writes `NaN` or `Infinity`. An integer of any size comes back out exactly as it came in
(orjson reads integers past 64 bits as floats, so such a document is read by the standard
library instead).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, TypeVar

import orjson

from proxy.errors import Failure, Kind

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
