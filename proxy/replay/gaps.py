"""When a replayed turn is sent: the trace's own timestamps, else `--turn-gaps`.

A provider's prompt cache expires after an idle gap (5 minutes by default), so what a
conversation is billed depends on the time between its requests. A trace whose messages carry
a `timestamp` (seconds since the epoch, or ISO 8601) is replayed on it: turn k is sent when the
last message of its request was written. Otherwise the gaps between turns come from a spec:

- `30s` (or `90`, `5m`, `1h`): every gap that long;
- `exp:45s`: exponentially distributed, that mean;
- `mix:30s,0.1@600s`: 30 s, except that a gap is an idle pause of 600 s with probability 0.1
  (several `p@duration` terms may follow, their probabilities summing to at most 1).

Random gaps are drawn from a generator seeded with `seed` and the conversation's position, so a
replay is reproducible and conversations do not share their draws.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from proxy.errors import Failure, Kind

DEFAULT = "30s"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
MAX_SECONDS = 7 * 24 * 3600.0


class GapsError(Failure, ValueError):
    """A `--turn-gaps` spec that cannot be read; the message says what is expected."""

    kind = Kind.BAD_REQUEST


def duration(text: str) -> float:
    match = _DURATION.match(text.strip())
    if not match:
        raise GapsError(f"{text!r} is not a duration (e.g. 30s, 90, 5m, 1h)")
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if not 0 <= seconds <= MAX_SECONDS:
        raise GapsError(f"{text!r}: a gap is at most 7 days")
    return seconds


@dataclass(frozen=True)
class Gaps:
    """A parsed spec: a base gap (`exp`: its mean, drawn exponentially), and idle pauses
    (probability, seconds) replacing it."""

    text: str
    base: float
    exponential: bool = False
    pauses: tuple[tuple[float, float], ...] = ()

    def draw(self, rng: random.Random) -> float:
        roll = rng.random()
        for probability, seconds in self.pauses:
            if roll < probability:
                return seconds
            roll -= probability
        if self.exponential:
            return -self.base * math.log(1.0 - rng.random())
        return self.base

    def times(self, turns: int, *, seed: int = 0, index: int = 0) -> list[float]:
        """When each of `turns` turns is sent: the first at 0, then one gap after another."""
        rng = random.Random(f"{seed}:{index}")
        out, now = [], 0.0
        for k in range(turns):
            if k:
                now += self.draw(rng)
            out.append(now)
        return out


def parse(text: str) -> Gaps:
    spec = text.strip()
    if spec.startswith("exp:"):
        return Gaps(spec, duration(spec[4:]), exponential=True)
    if spec.startswith("mix:"):
        base, *terms = spec[4:].split(",")
        pauses = []
        for term in terms:
            probability, at, seconds = term.partition("@")
            try:
                p = float(probability)
            except ValueError:
                p = -1.0
            if not at or not 0 <= p <= 1:
                raise GapsError(f"{term!r}: expected probability@duration, e.g. 0.1@600s")
            pauses.append((p, duration(seconds)))
        if sum(p for p, _ in pauses) > 1 + 1e-9:
            raise GapsError(f"{spec!r}: the pauses' probabilities sum to more than 1")
        return Gaps(spec, duration(base), pauses=tuple(pauses))
    return Gaps(spec, duration(spec))


def _seconds(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def trace_times(messages: Sequence[Any], positions: Sequence[int]) -> list[float] | None:
    """The trace's own send times of the turns whose answers stand at `positions` (the last
    message before each answer carries a `timestamp`), from 0; None unless every turn has one
    and they never go back."""
    out: list[float] = []
    for k in positions:
        before = messages[k - 1] if k > 0 else None
        at = _seconds(before.get("timestamp")) if isinstance(before, dict) else None
        if at is None or (out and at < out[-1]):
            return None
        out.append(at)
    return [t - out[0] for t in out] if out else []
