"""What one managed request needs of the emulation before it is planned.

`begin` decides whether the proxy applies the request's context management itself
(`proxy.upstream.native.emulates`), replaces the proxy's own compaction tokens in a Responses
input (whichever way: no upstream can read them), and, when emulating, takes
`context_management` out of the body that goes upstream (an upstream without it would refuse
or ignore it) and keeps it in `asked` for the emulation to apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.core.view import ItemView
from proxy.emulation.compaction_blocks import replace_compaction_blocks
from proxy.emulation.threshold import Threshold, messages_threshold, responses_threshold
from proxy.emulation.tokens_in_input import replace_tokens
from proxy.formats.messages.request import history as messages_history
from proxy.errors import ProxyError
from proxy.offload.compaction_records import CompactionRecords
from proxy.store import StoreUnavailable


@dataclass
class Emulation:
    emulating: bool  # the proxy applies context management for this request's upstream
    body: dict  # the body as it goes on (without `context_management` when emulating)
    items: list[Any]  # the history as it goes on (the proxy's tokens replaced)
    asked: Any = None  # the `context_management` the client asked for, when the proxy applies it
    replaced: bool = False  # a token of ours was replaced: the body must be re-serialised
    threshold: Threshold | None = None  # the threshold compaction asked, when the proxy applies it
    # what the answer's `context_management.applied_edits` says (Messages, `proxy.emulation.edits`);
    # None: the answer is not rewritten for it
    applied_edits: list[dict] | None = None

    @property
    def changed(self) -> bool:
        return self.replaced or self.asked is not None


async def begin(body: dict, items: list[Any], *, view: ItemView, emulating: bool, tokens: bool,
                records: CompactionRecords, blocks: bool = False) -> Emulation:
    """`tokens`: the format's items may carry the proxy's compaction tokens (Responses);
    `blocks`: its messages may hold `compaction` blocks (Messages, `compaction_blocks`)."""
    result = Emulation(emulating, body, items)
    if emulating and "context_management" in body:  # checked first: a malformed one is a 400 whatever the input
        asked = body["context_management"]
        result.threshold = responses_threshold(asked) if tokens else messages_threshold(asked) if blocks else None
        result.asked = asked
        result.body = body = {k: v for k, v in body.items() if k != "context_management"}
    try:
        if tokens:
            replaced = await replace_tokens(items, view, records, emulating=emulating)
            if replaced is not None:
                result.items, result.replaced = replaced, True
        elif blocks and isinstance(body.get("messages"), list):
            messages = await replace_compaction_blocks(body["messages"], records, emulating=emulating)
            if messages is not None:
                result.body = {**body, "messages": messages}
                result.items, result.replaced = messages_history(result.body), True
    except StoreUnavailable as exc:
        raise ProxyError(503, "The proxy's store is unavailable, and this input holds a compaction item whose "
                              f"content the store keeps; try again ({exc}).", type_="server_error",
                         code="store_unavailable") from exc
    return result
