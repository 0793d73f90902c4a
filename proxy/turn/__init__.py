"""The managed turn: `run_turn(TurnInput) -> Turn`, below `proxy.http` and above `proxy.offload`,
and the exchange that runs it with the upstream (`_exchange`: `Exchange` built from an
`ExchangeContext`, prepare → send rounds → settle, a transport-neutral `Answer`).

Its steps live in this package's private modules: `_turn` (the order of the steps, the frozen
`Turn`) and `_context_management` (the provider's context management emulated: `begin`, the
proxy's compaction tokens settled and the provider's `context_management` taken out; the clearing
edits; threshold compaction inside a turn; a compaction asked for outright, `/responses/compact`
or a `compaction_trigger`). What a format contributes to them it gives through `proxy.core.wire`
(`ProviderCompaction`, `ClearingEdits`).
"""

from proxy.turn._context_management import Compaction, CompactionFailed, EditsDone, begin, compact
from proxy.turn._exchange import Answer, Exchange, ExchangeContext
from proxy.turn._turn import Turn, TurnInput, TurnReport, run_turn

__all__ = [
    "Answer",
    "Compaction",
    "CompactionFailed",
    "EditsDone",
    "Exchange",
    "ExchangeContext",
    "Turn",
    "TurnInput",
    "TurnReport",
    "begin",
    "compact",
    "run_turn",
]
