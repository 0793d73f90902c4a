"""Input prices per model, to value the tokens the proxy saved in money.

A price is (input, cached input) in dollars per million tokens. A model is priced by the
longest table entry its name starts with (`gpt-4o-mini-2024-07-18` → `gpt-4o-mini`), after
any `provider/` prefix; `*` is the fallback for every other model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from proxy.option_text import json_or_commas

FALLBACK = "*"
# Share of an agent turn's input a provider's prompt cache serves: each turn resends the last
# one's whole context and appends a little (what `replay` measures as prefix reuse, ~0.95).
CACHED_SHARE = 0.9


@dataclass(frozen=True)
class Price:
    input: float  # $ per million uncached input tokens
    cached: float  # $ per million cached input tokens

    def blended(self, cached_share: float = CACHED_SHARE) -> float:
        """$ per million tokens of a turn whose input is `cached_share` cache hits."""
        return cached_share * self.cached + (1 - cached_share) * self.input


DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o": Price(2.50, 1.25),
    "gpt-4o-mini": Price(0.15, 0.075),
    "gpt-4.1": Price(2.00, 0.50),
    "gpt-4.1-mini": Price(0.40, 0.10),
    "gpt-4.1-nano": Price(0.10, 0.025),
    "gpt-5": Price(1.25, 0.125),
    "gpt-5-mini": Price(0.25, 0.025),
    "gpt-5-nano": Price(0.05, 0.005),
    "o3": Price(2.00, 0.50),
    "o4-mini": Price(1.10, 0.275),
    "claude-opus-4": Price(15.00, 1.50),
    "claude-opus-4-5": Price(5.00, 0.50),
    "claude-sonnet-4": Price(3.00, 0.30),
    "claude-haiku-4": Price(1.00, 0.10),
    FALLBACK: Price(2.50, 0.25),
}


def parse_prices(value: object) -> dict[str, Price]:
    """`--prices`: a JSON object (`{"my-model": [1.0, 0.1]}` or `{"my-model": {"input": 1.0,
    "cached": 0.1}}`) or `model=input/cached` pairs separated by commas. ValueError otherwise."""
    expected = ('expected model=input/cached pairs in $ per million tokens separated by commas, e.g. '
                'gpt-4o=2.5/1.25,*=3/0.3, or a JSON object, e.g. {"gpt-4o": [2.5, 1.25]}')
    if isinstance(value, str):
        value = json_or_commas(value, opener="{", expected=expected)
        if isinstance(value, list):
            pairs: dict[str, object] = {}
            for pair in value:
                name, sep, numbers = pair.partition("=")
                if not sep or not name.strip():
                    raise ValueError(f"{expected}; got {pair!r}")
                pairs[name.strip()] = numbers.split("/")
            value = pairs
    if not isinstance(value, Mapping):
        raise ValueError(expected)
    table: dict[str, Price] = {}
    for name, entry in value.items():
        if isinstance(entry, Price):
            table[str(name)] = entry
            continue
        if isinstance(entry, Mapping):
            entry = [entry.get("input"), entry.get("cached", entry.get("input"))]
        if not isinstance(entry, (list, tuple)) or len(entry) != 2:
            raise ValueError(f"{expected}; {name!r} needs two prices (input and cached input)")
        try:
            numbers = [float(n) for n in entry]
        except (TypeError, ValueError):
            raise ValueError(f"{expected}; {name!r}: {entry!r} are not numbers") from None
        if not all(0 <= n < 10_000 for n in numbers):
            raise ValueError(f"{expected}; {name!r}: prices must be between 0 and 10000 $ per million tokens")
        table[str(name)] = Price(*numbers)
    return table


class PriceTable:
    """The defaults with the operator's entries on top."""

    def __init__(self, overrides: Mapping[str, Price | tuple[float, float]] | None = None) -> None:
        self.prices = {**DEFAULT_PRICES, **{n: p if isinstance(p, Price) else Price(*p) for n, p in
                                            (overrides or {}).items()}}
        self._names = sorted((n for n in self.prices if n != FALLBACK), key=len, reverse=True)

    def price(self, model: str | None) -> Price:
        name = (model or "").rsplit("/", 1)[-1].lower()
        for entry in self._names:
            if name.startswith(entry.lower()):
                return self.prices[entry]
        return self.prices[FALLBACK]

    def cost(self, model: str | None, tokens: int) -> float:
        """Dollars `tokens` input tokens of `model` cost, cache-weighted (`Price.blended`)."""
        return tokens * self.price(model).blended() / 1e6
