"""The price table: defaults, prefix matching, overrides, the forms of --prices."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from proxy.config import ServerSettings
from proxy.core.answers import Bill, Price
from proxy.stats._prices import DEFAULT_PRICES, FALLBACK, PriceTable, parse_prices


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
