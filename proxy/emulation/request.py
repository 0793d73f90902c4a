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
from proxy.emulation.tokens_in_input import replace_tokens
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

    @property
    def changed(self) -> bool:
        return self.replaced or self.asked is not None


async def begin(body: dict, items: list[Any], *, view: ItemView, emulating: bool, tokens: bool,
                records: CompactionRecords) -> Emulation:
    """`tokens`: the format's items may carry the proxy's compaction tokens (Responses)."""
    result = Emulation(emulating, body, items)
    if tokens:
        try:
            replaced = await replace_tokens(items, view, records, emulating=emulating)
        except StoreUnavailable as exc:
            raise ProxyError(503, "The proxy's store is unavailable, and this input holds a compaction item whose "
                                  f"content the store keeps; try again ({exc}).", type_="server_error",
                             code="store_unavailable") from exc
        if replaced is not None:
            result.items, result.replaced = replaced, True
    if emulating and "context_management" in body:
        result.asked = body["context_management"]
        result.body = {k: v for k, v in body.items() if k != "context_management"}
    return result
