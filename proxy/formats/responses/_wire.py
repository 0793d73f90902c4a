"""The Responses API as a `proxy.core.wire.WireFormat`.

The history the core reduces is `input` (a string input is one user message); `instructions`
stays where it is, never summarised. What lives upstream (`previous_response_id`,
`conversation`) is not the proxy's to reduce: only what the request carries is offloaded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from proxy.core.answers import UsageReader
from proxy.core.compaction import ProviderContext
from proxy.core.jsonio import JsonObject
from proxy.core.texts import INJECTED_TOOLS
from proxy.formats.prompt_cache import with_cache_key
from proxy.formats.responses._compaction import ResponsesCompaction
from proxy.formats.responses._items import ResponsesView
from proxy.formats.responses._request import (
    colliding_tool_names,
    history,
    parse_responses_body,
    provider_context,
    summary_answer,
    summary_request,
    with_history,
)
from proxy.formats.responses._rounds import USAGE, ResponsesRounds


class ResponsesFormat:
    endpoint = "responses"
    usage: UsageReader = USAGE
    view = ResponsesView(INJECTED_TOOLS)
    stored = True
    compaction_emulation = ResponsesCompaction(view)
    clearing_edits = None  # OpenAI has none

    def parse(self, raw: bytes, *, max_items: int | None) -> JsonObject:
        return parse_responses_body(raw, max_items=max_items)

    def history(self, body: JsonObject) -> list[Any]:
        return history(body)

    def with_history(self, body: JsonObject, items: list[Any]) -> JsonObject:
        return with_history(body, items)

    def colliding_tool_names(self, body: JsonObject) -> set[str]:
        return colliding_tool_names(body, INJECTED_TOOLS)

    def with_prompt_cache(
        self, body: JsonObject, *, key: str | None, mentions: Callable[[bytes], bool] | None = None
    ) -> JsonObject:
        return with_cache_key(body, key)

    def provider_context(self, body: JsonObject) -> ProviderContext:
        return provider_context(body, self.view)

    def rounds(
        self,
        body: JsonObject,
        items: list[Any],
        tools: Sequence[JsonObject],
        *,
        extra_usage: JsonObject | None,
    ) -> ResponsesRounds:
        return ResponsesRounds(body, items, tools, names=INJECTED_TOOLS, extra_usage=extra_usage)

    def summary_request(
        self, body: JsonObject, prefix: list[Any], instruction: str, *, tools: Sequence[JsonObject], model: str
    ) -> tuple[str, JsonObject]:
        return summary_request(body, prefix, instruction, tools=tools, model=model)

    def summary_answer(self, answer: Any) -> tuple[str, int, int]:
        return summary_answer(answer)


RESPONSES = ResponsesFormat()
