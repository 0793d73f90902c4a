"""What the proxy does in place of OpenAI's compaction, for a Responses upstream without it (a
`proxy.core.wire.ProviderCompaction`): `compaction` items carrying its tokens
(`compaction_items`), `context_management` thresholds (`threshold`), a `compaction_trigger`
(`trigger`), and the answers that carry its compaction (`compact`). Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.core.compaction import Expanded, Records, Threshold
from proxy.core.texts import INJECTED_TOOLS
from proxy.formats.responses import trigger
from proxy.formats.responses.compact import compaction_item, triggered_events, triggered_response
from proxy.formats.responses.compaction_items import replace_tokens
from proxy.formats.responses.items import ResponsesView
from proxy.formats.responses.reload_rounds import ResponsesRounds
from proxy.formats.responses.threshold import responses_threshold

_POSITION = ("input[", "].encrypted_content")


class ResponsesCompaction:
    records_api = "responses"

    def __init__(self, view: ResponsesView) -> None:
        self.view = view

    def threshold(self, asked: Any) -> Threshold | None:
        return responses_threshold(asked)

    def settles(self, body: dict[str, Any], path: str) -> bool:
        """`input[i].encrypted_content` of a top-level `compaction` item."""
        head, tail = _POSITION
        index = path.removeprefix(head).removesuffix(tail)
        if not path.startswith(head) or not index.isdigit():
            return False
        try:
            return bool(body["input"][int(index)].get("type") == "compaction")
        except (KeyError, IndexError, TypeError, AttributeError):
            return False

    async def expand(
        self, body: dict[str, Any], items: list[Any], records: Records, *, emulating: bool
    ) -> Expanded | None:
        replaced = await replace_tokens(items, self.view, records, emulating=emulating)
        return None if replaced is None else Expanded(body, replaced, replaced, "input")

    def record(self, reduced: list[Any]) -> list[Any]:
        """The whole reduced input, less the system/developer items (the request carries them)."""
        return [m for m in reduced if self.view.role(m) != "system"]

    def lead(self, summary: str, token: str) -> dict[str, Any]:
        return compaction_item(token)

    def compacts_now(self, body: dict[str, Any], items: list[Any]) -> bool:
        return trigger.asked(body, items, self.view)

    def rounds(
        self,
        body: dict[str, Any],
        items: list[Any],
        tools: Sequence[dict[str, Any]],
        *,
        extra_usage: dict[str, Any] | None,
        lead: Sequence[dict[str, Any]],
    ) -> ResponsesRounds:
        return ResponsesRounds(body, items, tools, names=INJECTED_TOOLS, extra_usage=extra_usage, lead=lead)

    def paused_answer(
        self, lead: list[dict[str, Any]], *, body: dict[str, Any], created_at: int, tokens_in: int, tokens_out: int
    ) -> dict[str, Any]:
        return triggered_response(lead, request=body, created_at=created_at, tokens_in=tokens_in, tokens_out=tokens_out)

    def paused_events(self, answer: dict[str, Any]) -> list[dict[str, Any]]:
        return triggered_events(answer)
