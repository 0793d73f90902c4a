"""What a turn adds to the statistics: its counters, valued at its model's price, the buckets and
windows they are summed in, and the headline figures read back.

Prices per model, to value a measured bill (`proxy.core.answers`) in money.

A price (`proxy.core.answers.Price`) is $ per million tokens of each part of a bill: uncached
input, cache reads, cache writes of 5 minutes and of 1 hour, output. A model is priced by the
longest table entry its name starts with (`gpt-4o-mini-2024-07-18` → `gpt-4o-mini`), after any
`provider/` prefix; `*` is the fallback for every other model.

OpenAI discounts cache reads and charges no premium for writes (it reports none: they are
uncached input); Anthropic bills reads at 0.1× the input price, writes at 1.25× (5 minutes)
or 2× (1 hour). docs/billing.md says where these figures come from.

The pure arithmetic of statistics buckets: their keys, their lifetimes, and which of them a
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

One managed request as the statistics see it (a `Turn`), the counters it adds to a bucket,
and the headline figures read back from summed counters.

Money is the bill the upstream reported (`proxy.core.answers`), valued at the price of the turn's
model when it is recorded: per call (`turn`: the client's answer and its reload rounds;
`summary`: the proxy's summary calls; `keepalive`: cache pings) and per part (uncached input,
cache reads, 5-minute and 1-hour cache writes, output). Beside it the counterfactual, an
estimate (`counterfactual`): what the raw history would have been billed with the same cache
behaviour, for the turns whose every answer reported usage.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from proxy.core.answers import INPUT_PARTS, KINDS, NONE, PARTS, Bill, Meter, Price
from proxy.core.compaction import COMPACTION_ACTION, EDITS_ACTION
from proxy.core.settings import Arm
from proxy.offload.tenant import key
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


ACTIONS = ("none", "compact", "compress", "compact+compress", "compress-pending", "compact+compress-pending")
COUNTERS = (
    "requests",
    "tokens_before",
    "tokens_after",
    "reload_rounds",
    "searches",
    "summaries_made",
    "summaries_reused",
    "summaries_failed",
    "summaries_pending",
    "warnings",
    "store_warnings",
    "errors",
    "prefix_tokens",
    "image_tokens_saved",
    "emulated_compactions",
    "context_edits",
)
# What X-Offload-Action adds when the proxy applied the provider's context management itself
# (`proxy.core.compaction`): counted apart, the offload action is what is left.
EMULATED = {COMPACTION_ACTION: "emulated_compactions", EDITS_ACTION: "context_edits"}
MAX_MODELS = 8  # models a headline names with their bill, most money first


@dataclass(frozen=True)
class Turn:
    """A managed request, once answered. Never holds content or a credential."""

    namespace: str
    session: str | None
    time: float
    route: str
    model: str | None
    status: int
    stream: bool
    tokens_before: int
    tokens_after: int
    action: str
    refs: int = 0
    refs_created: int = 0
    transport: str = "http"  # "websocket": a response.create of the Responses WebSocket mode
    reload_rounds: int = 0
    searches: int = 0
    summaries_made: int = 0
    summaries_failed: int = 0
    warnings: int = 0
    store_warnings: int = 0
    image_tokens_saved: int = 0  # of tokens_before - tokens_after, by offloading images and documents
    prefix_tokens: int = 0  # of tokens_after, the share a provider's prompt cache could serve (proxy.stats._recorder)
    # Linking a Responses turn to its session (proxy.stats._sessions), never listed: the response id
    # it continues from (when its session is to be found from it), the id of its stored answer.
    continues: str | None = None
    response_id: str | None = None
    label: str | None = None  # what the dashboard calls the namespace (Caller.label), never listed
    bill: Bill = NONE  # what the upstream billed for the turn's answers (its reload rounds included)
    summary_bill: Bill = NONE  # for the proxy's summary calls made while the turn waited
    counterfactual: Bill | None = None  # the raw history's estimated bill (`counterfactual`); None: unknown
    # observe mode (`proxy.http.observed`): the raw history went out (`tokens_before`, `bill`);
    # `tokens_after`, `action` and `counterfactual` are what the proxy would have forwarded and billed
    observed: bool = False
    # a session of the holdout (`proxy.http.observed`): its arm ("control": forwarded as received),
    # how the client's answer ended (`proxy.core.answers`) and the repeated identical tool calls of
    # the request's history (`proxy.core.answers`)
    arm: Arm | None = None
    finish: str | None = None
    answer_error: bool = False
    context_error: bool = False
    repeated_calls: int = 0

    def row(self) -> dict[str, Any]:
        """As a session lists it."""
        row = asdict(self)
        for name in ("namespace", "session", "continues", "response_id", "label"):
            del row[name]
        row["time"] = round(self.time, 3)
        return row


def counterfactual(meter: Meter, *, tokens_before: int, tokens_after: int) -> Bill | None:
    """What the raw history would have been billed with the same cache behaviour (an estimate):
    the first answer's input, each part scaled by raw tokens over forwarded tokens (the same
    shares uncached, read and written), and the last answer's output (what the client got;
    the reload rounds are the proxy's). None when an answer reported no usage, or nothing was
    forwarded."""
    if meter.first is None or meter.last is None or meter.total.unreported or tokens_after <= 0:
        return None
    first = meter.first.scaled_input(tokens_before / tokens_after)
    return replace(first, output=meter.last.output, answers=1, unreported=0)


def bill_fields(bill: Bill, price: Price, call: str, *, model: str | None) -> Fields:
    """What one bill adds to a bucket: tokens and dollars per part of `call`, answers with and
    without usage, and the dollars and tokens of the model."""
    cost = bill.cost(price)
    fields: Fields = {f"bill:{call}:{p}": getattr(bill, p) for p in PARTS}
    fields.update({f"usd:{call}:{p}": getattr(cost, p) for p in PARTS})
    fields[f"answers:{call}"] = bill.answers
    fields[f"unreported:{call}"] = bill.unreported
    if model and bill.answers:
        fields[f"model_usd:{model}"] = cost.total
        fields[f"model_tokens:{model}"] = bill.input + bill.output
    return {k: v for k, v in fields.items() if v}


def split_action(action: str) -> tuple[str, set[str]]:
    """(the offload action, the emulated parts) of an X-Offload-Action value."""
    parts = action.split("+")
    emulated = {p for p in parts if p in EMULATED}
    return "+".join(p for p in parts if p not in EMULATED) or "none", emulated


OBSERVED = "obs:"  # an observed turn's counters: the same names behind this prefix, never mixed with managed ones


def turn_fields(turn: Turn, prices: PriceTable) -> Fields:
    """What one turn adds to a bucket. A summary is *reused* when the turn went out compressed
    without making one; *pending* when it went out uncompressed while its summary was being
    made in the background (a stall avoided: the turn did not wait). An observed turn's are the
    same counters behind `OBSERVED` (`observed_headline` reads them back)."""
    if turn.observed:
        return {OBSERVED + k: v for k, v in turn_fields(replace(turn, observed=False), prices).items()}
    action, emulated = split_action(turn.action)
    compressed = "compress" in action
    pending = "compress-pending" in action
    fields: Fields = {
        "requests": 1,
        "tokens_before": turn.tokens_before,
        "tokens_after": turn.tokens_after,
        f"action:{action}": 1,
        **{EMULATED[part]: 1 for part in emulated},
        "reload_rounds": turn.reload_rounds,
        "searches": turn.searches,
        "summaries_made": turn.summaries_made,
        "summaries_failed": turn.summaries_failed,
        "summaries_reused": int(compressed and not pending and turn.summaries_made == 0),
        "summaries_pending": int(pending),
        "warnings": turn.warnings,
        "store_warnings": turn.store_warnings,
        "errors": int(turn.status >= 400),
        "prefix_tokens": turn.prefix_tokens,
        "image_tokens_saved": turn.image_tokens_saved,
        "turns_without_usage": int(turn.bill.unreported > 0),
    }
    price = prices.price(turn.model)
    fields.update(bill_fields(turn.bill, price, "turn", model=turn.model))
    fields.update(bill_fields(turn.summary_bill, price, "summary", model=turn.model))
    if turn.counterfactual is not None:
        cf = turn.counterfactual.cost(price)
        fields["cf_turns"] = 1
        fields.update({f"cf:{p}": getattr(turn.counterfactual, p) for p in PARTS})
        fields.update({f"cf_usd:{p}": getattr(cf, p) for p in PARTS})
        fields["cf_billed_usd"] = turn.bill.cost(price).total
    return {k: v for k, v in fields.items() if v}  # zeros are not written


def _split(fields: Mapping[str, int | float], tokens: str, usd: str) -> dict[str, Any]:
    """{"tokens": {part: n}, "usd": {part: $, "total": $}} of summed `<tokens><part>` and
    `<usd><part>` counters."""
    money = {p: round(float(fields.get(f"{usd}{p}", 0.0)), 6) for p in PARTS}
    return {
        "tokens": {p: int(fields.get(f"{tokens}{p}", 0)) for p in PARTS},
        "usd": {**money, "total": round(sum(money.values()), 6)},
    }


def bill_headline(fields: Mapping[str, int | float]) -> dict[str, Any]:
    """The bill of summed counters: per call and all together, the answers that reported no
    usage, the models that cost most."""
    calls = {
        call: {
            **_split(fields, f"bill:{call}:", f"usd:{call}:"),
            "answers": int(fields.get(f"answers:{call}", 0)),
            "answers_without_usage": int(fields.get(f"unreported:{call}", 0)),
        }
        for call in KINDS
    }
    tokens = {p: sum(c["tokens"][p] for c in calls.values()) for p in PARTS}
    money = {p: round(sum(c["usd"][p] for c in calls.values()), 6) for p in PARTS}
    models = sorted(
        ((k.split(":", 1)[1], float(v)) for k, v in fields.items() if k.startswith("model_usd:")),
        key=lambda m: (-m[1], m[0]),
    )
    return {
        "tokens": {**tokens, "input": sum(tokens[p] for p in INPUT_PARTS)},
        "usd": {**money, "total": round(sum(money.values()), 6)},
        "calls": calls,
        "answers": sum(c["answers"] for c in calls.values()),
        "answers_without_usage": sum(c["answers_without_usage"] for c in calls.values()),
        "turns_without_usage": int(fields.get("turns_without_usage", 0)),
        "models": [
            {"model": m, "usd": round(usd, 6), "tokens": int(fields.get(f"model_tokens:{m}", 0))}
            for m, usd in models[:MAX_MODELS]
        ],
    }


def counterfactual_headline(fields: Mapping[str, int | float], bill: Mapping[str, Any]) -> dict[str, Any]:
    """The estimate beside the bill (`counterfactual`): the raw history's bill over the turns it
    is known for, and what the proxy's side cost for the same turns (their bill, and every
    summary call and ping)."""
    cf = _split(fields, "cf:", "cf_usd:")
    extra = bill["calls"]["summary"]["usd"]["total"] + bill["calls"]["keepalive"]["usd"]["total"]
    billed = round(float(fields.get("cf_billed_usd", 0.0)) + extra, 6)
    return {
        "estimate": True,
        "turns": int(fields.get("cf_turns", 0)),
        **cf,
        "billed_usd": billed,
        "saved_usd": round(cf["usd"]["total"] - billed, 6),
        "ratio": round(billed / cf["usd"]["total"], 4) if cf["usd"]["total"] else None,
    }


def headline(fields: Mapping[str, int | float]) -> dict[str, Any]:
    """Summed counters as the API shows them (every counter present, 0 when none)."""
    n = {name: int(fields.get(name, 0)) for name in COUNTERS}
    before, after = n["tokens_before"], n["tokens_after"]
    bill = bill_headline(fields)
    estimate = counterfactual_headline(fields, bill)
    actions = {a: 0 for a in ACTIONS}
    actions.update({name.split(":", 1)[1]: int(v) for name, v in fields.items() if name.startswith("action:")})
    return {
        "requests": n["requests"],
        "tokens_before": before,
        "tokens_after": after,
        "tokens_saved": before - after,
        "image_tokens_saved": n["image_tokens_saved"],
        "text_tokens_saved": before - after - n["image_tokens_saved"],
        "forwarded_ratio": round(after / before, 4) if before else None,
        "prefix_tokens": n["prefix_tokens"],
        "prefix_reuse": round(n["prefix_tokens"] / after, 4) if after else None,
        "bill": bill,
        "counterfactual": estimate,
        "cost_billed_usd": bill["usd"]["total"],  # measured
        "cost_without_proxy_usd": estimate["usd"]["total"],  # estimated (`counterfactual`)
        "cost_saved_usd": estimate["saved_usd"],  # estimated
        "actions": actions,
        "reload_rounds": n["reload_rounds"],
        "reload_rate": round(n["reload_rounds"] / n["requests"], 4) if n["requests"] else None,
        "searches": n["searches"],
        "summaries": {
            "made": n["summaries_made"],
            "reused": n["summaries_reused"],
            "failed": n["summaries_failed"],
            "pending": n["summaries_pending"],
        },
        "stalls_avoided": n["summaries_pending"],
        "warnings": n["warnings"],
        "store_warnings": n["store_warnings"],
        "errors": n["errors"],
        "emulated": {"compactions": n["emulated_compactions"], "context_edits": n["context_edits"]},
        **({"observed": observed_headline(fields)} if any(k.startswith(OBSERVED) for k in fields) else {}),
    }


def observed_headline(fields: Mapping[str, int | float]) -> dict[str, Any]:
    """The observed turns of summed counters (`OBSERVED`): what went out and was billed (the raw
    history), beside what the proxy would have forwarded and billed (an estimate)."""
    inner = headline({k[len(OBSERVED) :]: v for k, v in fields.items() if k.startswith(OBSERVED)})
    would = inner["counterfactual"]
    billed = inner["bill"]["usd"]["total"]
    return {
        "requests": inner["requests"],
        "tokens_forwarded": inner["tokens_before"],
        "tokens_would_forward": inner["tokens_after"],
        "tokens_would_save": inner["tokens_saved"],
        "would_forward_ratio": inner["forwarded_ratio"],
        "bill": inner["bill"],
        "would_bill": {"estimate": True, "turns": would["turns"], "tokens": would["tokens"], "usd": would["usd"]},
        "would_save_usd": round(billed - would["usd"]["total"], 6) if would["turns"] else None,
        "actions": inner["actions"],
        "errors": inner["errors"],
    }


def point(start: int, fields: Mapping[str, int | float]) -> dict[str, Any]:
    """One point of a time series: the counters a chart draws."""
    actions = {name.split(":", 1)[1]: int(v) for name, v in fields.items() if name.startswith("action:")}
    return {
        "t": start,
        "requests": int(fields.get("requests", 0)),
        "tokens_before": int(fields.get("tokens_before", 0)),
        "tokens_after": int(fields.get("tokens_after", 0)),
        "prefix_tokens": int(fields.get("prefix_tokens", 0)),
        "image_tokens_saved": int(fields.get("image_tokens_saved", 0)),
        "reload_rounds": int(fields.get("reload_rounds", 0)),
        "billed_usd": round(sum(float(v) for k, v in fields.items() if k.startswith("usd:")), 6),
        "actions": actions,
    }
