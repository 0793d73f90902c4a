"""The managed turn: `run_turn(TurnInput) -> Turn`, below `proxy.http` and above `proxy.offload`,
and the exchange that runs it with the upstream (`_exchange`: `Exchange` built from an
`ExchangeContext`, prepare → send rounds → settle, a transport-neutral `Answer`).

Its steps live in this package's private modules, each one idea: `_turn` (the order of the
steps, the frozen `Turn`), `_context_tokens` (begin: the proxy's compaction tokens settled, the
provider's `context_management` taken out), `_context_edits` (the clearing edits),
`_context_compaction` (threshold compaction inside a turn), `_compact_now` (a compaction asked
for outright: `/responses/compact`, a `compaction_trigger`). What a format contributes to them
it gives through `proxy.core.wire` (`ProviderCompaction`, `ClearingEdits`).
"""

from proxy.turn._compact_now import Compaction, CompactionFailed, compact
from proxy.turn._context_edits import EditsDone
from proxy.turn._context_tokens import begin
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
