"""The providers' own context management, as the planners must respect it. Pure.

Both providers reduce a history server-side: OpenAI Responses with `context_management`
compaction (and `/responses/compact`, `compaction_trigger`), Anthropic with the
`context_management` edits (`compact_20260112`, `clear_tool_uses_20250919`, …). Their
compaction leaves an opaque item (a Responses `compaction` item, a Messages `compaction` block)
that the client sends back and before which the provider ignores everything. The rules:

- A provider compaction item is opaque: the planners never summarise, compact or cut it off
  from its place. The items before the newest one are what the provider ignores: they neither
  count towards the proxy's triggers nor go into a summary; the proxy's own cuts fall after it
  (`live_start`). A `compaction_trigger` (compact now) stays the last item.
- When the provider compacts the history itself (`ProviderContext.compacts`), the proxy never
  compresses it: two summaries of one history would fight. Its compaction still runs (one
  tool result at a time, each reloadable).
- When the provider clears old tool results (`clear_tool_uses_20250919`), the proxy compacts
  only what that edit leaves: the results of the most recent `keep` tool uses and of the
  `exclude_tools` (`clearable_calls`).
- A client that compacts by itself (Codex CLI with any provider but OpenAI's: a summarisation
  turn, then a new history of its initial context, the recent user messages and one user
  message holding the summary; Claude Code's /compact and auto-compaction likewise) leaves a boundary too, but the upstream reads what precedes
  it: that part still counts, yet stays verbatim, and the proxy's summaries start after the
  newest client summary (`client_summary_end`): one summary never folds the client's compacted
  state together with the work after it.

Each format reads its own request into a `ProviderContext` (`WireFormat.provider_context`) and
marks its items through `ItemView.is_provider_compaction` / `is_compaction_trigger`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.core.view import ItemView

DEFAULT_KEEP_TOOL_USES = 3  # Anthropic's default `keep` of clear_tool_uses_20250919
# How a client's own compaction summary begins: Codex CLI's (codex-rs/core/templates/compact/
# summary_prefix.md, its first sentence; the summary follows the whole template and a newline),
# Claude Code's after /compact or its auto-compaction (the first sentence, as its CLI writes it).
CLIENT_SUMMARY_PREFIXES = (
    "Another language model started to solve this problem and produced a summary of its thinking process.",
    "This session is being continued from a previous conversation that ran out of context.",
)


@dataclass(frozen=True)
class ProviderContext:
    """What the request asks the provider to do with its context."""

    compacts: bool = False  # the provider summarises this history itself: no compression by the proxy
    trigger: bool = False  # the input ends with a compaction_trigger: it must stay last (nothing appended)
    clears_tool_results: bool = False  # an edit clears older tool results (clear_tool_uses_20250919)
    keep_tool_uses: int = DEFAULT_KEEP_TOOL_USES  # ...all but the results of this many recent tool uses
    exclude_tools: frozenset[str] = frozenset()  # ...and of these tools

    @property
    def active(self) -> bool:
        return self.compacts or self.trigger or self.clears_tool_results


NONE = ProviderContext()


def live_start(items: list[Any], view: ItemView) -> int:
    """The index after the newest provider compaction item (0 without one): what the provider
    reads of the history starts there, the compaction item standing for all before it."""
    for i in range(len(items) - 1, -1, -1):
        if view.is_provider_compaction(items[i]):
            return i + 1
    return 0


def client_summary_end(items: list[Any], view: ItemView, start: int = 0) -> int:
    """The index after the newest client compaction summary in items[start:] (a user message
    whose text begins with one of CLIENT_SUMMARY_PREFIXES), else `start`."""
    for i in range(len(items) - 1, start - 1, -1):
        if view.role(items[i]) == "user" and (view.text(items[i]) or "").startswith(CLIENT_SUMMARY_PREFIXES):
            return i + 1
    return start


def trigger_index(items: list[Any], view: ItemView) -> int | None:
    """The index of the `compaction_trigger` item that ends `items`, if one does (the API
    refuses one anywhere else)."""
    return len(items) - 1 if items and view.is_compaction_trigger(items[-1]) else None


def clearable_calls(items: list[Any], view: ItemView, provider: ProviderContext, *, start: int = 0) -> set[str]:
    """The ids of the calls (in items[start:]) whose results the provider's clear edit may clear:
    all but the `keep_tool_uses` most recent calls and the calls of `exclude_tools`. Empty when
    the request carries no such edit."""
    if not provider.clears_tool_results:
        return set()
    calls: list[str] = []
    excluded: set[str] = set()
    for item in items[start:]:
        ids = view.calls(item)
        names = [name for name, _ in view.call_details(item)]
        for k, call_id in enumerate(ids):
            calls.append(call_id)
            if k < len(names) and names[k] in provider.exclude_tools:
                excluded.add(call_id)
    kept = set(calls[len(calls) - provider.keep_tool_uses :]) if provider.keep_tool_uses > 0 else set()
    return {c for c in calls if c not in kept and c not in excluded}
