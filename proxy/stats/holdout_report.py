"""The holdout's comparison as the statistics API shows it (`GET /v1/offload/stats`, section
`holdout`) and the dashboard draws it: each arm's sessions, per figure each arm's mean, the
difference (managed − control) with its 95 % bootstrap interval (`proxy.stats.arms`), and a
verdict in plain words that says so when there are too few sessions to tell. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.stats.arms import LEVEL, MAX_SESSIONS, MIN_SESSIONS, RESAMPLES, Comparison, SessionOutcome, compare
from proxy.stats.holdout import summary

# what each figure is, and which way is worse for the agent (None: neither, read it with the others)
FIGURES: Mapping[str, tuple[str, str | None]] = {
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
        f"{FIGURES[d.figure][0]} {'higher' if d.verdict == 'managed higher' else 'lower'}"
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


def report(
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
        label, worse = FIGURES[d.figure]
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
