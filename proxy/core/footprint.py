"""What a parsed JSON value costs in memory, for what the proxy holds between requests.

The JSON's length undercounts what its parse holds: `{"role":"user","content":""}` is 29
characters and about 250 bytes of Python objects (a dict, its values, the list's pointer):
446,000 such items are 13 MB of JSON and 110 MB held. `footprint` counts every dict, list,
string and number as `sys.getsizeof` does (a container with its pointers), an object shared by
pointer once per reference (cautious: held histories share their items). The keys of a small
object are not counted: the JSON readers share them (orjson caches short keys, the standard
library's scanner memoizes them per document); those of an object of more than SHARED_KEYS
are, each one (a million distinct keys are a million strings), and so is any key longer than
SHARED_KEY_CHARS, wherever it is (orjson caches only short keys: one 4 MB key in an input item
was counted as nothing, and a WebSocket connection held 16 such under a 64 MB budget).
"""

from __future__ import annotations

import sys
from typing import Any

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
