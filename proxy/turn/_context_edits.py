"""Anthropic's clearing edits (`clear_tool_uses_20250919`, `clear_thinking_20251015`) applied by
the proxy for an upstream that does not apply them (a step of `proxy.turn`: the IO side; the
rules are the format's, `WireFormat.clearing_edits`: `proxy.formats.messages._clearing_edits`, the
config `proxy.formats.messages._clearing_edits`).

`apply` checks the request's `context_management` (a 400 for a bad one), applies the edits to
the history before the proxy's own planning, and stores what the cleared tool results and
inputs were, so every marker stays reloadable. When nothing can be stored the tool results stay
as they are (a warning says so) and only thinking is cleared: a marker whose ref resolves to
nothing would lose the content. `settle` tells the rest of the request: `X-Offload-Action`
gains `+context-edits`, a `context_edit` event is recorded, and the answer (streamed or not)
carries `context_management.applied_edits` (`MessagesRounds.context_management`).
`count_tokens` adds Anthropic's `context_management.original_input_tokens`
(`proxy.http.emulated_answers`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass, field
from typing import Any

from proxy.core.compaction import EDITS_ACTION, Offload
from proxy.core.rounds import Rounds
from proxy.core.tokens import TokenCounter
from proxy.core.wire import WireFormat
from proxy.offload import cpu_pool
from proxy.offload.pipeline import Prepared
from proxy.offload.quota import WRITE_REFUSED, refusal_warning
from proxy.offload.records import RefStore, event
from proxy.turn._context_tokens import Emulation

log = logging.getLogger("proxy.turn._context_edits")


@dataclass
class EditsDone:
    items: list[Any]
    applied: list[dict[str, Any]] | None = None  # None: no edits emulated in this request
    offloads: list[Offload] = field(default_factory=list)
    cleared_tokens: int = 0
    warnings: list[str] = field(default_factory=list)


async def apply(
    emulation: Emulation,
    items: list[Any],
    *,
    fmt: WireFormat,
    body: dict[str, Any],
    counter: TokenCounter,
    refs: RefStore,
    namespace: str,
    session: str | None,
) -> EditsDone:
    """The history with the request's clearing edits applied (see the module docstring); the
    HTTP layer's 400 error for a malformed `context_management`."""
    clearing = fmt.clearing_edits
    if not emulation.emulating or emulation.asked is None or clearing is None:
        return EditsDone(items)
    counter = counter.for_request()
    fixed = counter.outside_history(body)
    run = functools.partial(
        clearing.apply, emulation.asked, items, counter=counter, namespace=namespace, fixed_tokens=fixed
    )
    cpu = cpu_pool.CPU.for_messages(items)
    edited = await cpu(run)
    warnings: list[str] = []
    if edited.offloads:
        try:
            await refs.admit()
            await refs.save(edited.offloads, [o.ref for o in edited.offloads], session, cpu=cpu)
        except WRITE_REFUSED as exc:
            warnings.append(
                f"{refusal_warning(exc)}; clear_tool_uses_20250919 not applied (the cleared content could not be kept)"
            )
            log.warning("context edits: %s", warnings[-1])
            edited = await cpu(functools.partial(run, tool_uses=False))
    emulation.applied_edits = edited.applied
    return EditsDone(edited.items, edited.applied, edited.offloads, edited.cleared_tokens, warnings)


def settle(done: EditsDone, prepared: Prepared, rounds: Rounds) -> Prepared:
    """After planning: `prepared` with the action, event and warnings of the edits (a new
    value); the answer's field set on `rounds`."""
    if done.applied is None:
        return prepared
    if done.applied:
        prepared = dataclasses.replace(
            prepared,
            events=[*prepared.events, event("context_edit", emulated=True, edits=done.applied)],
            plan=dataclasses.replace(
                prepared.plan, tokens_before=prepared.plan.tokens_before + done.cleared_tokens
            ),  # what the client sent
        ).with_action(EDITS_ACTION)
    rounds.context_management = {"applied_edits": done.applied}
    return dataclasses.replace(prepared, warnings=[*prepared.warnings, *done.warnings])
