"""The threshold compaction a Responses `context_management` asks for: `[{"type": "compaction", "compact_threshold": N}]` (`proxy.formats.context_threshold`)."""

from __future__ import annotations

from typing import Any

from proxy.core.compaction import Threshold
from proxy.formats.context_threshold import bad, entries, token_count


def responses_threshold(asked: Any) -> Threshold | None:
    """The compaction a Responses `context_management` asks for (None: none). ProxyError 400
    for a malformed one (only `compaction` entries exist; one at most)."""
    if asked is None:
        return None
    found: Threshold | None = None
    for i, entry in enumerate(entries(asked, "context_management")):
        if entry["type"] != "compaction":
            raise bad(
                f'context_management[{i}].type {entry["type"][:40]!r} is not supported; use "compaction".',
                f"context_management[{i}].type",
            )
        if found is not None:
            raise bad(f"context_management[{i}] is a second compaction entry; one at most.", f"context_management[{i}]")
        value = entry.get("compact_threshold")
        found = Threshold(None if value is None else token_count(value, f"context_management[{i}].compact_threshold"))
    return found
