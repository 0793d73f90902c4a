"""The price table: defaults, prefix matching, overrides, the forms of --prices.

Bucket keys, lifetimes, windows and roll-ups: pure arithmetic.

A turn's counters and the headline read back: observed turns apart from managed ones.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from proxy.config import ServerSettings
from proxy.core.answers import Bill, Meter, Price
from proxy.stats._counters import (
    DAY,
    DEFAULT_PRICES,
    FALLBACK,
    HOUR,
    MINUTE,
    OBSERVED,
    WINDOWS,
    PriceTable,
    Turn,
    bucket_key,
    bucket_start,
    headline,
    merged,
    parse_prices,
    parse_retention,
    rollup,
    span_of,
    top_key,
    ttl_of,
    turn_fields,
)
from proxy.stats._recorder import turn_of


@pytest.mark.parametrize(
    "model, entry",
    [
        ("gpt-4o", "gpt-4o"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4o-mini", "gpt-4o-mini"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("gpt-4.1", "gpt-4.1"),
        ("gpt-4.1-mini", "gpt-4.1-mini"),
        ("gpt-4.1-nano-2025-04-14", "gpt-4.1-nano"),
        ("gpt-5", "gpt-5"),
        ("gpt-5-mini", "gpt-5-mini"),
        ("gpt-5-nano", "gpt-5-nano"),
        ("gpt-5.1-codex", "gpt-5"),
        ("o3", "o3"),
        ("o4-mini", "o4-mini"),
        ("claude-opus-4-1-20250805", "claude-opus-4"),
        ("claude-opus-4-5", "claude-opus-4-5"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4"),
        ("claude-haiku-4-5", "claude-haiku-4"),
        ("openai/gpt-4o-mini", "gpt-4o-mini"),
        ("GPT-4O", "gpt-4o"),
        ("llama-3-70b", FALLBACK),
        (None, FALLBACK),
        ("", FALLBACK),
    ],
)
def test_longest_prefix_wins(model, entry):
    assert PriceTable().price(model) == DEFAULT_PRICES[entry]


def test_every_default_is_sane():
    for name, price in DEFAULT_PRICES.items():
        assert 0 < price.cached <= price.input <= price.cache_write_5m <= price.cache_write_1h, name
        assert price.output >= price.input, name


def test_anthropic_prices_writes_at_a_premium_and_openai_does_not():
    sonnet = PriceTable().price("claude-sonnet-4-5")
    assert (sonnet.cached, sonnet.cache_write_5m, sonnet.cache_write_1h) == pytest.approx(
        (0.1 * sonnet.input, 1.25 * sonnet.input, 2 * sonnet.input)
    )
    gpt = PriceTable().price("gpt-4o")
    assert gpt.cache_write_5m == gpt.cache_write_1h == gpt.input and gpt.cached < gpt.input


def test_a_bill_in_money():
    price = Price(10.0, 1.0, 12.5, 20.0, 40.0)
    cost = Bill(
        uncached=100_000, cache_read=1_000_000, cache_write_5m=10_000, cache_write_1h=10_000, output=5_000, answers=1
    ).cost(price)
    assert (cost.uncached, cost.cache_read, cost.cache_write_5m, cost.cache_write_1h, cost.output) == pytest.approx(
        (1.0, 1.0, 0.125, 0.2, 0.2)
    )
    assert cost.total == pytest.approx(2.525)
    assert Bill(unreported=3).cost(price).total == 0


def test_overrides_over_the_defaults():
    table = PriceTable({"gpt-4o": (5.0, 2.5), "*": Price(1.0, 0.1, 1.0, 1.0, 4.0), "acme-": (0.0, 0.0, 0.0)})
    assert table.price("gpt-4o-2024") == Price(5.0, 2.5, 5.0, 5.0, 20.0)  # output: the built-in ratio (×4)
    assert table.price("gpt-4o-mini") == DEFAULT_PRICES["gpt-4o-mini"]  # the longer default still wins
    assert table.price("unknown") == Price(1.0, 0.1, 1.0, 1.0, 4.0)
    assert table.price("acme-7b") == Price(0.0, 0.0, 0.0, 0.0, 0.0)


def test_a_price_not_given_keeps_the_builtin_ratio_to_the_input():
    [claude] = parse_prices("claude-sonnet-4-5=6/0.6").values()
    assert claude == Price(6.0, 0.6, 7.5, 12.0, 30.0)  # writes 1.25× and 2×, output 5× as the built-in sonnet's
    [mine] = parse_prices('{"claude-haiku-4-9": {"input": 4, "cache_write_1h": 9}}').values()
    assert mine.cache_write_1h == 9 and mine.cached == pytest.approx(0.4) and mine.cache_write_5m == 5.0
    [other] = parse_prices("llama-3=4/0.4").values()  # the fallback's ratios: no write premium
    assert other.cache_write_5m == other.cache_write_1h == 4.0


@pytest.mark.parametrize(
    "text, expected",
    [
        ("gpt-4o=2.5/1.25/10", {"gpt-4o": Price(2.5, 1.25, 2.5, 2.5, 10.0)}),
        ("gpt-4o=2.5/1.25", {"gpt-4o": Price(2.5, 1.25, 2.5, 2.5, 10.0)}),
        (
            " a=1/0.1/3 , *=3/0.3/3.75/6/15 ,",
            {"a": Price(1.0, 0.1, 1.0, 1.0, 3.0), "*": Price(3.0, 0.3, 3.75, 6.0, 15.0)},
        ),
        ('{"a": [1, 0.5, 2]}', {"a": Price(1.0, 0.5, 1.0, 1.0, 2.0)}),
        (
            '{"a": {"input": 2, "cached": 0.2, "output": 8}, "b": {"input": 4, "cached": 4}}',
            {"a": Price(2.0, 0.2, 2.0, 2.0, 8.0), "b": Price(4.0, 4.0, 4.0, 4.0, 16.0)},
        ),
        ("", {}),
        ({}, {}),
    ],
)
def test_price_forms(text, expected):
    assert parse_prices(text) == expected


@pytest.mark.parametrize(
    "text, says",
    [
        ("a=1", "1 prices"),
        ("a", "expected model=prices"),
        ("=1/2", "expected"),
        ("a=x/1", "'x' is not a number"),
        ("a=1/2/3/4", "4 prices"),
        ("a=-1/0", "between 0 and"),
        ('{"a": 1}', "not a list"),
        ("{bad", "expected"),
        ("[1, 2]", "expected"),
        ('{"a": [1, "x"]}', "not a number"),
        ("a=1e9/1", "between 0 and"),
        ('{"a": {"input": 1, "cache_write": 2}}', "unknown price 'cache_write'"),
        ('{"a": {"cached": 1}}', "input price"),
        ('{"a": [true, 1]}', "not a number"),
        ('{"a": [NaN, 1]}', "expected"),
        ('{"a": ["nan", 1]}', "between 0 and"),
        ('{"a": [1, {"x": 1}]}', "not a number"),
    ],
)
def test_bad_prices_are_refused_with_what_is_wrong(text, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        parse_prices(text)


def test_server_settings_take_prices_and_retention():
    settings = ServerSettings(prices="gpt-4o=2/1,*=3/0.3", stats_retention="30d")
    assert settings.prices == {"gpt-4o": (2.0, 1.0, 2.0, 2.0, 8.0), "*": (3.0, 0.3, 3.0, 3.0, 12.0)}
    assert settings.stats_retention == 30 * 86400
    assert ServerSettings().stats_retention == 14 * 86400 and ServerSettings().prices == {}
    # as `serve` exports them to worker processes, and they come back
    dumped = settings.model_dump()
    import json

    again = ServerSettings(prices=json.dumps(dumped["prices"]), stats_retention=str(dumped["stats_retention"]))
    assert again.prices == settings.prices and again.stats_retention == settings.stats_retention
    with pytest.raises(ValidationError, match="prices"):
        ServerSettings(prices="gpt-4o=2")
    with pytest.raises(ValidationError, match="at least 1 day"):
        ServerSettings(stats_retention="2h")


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


PRICES = PriceTable()


def turn(**kw) -> Turn:
    base = dict(
        namespace="t",
        session="s",
        time=0.0,
        route="chat",
        model="gpt-4o",
        status=200,
        stream=False,
        tokens_before=10_000,
        tokens_after=4_000,
        action="compact+compress",
        bill=Bill(uncached=9_000, cache_read=1_000, output=50, answers=1),
    )
    return Turn(**{**base, **kw})


def summed(*turns: Turn) -> dict:
    out: dict = {}
    for t in turns:
        for k, v in turn_fields(t, PRICES).items():
            out[k] = out.get(k, 0) + v
    return out


def test_an_observed_turns_counters_stay_apart():
    fields = turn_fields(turn(observed=True), PRICES)
    assert fields and all(k.startswith(OBSERVED) for k in fields)
    shown = headline(summed(turn(observed=True), turn(tokens_before=500, tokens_after=500, action="none")))
    assert shown["requests"] == 1 and shown["tokens_before"] == 500  # the managed turn alone
    observed = shown["observed"]
    assert observed["requests"] == 1 and observed["tokens_forwarded"] == 10_000
    assert observed["tokens_would_forward"] == 4_000 and observed["would_forward_ratio"] == 0.4
    assert observed["actions"]["compact+compress"] == 1
    assert observed["bill"]["tokens"]["uncached"] == 9_000  # what was billed: the raw history
    assert "observed" not in headline(summed(turn()))


def record(**kw) -> SimpleNamespace:
    meter = Meter()
    meter.add(Bill(uncached=9_000, cache_read=1_000, output=50, answers=1))
    base = dict(
        tokens_before=10_000,
        tokens_after=4_000,
        model="gpt-4o",
        status=200,
        stream=False,
        action="compact",
        refs=0,
        refs_created=0,
        route="chat",
        reload_rounds=0,
        warnings=[],
        bill=meter,
        summary_bill=Bill(),
        session="s",
    )
    return SimpleNamespace(**{**base, **kw})


def test_the_estimate_beside_an_observed_bill_is_what_would_have_been_billed():
    scope = {
        "state": {"caller": SimpleNamespace(namespace="t", kind="client", label=None)},
        "headers": [],
        "path": "/v1/chat/completions",
    }
    managed = turn_of(record(), scope)
    observed = turn_of(record(observed=True), scope)
    assert managed is not None and observed is not None and observed.observed and not managed.observed
    # managed: the raw history's bill, scaled up; observed: the planned turn's, scaled down
    assert managed.counterfactual.input == 25_000 and observed.counterfactual.input == 4_000
    assert observed.counterfactual.output == 50
    shown = headline(summed(observed))["observed"]
    assert shown["would_bill"]["estimate"] is True and shown["would_bill"]["tokens"]["uncached"] == 3_600
    assert shown["would_save_usd"] > 0
