"""A client's own compaction: the agent asks the model to summarise its conversation. Pure.

Through the proxy an agent's raw history grows without bound (the usage it reads is the reduced
request's, so one that compacts by usage, as Claude Code does, rarely does). When it does ask for
a summary itself (Claude Code's `/compact`, Codex's local compaction), the model should summarise
the conversation, not the proxy's summary of it: that turn gets the originals wherever they fit
the model's window, and the proxy's summary and refs only for what does not (the turn's
thresholds become the window's, `settings_for`). Recognised by the instruction each agent sends
as its last user message (`SIGNATURES`).
"""

from __future__ import annotations

import re
from typing import Any

from proxy.core.jsonio import JsonObject
from proxy.core.precompress import context_window
from proxy.core.settings import OffloadSettings
from proxy.core.view import ItemView

# (agent, how its compaction instruction begins), compared with whitespace collapsed and case folded
SIGNATURES: tuple[tuple[str, str], ...] = (
    ("claude-code", "Your task is to create a detailed summary of the conversation so far"),
    ("codex", "You are performing a CONTEXT CHECKPOINT COMPACTION"),
)
DEFAULT_WINDOW = 128_000  # a model whose window is not known
FILL = 0.8  # of the window: the most the history may take (less when the output asked for needs more)
DEFAULT_OUTPUT = 16_000  # output kept free when the request names no limit
MANAGED_MODES = ("auto", "compact", "compress")
_SPACE = re.compile(r"\s+")
_PREFIXES = tuple((agent, _SPACE.sub(" ", text).casefold()) for agent, text in SIGNATURES)
LAST_ITEMS = 8  # items looked at from the end (a message split in parts, a system item between)
_READ = 40_000  # characters at the end of an item's text looked through (the instructions are long)


def asked(items: list[Any], view: ItemView) -> str | None:
    """The agent whose compaction `items` ask for, or None: its instruction is in the last
    user message, alone or beside reminders, or after the tool results it sends back (Claude
    Code's `/compact` after a tool round: one user message of a `tool_result` and the text)."""
    for item in items[: -LAST_ITEMS - 1 : -1]:
        role = view.role(item)
        if role not in ("user", "tool", "system"):
            return None  # the instruction is the last thing sent
        text = view.transcript(item)[1] if role != "system" else ""
        found = _SPACE.sub(" ", text[-_READ:]).casefold()
        agent = next((agent for agent, prefix in _PREFIXES if prefix in found), None)
        if agent is not None:
            return agent
    return None


def max_output(body: JsonObject) -> int:
    """The output the request keeps room for (`max_tokens`, `max_completion_tokens` or
    `max_output_tokens`, as its format names it), else DEFAULT_OUTPUT."""
    for name in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return DEFAULT_OUTPUT


def settings_for(settings: OffloadSettings, *, model: str | None, output: int) -> OffloadSettings:
    """The turn's settings with the model's window as the trigger: nothing is compacted or
    summarised while the history fits it (the tool-result thresholds apply only past the
    trigger); past it, the turn is reduced as any other, and waits for its summary (none is
    started ahead: the conversation restarts from the client's). Settings of a mode that
    offloads nothing are left as they are."""
    if settings.mode not in MANAGED_MODES:
        return settings
    window = context_window(model) or DEFAULT_WINDOW
    budget = min(10_000_000, max(settings.max_total_tokens, min(int(window * FILL), window - output)))
    return settings.model_copy(update={"max_total_tokens": budget, "hard_max_tokens": budget, "precompress_ratio": 0.0})
