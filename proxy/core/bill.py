"""The measured bill: what a provider says it charged for upstream answers, as it reports it.

A `Bill` is the tokens of some answers split the way providers price them — uncached input,
cache reads, cache writes (5 minutes, 1 hour), output — and how many answers it counts: those
whose usage was read (`answers`) and those that reported none the proxy could read
(`unreported`: counted, never guessed). Bills add up; `cost(price)` values one in dollars.

Where a bill comes from (the `UsageReader` each wire format supplies: `proxy.formats.*.usage`)
and what it is summed over (a turn's reload rounds, the proxy's summary calls, keep-alive pings:
`KINDS`) is outside this module: here only the values and their arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Protocol

from proxy.core.jsonio import JsonObject

PARTS = ("uncached", "cache_read", "cache_write_5m", "cache_write_1h", "output")
INPUT_PARTS = PARTS[:4]
# What a bill is for: a client's turn (its rounds), the proxy's own summary calls, keep-alive pings.
KINDS = ("turn", "summary", "keepalive")
MAX_TOKENS = 10**12  # a count above this is not a usage any provider reports: read as none


def count(value: object) -> int | None:
    """A reported token count: a non-negative int (not a bool, not a float, not text) up to
    MAX_TOKENS; None for anything else."""
    if type(value) is not int or value < 0 or value > MAX_TOKENS:
        return None
    return value


def optional(value: object) -> int | None:
    """`count` of a field a provider may leave out or send as null (then 0)."""
    return 0 if value is None else count(value)


@dataclass(frozen=True)
class Price:
    """$ per million tokens of each part of a bill."""

    input: float
    cached: float  # a cache read
    cache_write_5m: float
    cache_write_1h: float
    output: float

    def of(self, part: str) -> float:
        return self.cached if part == "cache_read" else self.input if part == "uncached" else getattr(self, part)


@dataclass(frozen=True)
class Cost:
    """Dollars of each part of a bill."""

    uncached: float = 0.0
    cache_read: float = 0.0
    cache_write_5m: float = 0.0
    cache_write_1h: float = 0.0
    output: float = 0.0

    @property
    def total(self) -> float:
        return self.uncached + self.cache_read + self.cache_write_5m + self.cache_write_1h + self.output


@dataclass(frozen=True)
class Bill:
    uncached: int = 0  # input tokens billed at the full input price
    cache_read: int = 0
    cache_write_5m: int = 0
    cache_write_1h: int = 0
    output: int = 0
    answers: int = 0  # upstream answers whose usage is counted here
    unreported: int = 0  # upstream answers that reported no usage the proxy could read

    def __add__(self, other: Bill) -> Bill:
        if not isinstance(other, Bill):
            return NotImplemented
        return Bill(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @property
    def input(self) -> int:
        """Every input token billed, whatever its price."""
        return self.uncached + self.cache_read + self.cache_write_5m + self.cache_write_1h

    @property
    def cache_write(self) -> int:
        return self.cache_write_5m + self.cache_write_1h

    def tokens(self) -> dict[str, int]:
        return {part: getattr(self, part) for part in PARTS}

    def cost(self, price: Price) -> Cost:
        return Cost(**{part: getattr(self, part) * price.of(part) / 1e6 for part in PARTS})

    def scaled_input(self, factor: float) -> Bill:
        """The same answers with `factor` times their input, split in the same shares (the
        counterfactual's arithmetic: `proxy.stats.turns`)."""
        return replace(self, **{p: round(getattr(self, p) * factor) for p in INPUT_PARTS})


NONE = Bill()
UNREPORTED = Bill(unreported=1)  # one answer without a usage the proxy could read


def reported(**parts: object) -> Bill:
    """One answer's bill from its parts (each a count: `count`); UNREPORTED when any is not."""
    counted = {name: count(value) for name, value in parts.items()}
    if any(value is None for value in counted.values()):
        return UNREPORTED
    return Bill(**counted, answers=1)  # type: ignore[arg-type]


class UsageStream(Protocol):
    """The usage of one streamed answer, read as its events pass."""

    def feed(self, event: JsonObject) -> None: ...

    def bill(self) -> Bill:
        """The answer's bill once its stream has ended (UNREPORTED: it reported none)."""


class UsageReader(Protocol):
    """How one wire format reports usage (`WireFormat.usage`)."""

    def of_answer(self, answer: Any) -> Bill:
        """The bill of one non-streamed answer (a JSON value: anything else is UNREPORTED)."""

    def stream(self) -> UsageStream: ...

    def asking(self, body: JsonObject) -> JsonObject | None:
        """The body to send instead, asking the upstream for the usage of a streamed answer the
        client did not ask for (chat completions' `stream_options.include_usage`); None when
        the upstream reports it anyway, or the client asked itself."""

    def unasked(self, data: bytes) -> bytes | None:
        """One SSE event's data of an answer `asking` was sent for, as the client would have got
        it without: unchanged, rewritten, or None (not sent)."""


class Meter:
    """A turn's bills as its upstream answers come: the sum, and the first and the last (the
    counterfactual reads them: `proxy.stats.turns`). Owned by one request."""

    def __init__(self) -> None:
        self.total: Bill = NONE
        self.first: Bill | None = None
        self.last: Bill | None = None

    def add(self, bill: Bill) -> None:
        self.total = self.total + bill
        self.first = bill if self.first is None else self.first
        self.last = bill


def of_openai_usage(usage: object, *, input_key: str, output_key: str, details_key: str) -> Bill:
    """An OpenAI usage object (chat's prompt/completion names, Responses' input/output names): the
    input count includes `<details>.cached_tokens`, the cache reads; no cache writes are billed."""
    if not isinstance(usage, dict):
        return UNREPORTED
    total, output = count(usage.get(input_key)), optional(usage.get(output_key))
    details = usage.get(details_key)
    if details is not None and not isinstance(details, dict):
        return UNREPORTED
    cached = optional((details or {}).get("cached_tokens"))
    if total is None or cached is None or cached > total:
        return UNREPORTED
    return reported(uncached=total - cached, cache_read=cached, output=output)
