"""Summing usage objects over rounds (any wire format's shape: numbers and nested details)."""

from __future__ import annotations

import copy

from proxy.core.jsonio import JsonObject


def add_usage(total: JsonObject | None, usage: JsonObject | None) -> JsonObject | None:
    """Sum two usage objects: numbers are added, nested objects (`*_details`) summed the same way;
    other values are kept from the first that has them. Returns a new dict (None only when both
    are empty); neither argument is changed."""
    if not usage:
        return copy.deepcopy(total) if total else None
    if not total:
        return copy.deepcopy(usage)
    out = copy.deepcopy(total)
    for key, value in usage.items():
        if isinstance(value, bool) or value is None:
            out.setdefault(key, value)
        elif isinstance(value, (int, float)):
            current = out.get(key)
            out[key] = (current if isinstance(current, (int, float)) and not isinstance(current, bool) else 0) + value
        elif isinstance(value, dict):
            out[key] = add_usage(out.get(key) if isinstance(out.get(key), dict) else None, value)
        else:
            out.setdefault(key, copy.deepcopy(value))
    return out
