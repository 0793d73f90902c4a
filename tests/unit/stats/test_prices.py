"""The price table: defaults, prefix matching, overrides, the forms of --prices."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from proxy.config import ServerSettings
from proxy.stats.prices import CACHED_SHARE, DEFAULT_PRICES, FALLBACK, Price, PriceTable, parse_prices


@pytest.mark.parametrize("model, entry", [
    ("gpt-4o", "gpt-4o"), ("gpt-4o-2024-08-06", "gpt-4o"), ("gpt-4o-mini", "gpt-4o-mini"),
    ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"), ("gpt-4.1", "gpt-4.1"), ("gpt-4.1-mini", "gpt-4.1-mini"),
    ("gpt-4.1-nano-2025-04-14", "gpt-4.1-nano"), ("gpt-5", "gpt-5"), ("gpt-5-mini", "gpt-5-mini"),
    ("gpt-5-nano", "gpt-5-nano"), ("gpt-5.1-codex", "gpt-5"), ("o3", "o3"), ("o4-mini", "o4-mini"),
    ("claude-opus-4-1-20250805", "claude-opus-4"), ("claude-opus-4-5", "claude-opus-4-5"),
    ("claude-sonnet-4-5-20250929", "claude-sonnet-4"), ("claude-haiku-4-5", "claude-haiku-4"),
    ("openai/gpt-4o-mini", "gpt-4o-mini"), ("GPT-4O", "gpt-4o"),
    ("llama-3-70b", FALLBACK), (None, FALLBACK), ("", FALLBACK),
])
def test_longest_prefix_wins(model, entry):
    assert PriceTable().price(model) == DEFAULT_PRICES[entry]


def test_every_default_is_sane():
    for name, price in DEFAULT_PRICES.items():
        assert 0 < price.cached <= price.input, name


def test_cost_is_cache_weighted():
    table = PriceTable({"m": Price(10.0, 1.0)})
    blended = CACHED_SHARE * 1.0 + (1 - CACHED_SHARE) * 10.0
    assert table.cost("m", 1_000_000) == pytest.approx(blended)
    assert table.cost("m-large", 2_000) == pytest.approx(2_000 * blended / 1e6)
    assert table.cost("m", 0) == 0


def test_overrides_over_the_defaults():
    table = PriceTable({"gpt-4o": (5.0, 2.5), "*": Price(1.0, 0.1), "acme-": (0.0, 0.0)})
    assert table.price("gpt-4o-2024") == Price(5.0, 2.5)
    assert table.price("gpt-4o-mini") == DEFAULT_PRICES["gpt-4o-mini"]  # the longer default still wins
    assert table.price("unknown") == Price(1.0, 0.1)
    assert table.price("acme-7b") == Price(0.0, 0.0)


@pytest.mark.parametrize("text, expected", [
    ("gpt-4o=2.5/1.25", {"gpt-4o": Price(2.5, 1.25)}),
    (" a=1/0.1 , *=3/0.3 ,", {"a": Price(1.0, 0.1), "*": Price(3.0, 0.3)}),
    ('{"a": [1, 0.5]}', {"a": Price(1.0, 0.5)}),
    ('{"a": {"input": 2, "cached": 0.2}, "b": {"input": 4}}', {"a": Price(2.0, 0.2), "b": Price(4.0, 4.0)}),
    ("", {}),
    ({}, {}),
])
def test_price_forms(text, expected):
    assert parse_prices(text) == expected


@pytest.mark.parametrize("text", ["a=1", "a", "=1/2", "a=x/1", "a=1/2/3", "a=-1/0", '{"a": 1}', "{bad", "[1, 2]",
                                  '{"a": [1, "x"]}', "a=1e9/1"])
def test_bad_prices_are_refused(text):
    with pytest.raises(ValueError):
        parse_prices(text)


def test_server_settings_take_prices_and_retention():
    settings = ServerSettings(prices="gpt-4o=2/1,*=3/0.3", stats_retention="30d")
    assert settings.prices == {"gpt-4o": (2.0, 1.0), "*": (3.0, 0.3)}
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
