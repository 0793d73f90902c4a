"""The values between the turn and a format's emulation of its provider's context management
(`proxy.core.wire.ProviderCompaction`, `ClearingEdits`). Pure.

The turn (`proxy.turn._context_tokens`, `proxy.turn._context_compaction`, `proxy.turn._context_edits`) does the
format-neutral steps (the stores, the summariser, the plan); each format reads its own request
into these values and writes its own answer from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.core.compaction import Offload

# What X-Offload-Action gains when the proxy applied the provider's context management itself
# (alone, or after a `+`: `Prepared.with_action`); the statistics count them apart.
COMPACTION_ACTION = "emulated-compaction"
EDITS_ACTION = "context-edits"


@dataclass(frozen=True)
class Threshold:
    """A threshold compaction the request asks for."""

    tokens: int | None  # compact when the forwarded input holds more tokens; None: the proxy's own trigger
    pause: bool = False  # Messages `pause_after_compaction`: answer the compaction alone, no turn
    instructions: str | None = None  # Messages `instructions`: replaces the summariser's instruction


class Records(Protocol):
    """What a format reads of the compaction records (`proxy.offload.records`)."""

    async def stands_for(self, token: str) -> list[Any]: ...


@dataclass(frozen=True)
class Expanded:
    """A request with the proxy's compaction tokens replaced by what they stand for."""

    body: dict[str, Any]  # the body as it goes on
    items: list[Any]  # its history as it goes on
    checked: Any  # what no token may be left in any more (the part the records brought)
    where: str  # the path of `checked` in the body, as an error names it


@dataclass
class Edited:
    """The history after a format's clearing edits."""

    items: list[Any]
    applied: list[dict[str, Any]] = field(default_factory=list)  # `applied_edits`, in the order applied
    offloads: list[Offload] = field(default_factory=list)  # what the markers stand for: to store
    cleared_tokens: int = 0  # input tokens all the edits freed
