"""The threshold compaction a Messages `context_management` asks for: its `compact_20260112` edit (`proxy.formats.context_threshold`)."""

from __future__ import annotations

from typing import Any

from proxy.core.compaction import Threshold
from proxy.formats.context_threshold import bad, entries, token_count

ANTHROPIC_DEFAULT_TRIGGER = 150_000  # compact_20260112's default trigger (input tokens)
COMPACT_EDIT = "compact_20260112"


def messages_threshold(asked: Any) -> Threshold | None:
    """The `compact_20260112` edit of a Messages `context_management` (None: none). ProxyError
    400 for a malformed one. Other edit types are left to their own emulation."""
    if asked is None:
        return None
    if not isinstance(asked, dict):
        raise bad("context_management must be an object.", "context_management")
    edits = asked.get("edits")
    if edits is None:
        return None
    found: Threshold | None = None
    for i, edit in enumerate(entries(edits, "context_management.edits")):
        if edit["type"] != COMPACT_EDIT:
            continue
        param = f"context_management.edits[{i}]"
        if found is not None:
            raise bad(f"{param} is a second {COMPACT_EDIT} edit; one at most.", param)
        trigger = edit.get("trigger")
        tokens = ANTHROPIC_DEFAULT_TRIGGER
        if trigger is not None:
            if not isinstance(trigger, dict) or trigger.get("type") != "input_tokens":
                raise bad(f'{param}.trigger must be {{"type": "input_tokens", "value": N}}.', f"{param}.trigger")
            tokens = token_count(trigger.get("value"), f"{param}.trigger.value")
        pause = edit.get("pause_after_compaction", False)
        if not isinstance(pause, bool):
            raise bad(f"{param}.pause_after_compaction must be a boolean.", f"{param}.pause_after_compaction")
        instructions = edit.get("instructions")
        if instructions is not None and (not isinstance(instructions, str) or not instructions.strip()):
            raise bad(f"{param}.instructions must be a non-empty string.", f"{param}.instructions")
        found = Threshold(tokens, pause, instructions)
    return found
