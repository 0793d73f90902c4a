"""Bucket keys, lifetimes, windows and roll-ups: pure arithmetic."""

from __future__ import annotations

import re

import pytest

from proxy.stats._buckets import (
    DAY,
    HOUR,
    MINUTE,
    WINDOWS,
    bucket_key,
    bucket_start,
    merged,
    parse_retention,
    rollup,
    span_of,
    top_key,
    ttl_of,
)

NS = "0123456789abcdef0123456789abcdef"
NOW = 1_700_000_000 + 37 * MINUTE + 12  # 2023-11-14 22:50:32 UTC: not on any boundary


def test_bucket_starts_are_aligned_to_their_grain():
    assert bucket_start(NOW, "m") == NOW - 32
    assert bucket_start(NOW, "m") % MINUTE == 0
    assert bucket_start(NOW, "h") % HOUR == 0 and NOW - HOUR < bucket_start(NOW, "h") <= NOW
    assert bucket_start(NOW, "d") % DAY == 0 and NOW - DAY < bucket_start(NOW, "d") <= NOW
    assert bucket_start(3600.0, "h") == 3600 and bucket_start(3599.999, "h") == 0


def test_keys_carry_the_tenant_and_a_shard_of_the_bucket_as_a_hash_tag():
    assert re.fullmatch(rf"off:\{{{NS}:[0-9a-f]{{2}}\}}:stats:h:3600", bucket_key(NS, "h", 3600))
    assert re.fullmatch(r"off:\{all:[0-9a-f]{2}\}:stats:m:60", bucket_key("all", "m", 60))
    assert re.fullmatch(r"off:\{all:[0-9a-f]{2}\}:stats:top:d:86400", top_key("d", 86400))
    assert len({bucket_key("all", "m", 60 * i).split("}")[0] for i in range(60)}) > 40  # an hour: ~60 slots


def test_ttls_follow_the_retention():
    assert ttl_of("h", 14 * DAY) == 14 * DAY
    assert ttl_of("d", 14 * DAY) == 15 * DAY  # the day at the edge counts whole
    assert ttl_of("m", 14 * DAY) == 2 * DAY  # minutes serve the 24h window only
    assert ttl_of("m", DAY) == DAY


@pytest.mark.parametrize(
    "window, points, step, series, rows",
    [
        ("15m", 15, MINUTE, "m", "m"),
        ("1h", 60, MINUTE, "m", "m"),
        ("24h", 96, 15 * MINUTE, "m", "h"),
        ("7d", 168, HOUR, "h", "d"),
        ("30d", 120, 6 * HOUR, "h", "d"),
    ],
)
def test_windows_read_their_buckets(window, points, step, series, rows):
    span = span_of(window, NOW)
    assert span.window is WINDOWS[window] and span.window.step == step
    assert span.start < NOW < span.end
    assert (span.end - span.start) == {"15m": 15 * MINUTE, "1h": HOUR, "24h": DAY, "7d": 7 * DAY, "30d": 30 * DAY}[
        window
    ]
    # the span ends with the bucket holding now: points and buckets stop there
    assert span.points()[-1] <= NOW < span.points()[-1] + step
    assert span.points()[0] == span.start and len(span.points()) <= points
    starts = span.starts(series)
    assert starts[0] == span.start and starts[-1] == bucket_start(NOW, series)
    assert span.series_keys(NS)[-1] == bucket_key(NS, series, bucket_start(NOW, series))
    assert span.row_keys(NS)[0] == bucket_key(NS, rows, span.start)
    grain = "d" if window in ("7d", "30d") else "h"  # the rankings of tenants: hours, or days
    assert span.top_keys()[-1] == top_key(grain, bucket_start(NOW, grain))
    assert span.top_keys()[0] == top_key(grain, bucket_start(span.start, grain))


def test_window_spans_exactly():
    one = span_of("1h", NOW)
    assert one.start == bucket_start(NOW, "m") - 59 * MINUTE and len(one.starts("m")) == 60
    quarter = span_of("15m", NOW)  # the minute holding now and the 14 before, one point each
    assert quarter.start == bucket_start(NOW, "m") - 14 * MINUTE and len(quarter.points()) == 15
    assert len(one.points()) == 60
    day = span_of("24h", NOW)
    assert day.start == bucket_start(NOW, "h") - 23 * HOUR
    assert len(day.starts("h")) == 24 and len(day.starts("m")) == 23 * 60 + 51
    assert len(day.points()) == 23 * 4 + 4  # the current hour's quarters up to now: 22:00, :15, :30, :45
    week = span_of("7d", NOW)
    assert week.start == bucket_start(NOW, "d") - 6 * DAY and len(week.starts("d")) == 7
    assert len(week.starts("h")) == 6 * 24 + 23
    month = span_of("30d", NOW)
    assert len(month.starts("d")) == 30 and len(month.top_keys()) == 30
    assert len(one.top_keys()) == 2 and len(day.top_keys()) == 24  # the hour before the 1h window's start too
    assert len(month.points()) == 29 * 4 + 4  # 6-hour points; today's 00, 06, 12, 18


def test_window_on_a_boundary():
    t = 86400 * 20000  # midnight UTC
    span = span_of("7d", t)
    assert span.end == t + DAY and span.starts("d")[-1] == t and span.points()[-1] == t
    assert span_of("1h", t).starts("m")[-1] == t


def test_rollup_sums_buckets_into_points():
    starts = [0, 60, 120, 900, 960, 1800]
    buckets = [
        {"requests": 1},
        {"requests": 2, "tokens_before": 5},
        {},
        {"requests": 4},
        {"requests": 8},
        {"requests": 16},
    ]
    series = rollup(starts, buckets, [0, 900, 1800, 2700], step=900)
    assert series == [
        (0, {"requests": 3, "tokens_before": 5}),
        (900, {"requests": 12}),
        (1800, {"requests": 16}),
        (2700, {}),
    ]
    assert rollup(starts, buckets, [], step=900) == []
    assert rollup([5000], [{"requests": 1}], [0, 900], step=900) == [(0, {}), (900, {})]  # outside: left out


def test_merged_adds_field_by_field():
    total = merged([{"a": 1, "usd": 0.5}, {"a": 2, "b": 3}, {}, {"usd": 0.25}])
    assert total == {"a": 3, "b": 3, "usd": 0.75}


@pytest.mark.parametrize(
    "value, seconds",
    [
        ("14d", 14 * DAY),
        ("36h", 36 * HOUR),
        ("1440m", DAY),
        ("86400s", DAY),
        ("86400", DAY),
        (172800, 2 * DAY),
        (" 2D ", 2 * DAY),
        ("1.5d", 36 * HOUR),
    ],
)
def test_retention_forms(value, seconds):
    assert parse_retention(value) == seconds


@pytest.mark.parametrize("value", ["1h", "23h", 3600, "soon", "d", "", True, None, [14]])
def test_retention_refused(value):
    with pytest.raises(ValueError):
        parse_retention(value)


def test_unknown_window():
    with pytest.raises(KeyError):
        span_of("2h", NOW)
