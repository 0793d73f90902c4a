"""When compaction replaces a tool result by its preview: one rule, for compaction
(`proxy.core.compaction`) and for folding (`proxy.core.fold`: no fold points to a result shown
as a preview). Pure.

Only in a history over `max_total_tokens`: a result over `max_tool_message_tokens`
(`OffloadSettings.tool_result_limit`) outside the `keep_recent` last items, and a result over
`max_fresh_tool_message_tokens` wherever it is, the recent tail included (a single huge result,
a whole file or a runaway log, would otherwise go whole on the turn it arrives and overflow the
model's window). A result so replaced on arrival is replaced on every later turn by the same
bytes: it stays over both sizes, and a history only grows.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.core.settings import OffloadSettings


@dataclass(frozen=True)
class CompactionRule:
    max_total_tokens: int
    max_tool_message_tokens: int
    keep_recent: int
    max_fresh_tool_message_tokens: int

    @classmethod
    def of(cls, settings: OffloadSettings, *, keep_recent: int) -> CompactionRule:
        """The rule of `settings`; `keep_recent`: the tail's default when the settings leave it unset."""
        return cls(
            settings.max_total_tokens,
            settings.tool_result_limit(),
            settings.keep_recent_for(keep_recent),
            settings.max_fresh_tool_message_tokens,
        )

    def replaces(self, tokens: int, *, index: int, length: int, total: int) -> bool:
        """A result of `tokens` at items[index] of a history of `length` items and `total` tokens
        is replaced by its preview."""
        if total <= self.max_total_tokens:
            return False
        return tokens > self.max_fresh_tool_message_tokens or (
            index < length - self.keep_recent and tokens > self.max_tool_message_tokens
        )
