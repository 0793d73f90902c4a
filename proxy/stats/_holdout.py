"""The holdout's sessions in the store: per tenant and arm, each session's totals (what
`SessionOutcome` reads), written by the recorder with its turns and read back
for the comparison. Shared by every worker and replica (the store's), namespaced per tenant as
the other statistics are, kept for the statistics' retention.

Per (arm, session) one hash: counters every turn adds to (`SUMS`), the last turn's values
(`LATEST`: its time, how its answer ended, the repeated tool calls of its history: a history
holds every earlier call, so the last turn's count is the session's), and the first turn's time,
which only the first writer sets. Per arm one ranked index of its sessions by their last turn;
the comparison reads the `MAX_SESSIONS` most recent of each arm, so what is read stays bounded
whatever the number of sessions.

A holdout's two arms compared, session by session: means, their difference and a bootstrap
confidence interval, and a plain verdict that says when there are too few sessions to tell. Pure.

Each session of the holdout is one `SessionOutcome` (what its turns added up to). For each
figure (`FIGURES`), the managed arm's mean minus the control arm's, and a 95 % interval for it
from `RESAMPLES` bootstrap draws over sessions (each arm resampled with replacement, every
figure read off the same draw). Deterministic: the draws come from a generator seeded with
`seed`. At most `MAX_SESSIONS` sessions per arm are used (the caller passes the most recent).

The holdout's comparison as the statistics API shows it (`GET /v1/offload/stats`, section
`holdout`) and the dashboard draws it: each arm's sessions, per figure each arm's mean, the
difference (managed − control) with its 95 % bootstrap interval (`compare`, above), and a
verdict in plain words that says so when there are too few sessions to tell. Pure.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.core.settings import ARMS, Arm
from proxy.offload.tenant import key
from proxy.stats._buckets import Fields, add
from proxy.store.base import Store

RESAMPLES = 500
MAX_SESSIONS = 1000
MIN_SESSIONS = 30  # per arm: below, the comparison is shown but says it cannot tell
LEVEL = 0.95
ENDED = frozenset({"stop", "end_turn", "completed", "stop_sequence", "tool_calls", "tool_use", "pause_turn"})


@dataclass(frozen=True)
class SessionOutcome:
    """One session of the holdout, as its turns added up."""

    arm: Arm
    turns: int = 0
    cost: float = 0.0  # billed, in USD
    tokens_forwarded: int = 0
    upstream_errors: int = 0  # answers other than 200, context-length errors included
    context_errors: int = 0  # of which: the model's context window exceeded
    reload_rounds: int = 0
    duration: float = 0.0  # seconds from its first turn to its last
    finish: str | None = None  # the last answer's finish (stop) reason
    repeated_calls: int = 0  # tool calls repeating an earlier identical call (`proxy.core.answers`)

    @property
    def ended(self) -> float:
        """1.0 when the session's last answer finished normally (not cut off by a length limit,
        a filter or an error), else 0.0."""
        return 1.0 if self.finish in ENDED else 0.0


FIGURES = (
    "cost",
    "turns",
    "tokens_forwarded",
    "upstream_errors",
    "context_errors",
    "reload_rounds",
    "duration",
    "repeated_calls",
    "ended",
)


def value(outcome: SessionOutcome, figure: str) -> float:
    return float(getattr(outcome, figure))


@dataclass(frozen=True)
class Difference:
    """One figure: each arm's mean, managed − control, its interval, and what can be said."""

    figure: str
    control: float
    managed: float
    difference: float
    low: float
    high: float
    verdict: str  # "too few sessions" | "no difference found" | "managed higher" | "managed lower"

    @property
    def relative(self) -> float | None:
        """The difference as a share of the control arm's mean (None when that is 0)."""
        return self.difference / self.control if self.control else None


