"""The simple context strategies `replay --compare` measures beside the proxy, as pure functions
of one turn's request (its history items, in any wire format, read through the format's view).

- observation masking: every tool result but the last `keep` has its output replaced by a
  placeholder (`MASKED_TOOL_RESULT`), everything else sent as is. M = 10, as in "The Complexity
  Trap" (Lindenbauer et al., 2025), whose masking kept SWE-agent's last 10 observations.
- middle-out truncation: whole items dropped from the middle of the history until it fits a token
  budget (the leading system items and the task, i.e. up to the first user item, and the last
  unit always stay); a call is dropped with its results (`proxy.core.compression.units`: the
  runs of items no cut may split), so no result is left without its call.

Neither keeps anything retrievable: what is masked or dropped is gone for the model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proxy.core.compression import units
from proxy.core.texts import MASKED_TOOL_RESULT
from proxy.core.tokens import TokenCounter
from proxy.core.view import ItemView

MASK_KEEP = 10


def observation_masking(items: list[Any], view: ItemView, keep: int = MASK_KEEP) -> list[Any]:
    """`items` with the output of every tool result but the last `keep` replaced by the placeholder."""
    results = [i for i, item in enumerate(items) if view.role(item) == "tool" and view.tool_text(item) is not None]
    masked = set(results[: max(len(results) - keep, 0)])
    return [view.with_tool_text(item, MASKED_TOOL_RESULT) if i in masked else item for i, item in enumerate(items)]


def task_end(items: list[Any], view: ItemView) -> int:
    """The end of what middle-out always keeps at the start: the system items and the first user item."""
    for i, item in enumerate(items):
        if view.role(item) == "user":
            return i + 1
    return 0


def middle_out(
    items: list[Any], view: ItemView, budget: int, *, counter: TokenCounter, tokens: Callable[[Any], int] | None = None
) -> list[Any]:
    """`items` without whole units from the middle, removed one at a time (the middle one of those
    left) until the tokens (`tokens(item)`, else `counter.message`) are within `budget` or only the
    start and the last unit are left."""
    count = tokens or counter.message
    head = task_end(items, view)
    parts = units(items, view, head, end=len(items), counter=counter)
    bounds = [(first, parts[k + 1][0] if k + 1 < len(parts) else len(items)) for k, (first, _) in enumerate(parts)]
    sizes = [sum(count(items[i]) for i in range(a, b)) for a, b in bounds]
    total = sum(count(item) for item in items[:head]) + sum(sizes)
    removable = list(range(len(bounds) - 1))  # the last unit (the newest turn's input) always stays
    dropped: set[int] = set()
    while total > budget and removable:
        unit = removable.pop(len(removable) // 2)
        dropped.add(unit)
        total -= sizes[unit]
    kept = list(items[:head])
    for k, (a, b) in enumerate(bounds):
        if k not in dropped:
            kept += items[a:b]
    return kept
