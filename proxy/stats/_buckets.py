"""The pure arithmetic of statistics buckets: their keys, their lifetimes, and which of them a
window reads.

Every turn is added to three buckets of its tenant (the minute, the hour and the day it falls
in) and to the minute and hour buckets of all tenants together. A window is aligned to one
grain and reads, for its time series, the finer buckets it covers:

| window | span            | series from | step   | tenants table from |
| ------ | --------------- | ----------- | ------ | ------------------ |
| `15m`  | 15 minutes      | minutes     | 1 min  | minutes            |
| `1h`   | 60 minutes      | minutes     | 1 min  | minutes            |
| `24h`  | 24 hours        | minutes     | 15 min | hours              |
| `7d`   | 7 days (UTC)    | hours       | 1 h    | days               |
| `30d`  | 30 days (UTC)   | hours       | 6 h    | days               |

A span ends with the bucket holding `now` (so `24h` is the current hour and the 23 before).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from proxy.offload.tenant import key

MINUTE, HOUR, DAY = 60, 3600, 86400
GRAINS: dict[str, int] = {"m": MINUTE, "h": HOUR, "d": DAY}
TENANT_GRAINS = ("m", "h", "d")  # buckets written per tenant
ALL_GRAINS = ("m", "h")  # buckets written for all tenants together
TOP_GRAINS = ("h", "d")  # rankings of the tenants written
ALL = "all"  # the scope of the all-tenants buckets (a namespace is 32 hex digits: never this)
MINUTES_KEPT = 2 * DAY  # minute buckets serve the windows up to 24 h only
DEFAULT_RETENTION = 14 * DAY
MIN_RETENTION = DAY

Fields = dict[str, int | float]


def bucket_start(t: float, grain: str) -> int:
    size = GRAINS[grain]
    return int(t // size) * size


def bucket_key(scope: str, grain: str, start: int) -> str:
    """`off:{scope}:stats:<grain>:<start>`: one hash per bucket, in the slot of its tenant."""
    return key(scope, "stats", f"{grain}:{start}")


def top_key(grain: str, start: int) -> str:
    """The namespaces that sent a managed request in the `grain` bucket starting at `start`,
    ranked by their raw tokens (the tenants table reads the first of them only)."""
    return key(ALL, "stats", f"top:{grain}:{start}")


def ttl_of(grain: str, retention: int) -> int:
    """Idle TTL of a bucket: a bucket is written only during its own period, so it lives
    `retention` seconds past it (minute buckets: 2 days at most; a day bucket one day more,
    so the one at the edge of the retention still counts whole)."""
    if grain == "m":
        return min(retention, MINUTES_KEPT)
    return retention + (DAY if grain == "d" else 0)


@dataclass(frozen=True)
class Window:
    name: str
    align: str  # grain the span is made of
    count: int  # how many of them
    series: str  # grain of the buckets read for the time series
    step: int  # seconds per point of the series
    rows: str  # grain of the buckets read per tenant for the tenants table


WINDOWS: dict[str, Window] = {
    "15m": Window("15m", "m", 15, "m", MINUTE, "m"),
    "1h": Window("1h", "m", 60, "m", MINUTE, "m"),
    "24h": Window("24h", "h", 24, "m", 15 * MINUTE, "h"),
    "7d": Window("7d", "d", 7, "h", HOUR, "d"),
    "30d": Window("30d", "d", 30, "h", 6 * HOUR, "d"),
}


@dataclass(frozen=True)
class Span:
    """What one window reads at one moment."""

    window: Window
    start: int  # first second of the span
    end: int  # first second after it (in the future: the span ends with the current bucket)
    now: int

    def starts(self, grain: str) -> list[int]:
        """Starts of the `grain` buckets of the span, up to the one holding `now`."""
        size = GRAINS[grain]
        return list(range(self.start, min(self.end, self.now + 1), size)) if self.now >= self.start else []

    def points(self) -> list[int]:
        """Starts of the series' points, up to the one holding `now`."""
        return list(range(self.start, min(self.end, self.now + 1), self.window.step))

    def series_keys(self, scope: str) -> list[str]:
        return [bucket_key(scope, self.window.series, s) for s in self.starts(self.window.series)]

    def row_keys(self, scope: str) -> list[str]:
        return [bucket_key(scope, self.window.rows, s) for s in self.starts(self.window.rows)]

    def top_keys(self) -> list[str]:
        """The rankings of tenants (`top_key`) of the hours (windows up to 24 h) or the days the
        span touches."""
        grain = "d" if self.window.align == "d" else "h"
        return [top_key(grain, s) for s in range(bucket_start(self.start, grain), self.now + 1, GRAINS[grain])]


def span_of(window: str, now: float) -> Span:
    """KeyError for an unknown window name."""
    w = WINDOWS[window]
    size = GRAINS[w.align]
    end = bucket_start(now, w.align) + size
    return Span(w, end - w.count * size, end, int(now))


def add(total: Fields, fields: Mapping[str, int | float]) -> Fields:
    """`total` += `fields`, field by field (in place; returned)."""
    for name, value in fields.items():
        total[name] = total.get(name, 0) + value
    return total


def merged(many: Iterable[Mapping[str, int | float]]) -> Fields:
    total: Fields = {}
    for fields in many:
        add(total, fields)
    return total


def rollup(
    starts: Sequence[int], buckets: Sequence[Mapping[str, int | float]], points: Sequence[int], *, step: int
) -> list[tuple[int, Fields]]:
    """Buckets (starting at `starts`) summed into the series' points (starting at `points`,
    `step` seconds each); a point without data is {}."""
    index = {p: i for i, p in enumerate(points)}
    series: list[Fields] = [{} for _ in points]
    for start, fields in zip(starts, buckets):
        i = index.get(start - (start - points[0]) % step) if points else None
        if i is not None:
            add(series[i], fields)
    return list(zip(points, series))


def parse_retention(value: object) -> int:
    """`--stats-retention`: seconds, or a number with a unit (`14d`, `36h`, `90m`, `600s`)."""
    expected = "expected seconds or a duration such as 14d, 36h or 90m"
    if isinstance(value, bool):
        raise ValueError(expected)
    if isinstance(value, (int, float)):
        seconds = int(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        units = {"s": 1, "m": MINUTE, "h": HOUR, "d": DAY}
        unit = units.get(text[-1:], None)
        number = text[:-1] if unit else text
        try:
            seconds = int(float(number) * (unit or 1))
        except ValueError:
            raise ValueError(f"{expected}; got {value!r}") from None
    else:
        raise ValueError(expected)
    if seconds < MIN_RETENTION:
        raise ValueError(f"must be at least 1 day (the 24h window reads a day of buckets); got {value!r}")
    return seconds
