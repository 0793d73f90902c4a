"""The Anthropic Messages API as a `proxy.core.wire.WireFormat`.

The history the core reduces is `messages` (a user message holding several tool results split
into parts, see `proxy.formats.messages._items`); `system` stays where it is,
never summarised. Nothing is stored upstream (`stored` is False).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from proxy.core.answers import UsageReader
from proxy.core.compaction import ProviderContext
from proxy.core.jsonio import JsonObject
from proxy.core.texts import INJECTED_TOOLS
from proxy.formats.messages._emulation import MessagesCompaction, MessagesEdits
from proxy.formats.messages._items import MessagesView
from proxy.formats.messages._request import (
    colliding_tool_names,
    history,
    parse_messages_body,
    provider_context,
    summary_answer,
    summary_request,
    with_caching,
    with_history,
)
from proxy.formats.messages._rounds import USAGE, MessagesRounds


class MessagesFormat:
    endpoint = "messages"
    usage: UsageReader = USAGE
    view = MessagesView(INJECTED_TOOLS)
    stored = False
    compaction_emulation = MessagesCompaction()
    clearing_edits = MessagesEdits(view)

    def parse(self, raw: bytes, *, max_items: int | None) -> JsonObject:
        return parse_messages_body(raw, max_items=max_items)

    def history(self, body: JsonObject) -> list[Any]:
        return history(body)

    def with_history(self, body: JsonObject, items: list[Any]) -> JsonObject:
        return with_history(body, items)

    def colliding_tool_names(self, body: JsonObject) -> set[str]:
        return colliding_tool_names(body, INJECTED_TOOLS)

    def with_prompt_cache(
        self, body: JsonObject, *, key: str | None, mentions: Callable[[bytes], bool] | None = None
    ) -> JsonObject:
        return with_caching(body, mentions=mentions)

    def provider_context(self, body: JsonObject) -> ProviderContext:
        return provider_context(body)

    def rounds(
        self,
        body: JsonObject,
        items: list[Any],
        tools: Sequence[JsonObject],
        *,
        extra_usage: JsonObject | None,
    ) -> MessagesRounds:
        return MessagesRounds(body, items, tools, names=INJECTED_TOOLS, extra_usage=extra_usage)

    def summary_request(
        self, body: JsonObject, prefix: list[Any], instruction: str, *, tools: Sequence[JsonObject], model: str
    ) -> tuple[str, JsonObject]:
        return summary_request(body, prefix, instruction, tools=tools, model=model)

    def summary_answer(self, answer: Any) -> tuple[str, int, int]:
        return summary_answer(answer)


MESSAGES = MessagesFormat()
