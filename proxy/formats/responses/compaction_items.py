"""Responses `compaction` items carrying the proxy's tokens, replaced by what they stand for.

A `compaction` item whose `encrypted_content` is one of the proxy's tokens
(`proxy.core.compaction`) means nothing to any upstream. Before planning, whichever way
the request goes (relayed or emulated):

- the newest compaction item is ours: it is replaced by its record (the summary with its
  `ref=`, and what the compaction kept) and, as the provider would ignore them, the non-system
  items before it are dropped (older compaction items, ours or the provider's, with them). The
  record's system/developer items that the request carries again (same role, same text: a
  client re-sending its instructions, as Codex and agents do after a compaction) are left out
  of it, so each reaches the upstream once;
- the newest is the provider's: relayed, the provider reads it and ignores what precedes it, so
  the older items of ours are dropped (never sent); emulated, it is refused (400): nothing
  could read it.

A record holding a compaction item of ours (one written before records were kept free of them)
is expanded in turn, a bounded number of times.
"""

from __future__ import annotations

from typing import Any

from proxy.core.compaction import Records, TokenError, is_ours
from proxy.core.view import ItemView
from proxy.errors import Kind, ProxyError

MAX_NESTED = 8  # records expanded inside one another (records written now never nest)


def _content(item: Any) -> Any:
    return item.get("encrypted_content") if isinstance(item, dict) else None


def _refused(param: str, why: str) -> ProxyError:
    return ProxyError(
        Kind.BAD_REQUEST,
        f"{param.removesuffix('.encrypted_content')} is a compaction item this proxy cannot use: {why}.",
        code="invalid_compaction",
        param=param,
    )


def _said_again(item: Any, view: ItemView) -> Any:
    """What makes a system/developer item the same instruction as another (None: not one)."""
    if view.role(item) != "system":
        return None
    text = view.text(item)
    return ("text", text) if text is not None else ("item", repr(item))


async def replace_tokens(items: list[Any], view: ItemView, records: Records, *, emulating: bool) -> list[Any] | None:
    """The input with the proxy's compaction items settled (see the module docstring), or None
    when it holds none of ours (nor a foreign one an emulating upstream must refuse).
    ProxyError 400 for a token that is another namespace's, malformed, or whose record the store
    no longer holds."""
    out, changed, where = items, False, None
    for _ in range(MAX_NESTED):
        newest = next((i for i in range(len(out) - 1, -1, -1) if view.is_provider_compaction(out[i])), None)
        if newest is None:
            return out if changed else None
        param = where or f"input[{newest}].encrypted_content"
        content = _content(out[newest])
        if not is_ours(content):
            if emulating:
                raise _refused(
                    param,
                    "its encrypted_content was made by the provider, not by this proxy, and this "
                    "upstream does not apply context management (X-Offload-Context-Management: "
                    "relay sends it on unchanged)",
                )
            # a set: 20,000 of ours before a foreign one must not cost 20,000² list lookups on the event loop
            ours = {i for i in range(newest) if view.is_provider_compaction(out[i]) and is_ours(_content(out[i]))}
            return [m for i, m in enumerate(out) if i not in ours] if ours else (out if changed else None)
        try:
            stands_for = await records.stands_for(content)
        except TokenError as exc:
            raise _refused(param, str(exc)) from None
        kept = [m for m in out[:newest] if view.role(m) == "system"]
        said = {key for m in (*kept, *out[newest + 1 :]) if (key := _said_again(m, view)) is not None}
        record = [m for m in stands_for if _said_again(m, view) not in said]
        out, changed, where = [*kept, *record, *out[newest + 1 :]], True, param
    raise _refused(where or "input", f"its record holds compaction items nested more than {MAX_NESTED} deep")
