"""The holdout's sessions in the store: per tenant and arm, each session's totals (what
`proxy.stats.arms.SessionOutcome` reads), written by the recorder with its turns and read back
for the comparison. Shared by every worker and replica (the store's), namespaced per tenant as
the other statistics are, kept for the statistics' retention.

Per (arm, session) one hash: counters every turn adds to (`SUMS`), the last turn's values
(`LATEST`: its time, how its answer ended, the repeated tool calls of its history: a history
holds every earlier call, so the last turn's count is the session's), and the first turn's time,
which only the first writer sets. Per arm one ranked index of its sessions by their last turn;
the comparison reads the `MAX_SESSIONS` most recent of each arm, so what is read stays bounded
whatever the number of sessions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from proxy.core.holdout import ARMS, Arm
from proxy.offload.tenant import key
from proxy.stats.arms import MAX_SESSIONS, SessionOutcome
from proxy.stats.buckets import Fields, add
from proxy.store.base import Store

# how an answer ended, as the store keeps it (a number: its place here; 0 none, the last: any other)
FINISHES = (
    "stop",
    "end_turn",
    "completed",
    "stop_sequence",
    "tool_calls",
    "tool_use",
    "pause_turn",
    "length",
    "max_tokens",
    "max_output_tokens",
    "content_filter",
    "refusal",
    "incomplete",
    "model_context_window_exceeded",
    "error",
    "other",
)
SUMS = ("turns", "usd", "tokens_forwarded", "upstream_errors", "context_errors", "reload_rounds")
LATEST = ("last", "finish", "repeated_calls")


def finish_code(finish: str | None) -> int:
    if not finish:
        return 0
    return (FINISHES.index(finish) if finish in FINISHES else len(FINISHES) - 1) + 1


def finish_of(code: int | float | None) -> str | None:
    number = int(code or 0)
    return FINISHES[number - 1] if 1 <= number <= len(FINISHES) else None


def index_key(namespace: str, arm: Arm) -> str:
    return key(namespace, "stats", f"holdout_arm:{arm}")


def session_key(namespace: str, arm: Arm, name: str) -> str:
    """`name` as `Sealer.key_name` writes a session id, after the arm (one of `ARMS`): unique."""
    return key(namespace, "stats", f"holdout_session:{arm}:{name}")


@dataclass(frozen=True)
class HoldoutTurn:
    """What one turn of the holdout adds to its session."""

    arm: Arm
    time: float
    usd: float
    tokens_forwarded: int
    upstream_error: bool
    context_error: bool
    reload_rounds: int
    finish: str | None
    repeated_calls: int


@dataclass
class HoldoutDue:
    """A holdout session's writes not made yet (each step leaves once made)."""

    index_key: str
    session_key: str
    name: str
    sums: Fields = field(default_factory=dict)
    latest: Fields = field(default_factory=dict)
    first: Fields = field(default_factory=dict)
    last: float | None = None

    def add(self, turn: HoldoutTurn) -> None:
        add(
            self.sums,
            {
                "turns": 1,
                "usd": turn.usd,
                "tokens_forwarded": turn.tokens_forwarded,
                "upstream_errors": int(turn.upstream_error),
                "context_errors": int(turn.context_error),
                "reload_rounds": turn.reload_rounds,
            },
        )
        self.sums = {k: v for k, v in self.sums.items() if v}
        if not self.latest or turn.time >= float(self.latest["last"]):
            self.latest = {"last": turn.time, "finish": finish_code(turn.finish), "repeated_calls": turn.repeated_calls}
        if not self.first or turn.time < float(self.first["first"]):
            self.first = {"first": turn.time}
        self.last = max(self.last or 0.0, turn.time)

    def empty(self) -> bool:
        return not self.sums and not self.latest and not self.first and self.last is None


async def write(store: Store, due: HoldoutDue, *, retention: int, now: float) -> None:
    """The session's hash first, then its place in the arm's index (a reader finding it there
    finds its totals)."""
    if due.sums:
        await store.incr_fields(due.session_key, due.sums, retention)
        due.sums = {}
    if due.latest:
        await store.set_fields(due.session_key, due.latest, retention)
        due.latest = {}
    if due.first:
        await store.set_fields(due.session_key, due.first, retention, only_new=True)
        due.first = {}
    if due.last is not None:
        await store.rank(due.index_key, due.name, due.last, ttl=retention, drop_below=now - retention)
        due.last = None


def outcome(arm: Arm, fields: Mapping[str, int | float]) -> SessionOutcome:
    first, last = float(fields.get("first", 0.0)), float(fields.get("last", 0.0))
    return SessionOutcome(
        arm=arm,
        turns=int(fields.get("turns", 0)),
        cost=float(fields.get("usd", 0.0)),
        tokens_forwarded=int(fields.get("tokens_forwarded", 0)),
        upstream_errors=int(fields.get("upstream_errors", 0)),
        context_errors=int(fields.get("context_errors", 0)),
        reload_rounds=int(fields.get("reload_rounds", 0)),
        duration=max(0.0, last - first) if first and last else 0.0,
        finish=finish_of(fields.get("finish")),
        repeated_calls=int(fields.get("repeated_calls", 0)),
    )


async def outcomes(
    store: Store, namespace: str, *, limit: int = MAX_SESSIONS
) -> tuple[list[SessionOutcome], dict[str, int]]:
    """The most recent `limit` sessions of each arm (those whose totals are still kept), and how
    many sessions each arm's index holds in all."""
    found: list[SessionOutcome] = []
    totals: dict[str, int] = {}
    for arm in ARMS:
        total, page = await store.ranked(index_key(namespace, arm), 0, limit)
        totals[arm] = total
        hashes = await store.hashes([session_key(namespace, arm, name) for name, _ in page])
        found += [outcome(arm, fields) for fields in hashes if fields.get("turns")]
    return found, totals


def summary(outcomes_: list[SessionOutcome]) -> dict[str, Any]:
    """Each arm's sessions and turns (a plain count beside the comparison)."""
    return {
        arm: {
            "sessions": sum(o.arm == arm for o in outcomes_),
            "turns": sum(o.turns for o in outcomes_ if o.arm == arm),
        }
        for arm in ARMS
    }
