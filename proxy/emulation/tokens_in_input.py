"""Responses `compaction` items carrying the proxy's tokens, replaced by what they stand for.

A `compaction` item whose `encrypted_content` is one of the proxy's tokens
(`proxy.core.compaction_token`) means nothing to any upstream: before planning, the newest one
is replaced by its record (the summary with its `ref=`, and what the compaction kept) and, as
the provider would ignore them, the non-system items before it are dropped (older tokens of
ours with them). A provider's own compaction item is relayed to an upstream that applies
context management and refused (400) by an emulating one: nothing could read it.
"""

from __future__ import annotations

from typing import Any

from proxy.core.compaction_token import TokenError, is_ours
from proxy.core.view import ItemView
from proxy.errors import ProxyError
from proxy.offload.compaction_records import CompactionRecords


def _content(item: Any) -> Any:
    return item.get("encrypted_content") if isinstance(item, dict) else None


def _refused(index: int, why: str) -> ProxyError:
    return ProxyError(400, f"input[{index}] is a compaction item this proxy cannot use: {why}.",
                      code="invalid_compaction", param=f"input[{index}].encrypted_content")


async def replace_tokens(items: list[Any], view: ItemView, records: CompactionRecords, *,
                         emulating: bool) -> list[Any] | None:
    """The input with the proxy's newest compaction item replaced, or None when it holds none of
    ours (nor a foreign one an emulating upstream must refuse). ProxyError 400 for a token that
    is another namespace's, malformed, or whose record the store no longer holds."""
    newest = None
    for i in range(len(items) - 1, -1, -1):
        if view.is_provider_compaction(items[i]):
            newest = i
            break
    if newest is None:
        return None
    content = _content(items[newest])
    if not is_ours(content):
        if emulating:
            raise _refused(newest, "its encrypted_content was made by the provider, not by this proxy, and this "
                                   "upstream does not apply context management (X-Offload-Context-Management: "
                                   "relay sends it on unchanged)")
        # a set: 20,000 of ours before a foreign one must not cost 20,000² list lookups on the event loop
        ours_before = {i for i in range(newest) if is_ours(_content(items[i])) and view.is_provider_compaction(items[i])}
        return [m for i, m in enumerate(items) if i not in ours_before] if ours_before else None
    try:
        stands_for = await records.stands_for(content)
    except TokenError as exc:
        raise _refused(newest, str(exc)) from None
    kept = [m for m in items[:newest] if view.role(m) == "system"]
    return [*kept, *stands_for, *items[newest + 1:]]
