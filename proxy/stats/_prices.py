"""Prices per model, to value a measured bill (`proxy.core.answers`) in money.

A price (`proxy.core.answers.Price`) is $ per million tokens of each part of a bill: uncached
input, cache reads, cache writes of 5 minutes and of 1 hour, output. A model is priced by the
longest table entry its name starts with (`gpt-4o-mini-2024-07-18` → `gpt-4o-mini`), after any
`provider/` prefix; `*` is the fallback for every other model.

OpenAI discounts cache reads and charges no premium for writes (it reports none: they are
uncached input); Anthropic bills reads at 0.1× the input price, writes at 1.25× (5 minutes)
or 2× (1 hour). docs/billing.md says where these figures come from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from proxy.core.answers import Price
from proxy.option_text import json_or_commas

FALLBACK = "*"
FIELDS = ("input", "cached", "cache_write_5m", "cache_write_1h", "output")
MAX_PRICE = 10_000  # $ per million tokens: above, a typo


def _openai(input: float, cached: float, output: float) -> Price:
    return Price(input, cached, input, input, output)


def _anthropic(input: float, output: float) -> Price:
    return Price(input, round(input * 0.1, 6), round(input * 1.25, 6), input * 2, output)


DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o": _openai(2.50, 1.25, 10.00),
    "gpt-4o-mini": _openai(0.15, 0.075, 0.60),
    "gpt-4.1": _openai(2.00, 0.50, 8.00),
    "gpt-4.1-mini": _openai(0.40, 0.10, 1.60),
    "gpt-4.1-nano": _openai(0.10, 0.025, 0.40),
    "gpt-5": _openai(1.25, 0.125, 10.00),
    "gpt-5-mini": _openai(0.25, 0.025, 2.00),
    "gpt-5-nano": _openai(0.05, 0.005, 0.40),
    "o3": _openai(2.00, 0.50, 8.00),
    "o4-mini": _openai(1.10, 0.275, 4.40),
    "claude-opus-4": _anthropic(15.00, 75.00),
    "claude-opus-4-5": _anthropic(5.00, 25.00),
    "claude-sonnet-4": _anthropic(3.00, 15.00),
    "claude-haiku-4": _anthropic(1.00, 5.00),
    FALLBACK: _openai(2.50, 0.25, 10.00),
}

EXPECTED = (
    "expected model=prices pairs separated by commas, each model's prices in $ per million tokens "
    "separated by /: input/cached, input/cached/output or input/cached/write5m/write1h/output "
    "(e.g. gpt-4o=2.5/1.25/10,*=3/0.3/15), or a JSON object, e.g. "
    '{"gpt-4o": [2.5, 1.25, 10]} or {"claude-sonnet-4": {"input": 3, "cached": 0.3, '
    '"cache_write_5m": 3.75, "cache_write_1h": 6, "output": 15}}'
)
_BY_COUNT = {2: FIELDS[:2], 3: ("input", "cached", "output"), 5: FIELDS}


def builtin(name: str) -> Price:
    """The built-in price a table entry named `name` stands in for (its longest default entry)."""
    return _lookup(DEFAULT_PRICES, name, _DEFAULT_NAMES)


def _longest_first(prices: Mapping[str, Price]) -> list[str]:
    return sorted((n for n in prices if n != FALLBACK), key=len, reverse=True)


_DEFAULT_NAMES = _longest_first(DEFAULT_PRICES)


def _lookup(prices: Mapping[str, Price], model: str | None, names: Sequence[str] | None = None) -> Price:
    name = (model or "").rsplit("/", 1)[-1].lower()
    for entry in _longest_first(prices) if names is None else names:
        if name.startswith(entry.lower()):
            return prices[entry]
    return prices[FALLBACK]


def completed(name: str, given: Mapping[str, float]) -> Price:
    """A price from the parts given: any part not given keeps the built-in ratio to the input
    price (of the entry `name` would get by default: a Claude model's writes stay 1.25× and
    2× its input, an OpenAI model's equal to it); `input` must be given."""
    base = builtin(name)
    scale = given["input"] / base.input if base.input else 1.0
    return Price(**{f: float(given[f]) if f in given else round(getattr(base, f) * scale, 6) for f in FIELDS})


def _entry(name: str, entry: object) -> Price:
    if isinstance(entry, Price):
        return entry
    if isinstance(entry, Mapping):
        unknown = sorted(str(k) for k in entry if k not in FIELDS)
        if unknown:
            raise ValueError(f"{EXPECTED}; {name!r}: unknown price {unknown[0]!r} (known: {', '.join(FIELDS)})")
        if "input" not in entry:
            raise ValueError(f"{EXPECTED}; {name!r} needs an input price")
        parts = dict(entry)
    elif isinstance(entry, Sequence) and not isinstance(entry, (str, bytes)):
        if len(entry) not in _BY_COUNT:
            raise ValueError(f"{EXPECTED}; {name!r} has {len(entry)} prices (2, 3 or 5 expected)")
        parts = dict(zip(_BY_COUNT[len(entry)], entry))
    else:
        raise ValueError(f"{EXPECTED}; {name!r}: {entry!r} is not a list of prices")
    numbers: dict[str, float] = {}
    for field, value in parts.items():
        if isinstance(value, bool):
            raise ValueError(f"{EXPECTED}; {name!r}: {field} {value!r} is not a number")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{EXPECTED}; {name!r}: {field} {value!r} is not a number") from None
        if not 0 <= number < MAX_PRICE:  # NaN fails too
            raise ValueError(f"{EXPECTED}; {name!r}: {field} must be between 0 and {MAX_PRICE} $ per million tokens")
        numbers[field] = number
    return completed(name, numbers)


def parse_prices(value: object) -> dict[str, Price]:
    """`--prices`: a JSON object or `model=prices` pairs separated by commas (`EXPECTED`).
    ValueError otherwise."""
    if isinstance(value, str):
        value = json_or_commas(value, opener="{", expected=EXPECTED)
        if isinstance(value, list):
            pairs: dict[str, object] = {}
            for pair in value:
                name, sep, numbers = pair.partition("=")
                if not sep or not name.strip():
                    raise ValueError(f"{EXPECTED}; got {pair!r}")
                pairs[name.strip()] = numbers.split("/")
            value = pairs
    if not isinstance(value, Mapping):
        raise ValueError(EXPECTED)
    return {str(name): _entry(str(name), entry) for name, entry in value.items()}


class PriceTable:
    """The defaults with the operator's entries on top."""

    def __init__(self, overrides: Mapping[str, Price | Sequence[float]] | None = None) -> None:
        self.prices = {**DEFAULT_PRICES, **{n: _entry(n, p) for n, p in (overrides or {}).items()}}
        self._names = _longest_first(self.prices)

    def price(self, model: str | None) -> Price:
        return _lookup(self.prices, model, self._names)
