"""What one managed request needs of the emulation before it is planned (a step of `proxy.turn`).

`begin` decides whether the proxy applies the request's context management itself
(`proxy.upstream.base_url.emulates`), settles the proxy's own compaction tokens (whichever way),
and, when emulating, takes `context_management` out of the body that goes upstream (an
upstream without it would refuse or ignore it) and keeps it in `asked` for the emulation to
apply.

It is the one place that keeps the rule: no compaction token of the proxy's reaches any
upstream. Every managed request (chat, Responses, Messages, `count_tokens`) and the relayed
Responses paths (`/responses/input_tokens`, `/responses/compact`, emulated or relayed) go
through it. A token in a compaction position (a Responses `compaction` item, a Messages
`compaction` block: `ProviderCompaction.settles`) is expanded or dropped by its format's rule
(`ProviderCompaction.expand`); one in any other `encrypted_content` (a reasoning item, a block nested
in a tool result, a chat message) is a 400 `invalid_compaction` naming the field. Text that
merely spells a token is content and goes as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proxy.core import jsonio
from proxy.core.compaction import Records, Threshold, escapes_ascii, may_hold_token, sealed_fields
from proxy.core.wire import WireFormat
from proxy.errors import Kind, ProxyError
from proxy.formats.json_body import LARGE_BODY
from proxy.offload.cpu_pool import CPU
from proxy.store import StoreUnavailable


@dataclass
class Emulation:
    emulating: bool  # the proxy applies context management for this request's upstream
    body: dict[str, Any]  # the body as it goes on (without `context_management` when emulating)
    items: list[Any]  # the history as it goes on (the proxy's tokens replaced)
    asked: Any = None  # the `context_management` the client asked for, when the proxy applies it
    replaced: bool = False  # a token of ours was replaced (or may be spelled in it): the body is re-serialised
    threshold: Threshold | None = None  # the threshold compaction asked, when the proxy applies it
    # what the answer's `context_management.applied_edits` says (Messages, `proxy.turn._context_edits`);
    # None: the answer is not rewritten for it
    applied_edits: list[dict[str, Any]] | None = None

    @property
    def changed(self) -> bool:
        return self.replaced or self.asked is not None


def _stray(value: Any, *, where: str, settled: Callable[[str], bool] | None = None) -> None:
    """ProxyError 400 for a token of ours in an `encrypted_content` of `value` that is not a
    compaction position (`settled(path)` says which ones its format settles)."""
    for path in sealed_fields(value, where):
        if settled is None or not settled(path):
            raise ProxyError(
                Kind.BAD_REQUEST,
                f"{path} holds a compaction token of this proxy's outside a compaction item: only a "
                "`compaction` item (Responses) or block (Messages) may carry one.",
                code="invalid_compaction",
                param=path,
            )


def _may_hold(raw: bytes | None, body: dict[str, Any]) -> bool:
    """`may_hold_token` of the body's bytes, when they escape no printable ASCII character; else
    of the document written again (such an escape may spell the key)."""
    if raw is not None and not escapes_ascii(raw):
        return may_hold_token(raw)
    return may_hold_token(jsonio.dumps(body))


async def begin(
    body: dict[str, Any],
    items: list[Any],
    *,
    fmt: WireFormat,
    emulating: bool,
    records: Records | None,
    raw: bytes | None = None,
) -> Emulation:
    """`fmt`: the request's format (its `compaction_emulation` settles its compaction positions;
    `records` are its records, unused by a format without one); `raw`: the body's bytes, when
    at hand (a quick test that it holds no token at all)."""
    compaction = fmt.compaction_emulation
    cpu = CPU(raw is None or len(raw) > LARGE_BODY)  # a large body is searched and walked off the event loop
    scan = await cpu(_may_hold, raw, body)
    if scan:  # before anything else: no token in another position is expanded, nor sent
        settled = None if compaction is None else (lambda path: compaction.settles(body, path))
        await cpu(lambda: _stray(body, where="", settled=settled))
    result = Emulation(emulating, body, items)
    if emulating and "context_management" in body:  # checked first: a malformed one is a 400 whatever the input
        asked = body["context_management"]
        result.threshold = None if compaction is None else compaction.threshold(asked)
        result.asked = asked
        result.body = body = {k: v for k, v in body.items() if k != "context_management"}
    try:
        expanded = None
        if compaction is not None and records is not None:
            expanded = await compaction.expand(body, items, records, emulating=emulating)
        if expanded is not None:
            result.body, result.items, result.replaced = expanded.body, expanded.items, True
            if scan:  # what the records brought: none may hold a token any more
                await cpu(lambda: _stray(expanded.checked, where=expanded.where))  # a large one off the loop
        # the upstream gets the object checked, re-serialised: a duplicate key in the bytes as sent
        # cannot show it a token the check never saw
        result.replaced = result.replaced or scan
    except StoreUnavailable as exc:
        raise ProxyError(
            Kind.STORE_UNAVAILABLE,
            "The proxy's store is unavailable, and this input holds a compaction item whose "
            f"content the store keeps; try again ({exc}).",
            code="store_unavailable",
        ) from exc
    return result