@dataclass(frozen=True)
class Comparison:
    control_sessions: int
    managed_sessions: int
    differences: tuple[Difference, ...]
    enough: bool  # both arms hold MIN_SESSIONS at least

    def of(self, figure: str) -> Difference:
        return next(d for d in self.differences if d.figure == figure)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    position = q * (len(sorted_values) - 1)
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def compare(
    outcomes: Sequence[SessionOutcome], *, resamples: int = RESAMPLES, seed: int = 0, min_sessions: int = MIN_SESSIONS
) -> Comparison:
    """The two arms of `outcomes` compared figure by figure (each arm's first MAX_SESSIONS)."""
    control = [o for o in outcomes if o.arm == "control"][:MAX_SESSIONS]
    managed = [o for o in outcomes if o.arm == "managed"][:MAX_SESSIONS]
    enough = len(control) >= min_sessions and len(managed) >= min_sessions
    table = {f: ([value(o, f) for o in control], [value(o, f) for o in managed]) for f in FIGURES}
    draws: dict[str, list[float]] = {f: [] for f in FIGURES}
    if control and managed:
        rng = random.Random(seed)
        nc, nm = len(control), len(managed)
        for _ in range(resamples):
            pick_c = [int(rng.random() * nc) for _ in range(nc)]
            pick_m = [int(rng.random() * nm) for _ in range(nm)]
            for f, (c, m) in table.items():
                draws[f].append(sum(m[i] for i in pick_m) / nm - sum(c[i] for i in pick_c) / nc)
    tail = (1 - LEVEL) / 2
    out = []
    for f, (c, m) in table.items():
        spread = sorted(draws[f])
        low, high = _percentile(spread, tail), _percentile(spread, 1 - tail)
        difference = _mean(m) - _mean(c)
        if not enough:
            verdict = "too few sessions"
        elif low > 0:
            verdict = "managed higher"
        elif high < 0:
            verdict = "managed lower"
        else:
            verdict = "no difference found"
        out.append(Difference(f, _mean(c), _mean(m), difference, low, high, verdict))
    return Comparison(len(control), len(managed), tuple(out), enough)


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


async def holdout_outcomes(
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


# what each figure is, and which way is worse for the agent (None: neither, read it with the others)
FIGURE_LABELS: Mapping[str, tuple[str, str | None]] = {
    "cost": ("billed cost per session (USD)", "higher"),
    "turns": ("turns per session", None),
    "tokens_forwarded": ("tokens forwarded per session", "higher"),
    "upstream_errors": ("upstream errors per session", "higher"),
    "context_errors": ("context-length errors per session", "higher"),
    "reload_rounds": ("reload rounds per session", None),
    "duration": ("session duration (s)", None),
    "repeated_calls": ("repeated identical tool calls per session", "higher"),
    "ended": ("sessions whose last answer finished normally (share)", "lower"),
}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def verdict(comparison: Comparison, *, min_sessions: int = MIN_SESSIONS) -> str:
    """The comparison in one sentence."""
    c, m = comparison.control_sessions, comparison.managed_sessions
    if not comparison.enough:
        return (
            f"Too few sessions to tell: {c} control and {m} managed; at least {min_sessions} in each arm are "
            "needed before any difference is claimed."
        )
    found = [
        f"{FIGURE_LABELS[d.figure][0]} {'higher' if d.verdict == 'managed higher' else 'lower'}"
        for d in comparison.differences
        if d.verdict in ("managed higher", "managed lower")
    ]
    if not found:
        return (
            f"No difference found between {c} control and {m} managed sessions at {LEVEL:.0%} on any figure "
            "(a difference smaller than an interval's half-width may still exist)."
        )
    return (
        f"Over {c} control and {m} managed sessions, managed sessions differ at {LEVEL:.0%}: " + "; ".join(found) + "."
    )


def holdout_report(
    outcomes: Sequence[SessionOutcome],
    *,
    kept: Mapping[str, int],
    fraction: float,
    min_sessions: int = MIN_SESSIONS,
    seed: int = 0,
) -> dict[str, Any]:
    """The `holdout` section of the statistics of one tenant."""
    comparison = compare(outcomes, seed=seed, min_sessions=min_sessions)
    figures = []
    for d in comparison.differences:
        label, worse = FIGURE_LABELS[d.figure]
        figures.append(
            {
                "figure": d.figure,
                "label": label,
                "worse_when": worse,
                "control": _round(d.control),
                "managed": _round(d.managed),
                "difference": _round(d.difference),
                "relative": _round(d.relative),
                "low": _round(d.low),
                "high": _round(d.high),
                "verdict": d.verdict,
            }
        )
    return {
        "fraction": fraction,
        "arms": summary(list(outcomes)),
        "sessions_kept": dict(kept),  # in each arm's index; the comparison reads the most recent
        "max_sessions": MAX_SESSIONS,
        "min_sessions": min_sessions,
        "enough": comparison.enough,
        "level": LEVEL,
        "resamples": RESAMPLES,
        "verdict": verdict(comparison, min_sessions=min_sessions),
        "figures": figures,
    }
