"""What a parsed JSON value costs in memory, for what the proxy holds between requests.

The JSON's length undercounts what its parse holds: `{"role":"user","content":""}` is 29
characters and about 250 bytes of Python objects (a dict, its values, the list's pointer):
446,000 such items are 13 MB of JSON and 110 MB held. `footprint` counts every dict, list,
string and number as `sys.getsizeof` does (a container with its pointers), an object shared by
pointer once per reference (cautious: held histories share their items). The keys of a small
object are not counted: the JSON readers share them (orjson caches short keys, the standard
library's scanner memoizes them per document); those of an object of more than SHARED_KEYS
are, each one (a million distinct keys are a million strings).
"""

from __future__ import annotations

import sys
from typing import Any

SHARED_KEYS = 16  # an object with at most this many keys: its key strings are taken as shared
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
        return total + sum(map(_SIZE, value)) if len(value) > SHARED_KEYS else total
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
            if len(item) > SHARED_KEYS:
                total += sum(map(_SIZE, item))
        elif type(item) is list:
            stack.extend(item)
    return total
