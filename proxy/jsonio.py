"""JSON in and out of the proxy: orjson (several times faster on 1 MB chat bodies), with the
standard library as a fallback for what orjson refuses (lone surrogates, integers past 64 bits).
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads(raw: bytes | str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        # orjson is strict about UTF-8 and 64-bit integers; the stdlib parser is not, but
        # NaN/Infinity stay invalid either way.
        return json.loads(raw, parse_constant=_reject_constant)


def dumps(obj: Any, *, sort_keys: bool = False) -> bytes:
    """Compact JSON, UTF-8, non-ASCII kept as is."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS if sort_keys else 0)
    except TypeError:  # orjson.JSONEncodeError: a big integer or a surrogate
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys).encode(
            "utf-8", "surrogatepass"
        )
