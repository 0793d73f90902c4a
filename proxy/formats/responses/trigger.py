"""A Responses `compaction_trigger` ("compact now"), emulated: the request's checks. Pure.

Codex's remote compaction ("compaction v2") is a normal streamed `POST /v1/responses` whose
last input item is `{"type": "compaction_trigger"}`; it requires exactly one `compaction`
output item back, then sends that item in its next request's input, after the user messages
it keeps. An upstream without context management ignores the trigger, so when the proxy
emulates (`proxy.upstream.base_url.emulates`) the turn (`proxy.turn`) asks nothing of the
upstream: the items before the trigger (the proxy's own token in them already expanded,
`proxy.turn._context_tokens.begin`) are compacted by the emulated `/responses/compact`'s
`proxy.turn._compact_now.compact`, and the answer is that compaction item alone
(`Inline.paused`; `ProviderCompaction.paused_answer`, streamed or not). Relaying, the request goes
upstream unchanged: the provider compacts.

What the emulation refuses (400, in OpenAI's shape, naming the item): a trigger that is not the
last input item (two triggers: the first is not last; OpenAI: "The 'compaction_trigger' item
must be the final input item."), a trigger with any field besides `type` (OpenAI refuses an
`id` on it), nothing before the trigger to compact, and a trigger that continues state the
proxy does not hold (`previous_response_id`, `conversation`) or asks to run in the background.
A summary that cannot be made is a 502 `compaction_failed`, a store that is down a 503, a spent
quota a 429: no token standing for nothing is answered.
"""

from __future__ import annotations

from typing import Any

from proxy.core.view import ItemView
from proxy.errors import Kind, ProxyError

TYPE = "compaction_trigger"
_ELSEWHERE = ("previous_response_id", "conversation")  # state kept upstream, not in the proxy's hands


def asked(body: dict[str, Any], items: list[Any], view: ItemView) -> bool:
    """Does the request ask for a compaction now (its input ends in a `compaction_trigger`)?
    ProxyError 400 for a trigger the emulation cannot take (the module docstring). `items`: the
    request's input as sent (`WireFormat.history`), read once, only for triggers."""
    found = [i for i, item in enumerate(items) if view.is_compaction_trigger(item)]
    if not found:
        return False
    last = len(items) - 1
    for i in found:
        if i != last:
            raise ProxyError(
                Kind.BAD_REQUEST,
                f"input[{i}]: The 'compaction_trigger' item must be the final input item.",
                code="invalid_value",
                param=f"input[{i}]",
            )
    extra = [k for k in items[last] if k != "type"]
    if extra:
        name = str(extra[0])[:64]
        raise ProxyError(
            Kind.BAD_REQUEST,
            f"Unknown parameter: 'input[{last}].{name}'. A compaction_trigger item carries its type alone.",
            code="unknown_parameter",
            param=f"input[{last}].{name}",
        )
    for key in _ELSEWHERE:
        if body.get(key) is not None:
            raise ProxyError(
                Kind.BAD_REQUEST,
                f"This proxy compacts the history it is sent: with an upstream that does not compact "
                f"natively, a compaction_trigger cannot be used with {key}; send the history as "
                "'input'.",
                code="unsupported_parameter",
                param=key,
            )
    if body.get("background") is True:
        raise ProxyError(
            Kind.BAD_REQUEST,
            "This proxy answers a compaction_trigger itself, at once: background is not supported "
            "with it (the upstream would hold no response to poll).",
            code="unsupported_parameter",
            param="background",
        )
    return True
