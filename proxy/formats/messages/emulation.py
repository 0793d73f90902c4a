"""What the proxy does in place of Anthropic's context management, for a Messages upstream
without it: its compaction (a `proxy.core.wire.ProviderCompaction`: `compaction` blocks,
`compaction_blocks`; `compact_20260112` thresholds, `threshold`; the answer paused after one,
`compaction`) and its clearing edits (a `proxy.core.wire.ClearingEdits`: `edits`,
`edits_config`). Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.core.compaction import Edited, Expanded, Records, Threshold
from proxy.core.texts import INJECTED_TOOLS
from proxy.core.tokens import TokenCounter
from proxy.formats.messages.compaction import paused_events, paused_message
from proxy.formats.messages.compaction_blocks import replace_compaction_blocks
from proxy.formats.messages.edits import apply_edits
from proxy.formats.messages.edits_config import parse_context_management
from proxy.formats.messages.items import MessagesView
from proxy.formats.messages.reload_rounds import MessagesRounds
from proxy.formats.messages.request import history, messages_of
from proxy.formats.messages.threshold import messages_threshold


def _index(text: str) -> int | None:
    return int(text) if text.isdigit() else None


class MessagesCompaction:
    records_api = "messages"

    def threshold(self, asked: Any) -> Threshold | None:
        return messages_threshold(asked)

    def settles(self, body: dict[str, Any], path: str) -> bool:
        """`messages[i].content[j].encrypted_content` of a `compaction` block."""
        if not path.startswith("messages["):
            return False
        i, _, rest = path.removeprefix("messages[").partition("].content[")
        at, block = _index(i), _index(rest.removesuffix("].encrypted_content"))
        if at is None or block is None:
            return False
        try:
            return bool(body["messages"][at]["content"][block].get("type") == "compaction")
        except (KeyError, IndexError, TypeError, AttributeError):
            return False

    async def expand(
        self, body: dict[str, Any], items: list[Any], records: Records, *, emulating: bool
    ) -> Expanded | None:
        if not isinstance(body.get("messages"), list):
            return None
        messages = await replace_compaction_blocks(body["messages"], records, emulating=emulating)
        if messages is None:
            return None
        expanded = {**body, "messages": messages}
        return Expanded(expanded, history(expanded), messages, "messages")

    def record(self, reduced: list[Any]) -> list[Any]:
        """The messages forwarded now."""
        return messages_of(reduced)

    def lead(self, summary: str, token: str) -> dict[str, Any]:
        return {"type": "compaction", "content": summary, "encrypted_content": token}

    def compacts_now(self, body: dict[str, Any], items: list[Any]) -> bool:
        return False  # Anthropic has no "compact now"

    def rounds(
        self,
        body: dict[str, Any],
        items: list[Any],
        tools: Sequence[dict[str, Any]],
        *,
        extra_usage: dict[str, Any] | None,
        lead: Sequence[dict[str, Any]],
    ) -> MessagesRounds:
        return MessagesRounds(body, items, tools, names=INJECTED_TOOLS, extra_usage=extra_usage, lead=lead)

    def paused_answer(
        self, lead: list[dict[str, Any]], *, body: dict[str, Any], created_at: int, tokens_in: int, tokens_out: int
    ) -> dict[str, Any]:
        return paused_message(lead[0], model=body.get("model"), tokens_in=tokens_in, tokens_out=tokens_out)

    def paused_events(self, answer: dict[str, Any]) -> list[dict[str, Any]]:
        return paused_events(answer)


class MessagesEdits:
    def __init__(self, view: MessagesView) -> None:
        self.view = view

    def apply(
        self,
        asked: Any,
        items: list[Any],
        *,
        counter: TokenCounter,
        namespace: str,
        fixed_tokens: int,
        tool_uses: bool = True,
    ) -> Edited:
        edits = parse_context_management(asked)
        return apply_edits(
            items,
            edits,
            self.view,
            counter=counter,
            namespace=namespace,
            fixed_tokens=fixed_tokens,
            clear_tool_uses_=tool_uses,
        )
