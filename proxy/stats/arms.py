"""A holdout's two arms compared, session by session: means, their difference and a bootstrap
confidence interval, and a plain verdict that says when there are too few sessions to tell. Pure.

Each session of the holdout is one `SessionOutcome` (what its turns added up to). For each
figure (`FIGURES`), the managed arm's mean minus the control arm's, and a 95 % interval for it
from `RESAMPLES` bootstrap draws over sessions (each arm resampled with replacement, every
figure read off the same draw). Deterministic: the draws come from a generator seeded with
`seed`. At most `MAX_SESSIONS` sessions per arm are used (the caller passes the most recent).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from proxy.core.holdout import Arm

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
    repeated_calls: int = 0  # tool calls repeating an earlier identical call (`proxy.core.repeats`)

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
