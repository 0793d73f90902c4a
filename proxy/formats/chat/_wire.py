"""Chat Completions as a `proxy.core.wire.WireFormat`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from proxy.core.answers import UsageReader
from proxy.core.compaction import NONE, ProviderContext
from proxy.core.jsonio import JsonObject
from proxy.formats.chat._items import VIEW
from proxy.formats.chat._request import colliding_tool_names, parse_chat_body, summary_answer, summary_request
from proxy.formats.chat._rounds import USAGE, ChatRounds
from proxy.formats.prompt_cache import with_cache_key


class ChatFormat:
    endpoint = "chat/completions"
    usage: UsageReader = USAGE
    view = VIEW
    stored = False
    compaction_emulation = None  # chat completions have no context management to emulate
    clearing_edits = None

    def parse(self, raw: bytes, *, max_items: int | None) -> JsonObject:
        return parse_chat_body(raw, max_messages=max_items)

    def history(self, body: JsonObject) -> list[Any]:
        messages = body.get("messages")
        return messages if isinstance(messages, list) else []  # else: the upstream validates

    def with_history(self, body: JsonObject, items: list[Any]) -> JsonObject:
        return {**body, "messages": items}

    def colliding_tool_names(self, body: JsonObject) -> set[str]:
        return set(colliding_tool_names(body))

    def with_prompt_cache(
        self, body: JsonObject, *, key: str | None, mentions: Callable[[bytes], bool] | None = None
    ) -> JsonObject:
        return with_cache_key(body, key)

    def provider_context(self, body: JsonObject) -> ProviderContext:
        return NONE  # chat completions has no server-side context management

    def rounds(
        self,
        body: JsonObject,
        items: list[Any],
        tools: Sequence[JsonObject],
        *,
        extra_usage: JsonObject | None,
    ) -> ChatRounds:
        return ChatRounds(body, items, tools, extra_usage=extra_usage)

    def summary_request(
        self, body: JsonObject, prefix: list[Any], instruction: str, *, tools: Sequence[JsonObject], model: str
    ) -> tuple[str, JsonObject]:
        return summary_request(body, prefix, instruction, tools=tools, model=model)

    def summary_answer(self, answer: Any) -> tuple[str, int, int]:
        return summary_answer(answer)


CHAT = ChatFormat()
