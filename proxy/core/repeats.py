"""Repeated identical tool calls in a history: an agent re-running what it already ran is the
signature of lost context, so the holdout counts them per session (`proxy.stats.arms`). Pure.

Two calls are the same when their tool names are equal and their arguments are: a JSON object's
arguments compared as parsed (key order and spacing aside), any other input as written.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from proxy.core.view import ItemView

MAX_ARGUMENT_CHARS = 100_000  # longer arguments are compared as written, never parsed


def call_key(name: str, arguments: str) -> tuple[str, str]:
    text = arguments.strip()
    if text.startswith("{") and len(text) <= MAX_ARGUMENT_CHARS:
        try:
            return name, json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
        except (ValueError, RecursionError):
            pass
    return name, arguments


def repeated_calls(items: Iterable[Any], view: ItemView) -> int:
    """How many tool calls in `items` repeat an earlier call of the same history exactly."""
    seen: set[tuple[str, str]] = set()
    repeats = 0
    for item in items:
        for name, arguments in view.call_details(item):
            key = call_key(name, arguments)
            if key in seen:
                repeats += 1
            else:
                seen.add(key)
    return repeats
