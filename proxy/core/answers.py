"""What the proxy reads of upstream answers, pure: the measured bill (`Bill`, `Meter`: the tokens
a provider says it charged, as it reports them), usage objects summed over rounds, how an
answer ended (`Ending`), text that arrives in pieces (`GrowingText`), and the repeated
identical tool calls of a history (the holdout counts them per session).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from typing import Any, Protocol

from proxy.core.jsonio import JsonObject
from proxy.core.view import ItemView

# ==================== the measured bill
# The measured bill: what a provider says it charged for upstream answers, as it reports it.
#
# A `Bill` is the tokens of some answers split the way providers price them — uncached input,
# cache reads, cache writes (5 minutes, 1 hour), output — and how many answers it counts: those
# whose usage was read (`answers`) and those that reported none the proxy could read
# (`unreported`: counted, never guessed). Bills add up; `cost(price)` values one in dollars.
#
# Where a bill comes from (the `UsageReader` each wire format supplies: `proxy.formats.*.usage`)
# and what it is summed over (a turn's reload rounds, the proxy's summary calls, keep-alive pings:
# `KINDS`) is outside this module: here only the values and their arithmetic.

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


# ==================== finish
# How an upstream answer ended, read off its JSON in any of the three formats: a whole answer,
# one event of its stream, or an error body. The holdout records it per turn (`proxy.stats.arms`:
# the last answer's finish of a session, its errors, its context-length errors). Pure.
#
# Chat Completions: a choice's `finish_reason`; Responses: the response's `status` (an
# `incomplete` one's `incomplete_details.reason`), whole or in its `response.completed`,
# `response.incomplete` or `response.failed` event; Anthropic Messages: `stop_reason`, whole or
# in its `message_delta` event. An error (`{"error": …}`, Anthropic's and the Responses stream's
# `"type": "error"`, a failed response) ends as `ERROR`, and is a context-length error when its
# code or message says the model's context window was exceeded.

ERROR = "error"
MAX_REASON = 40  # characters of a reason kept (the upstream's string)
CONTEXT_CODES = frozenset({"context_length_exceeded", "model_context_window_exceeded"})
_CONTEXT_TEXT = re.compile(
    r"context[ _-]?(length|window)|maximum context|prompt is too long|input is too long|"
    r"too many (input )?tokens|exceeds? the (model's )?(context|maximum)",
    re.IGNORECASE,
)
_REASON = re.compile(r"[A-Za-z0-9_.-]{1,40}")
TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


@dataclass(frozen=True)
class Ending:
    finish: str | None = None  # the finish (stop) reason; ERROR for an error
    error: bool = False
    context_error: bool = False  # of an error: the model's context window exceeded


def _reason(value: Any) -> str | None:
    return value if isinstance(value, str) and _REASON.fullmatch(value) else None


def is_context_error(error: Any) -> bool:
    """Does an error object (or its message) say the model's context window was exceeded?"""
    if isinstance(error, str):
        return bool(_CONTEXT_TEXT.search(error[:4096]))
    if not isinstance(error, dict):
        return False
    code = error.get("code") if isinstance(error.get("code"), str) else error.get("type")
    if isinstance(code, str) and code in CONTEXT_CODES:
        return True
    message = error.get("message")
    return isinstance(message, str) and bool(_CONTEXT_TEXT.search(message[:4096]))


def error_ending(error: Any) -> Ending:
    return Ending(ERROR, True, is_context_error(error))


def _of_response(response: Any) -> Ending | None:
    if not isinstance(response, dict):
        return None
    status = response.get("status")
    if status == "failed":
        return error_ending(response.get("error"))
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = _reason(details.get("reason")) if isinstance(details, dict) else None
        return Ending(reason or "incomplete", context_error=reason in CONTEXT_CODES)
    reason = _reason(status)
    return Ending(reason) if reason else None


def _of_choices(choices: list[Any]) -> Ending | None:
    for choice in choices:
        if isinstance(choice, dict) and (reason := _reason(choice.get("finish_reason"))) is not None:
            return Ending(reason)
    return None


def _stopped(reason: str | None) -> Ending | None:
    return None if reason is None else Ending(reason, context_error=reason in CONTEXT_CODES)


def of_value(value: Any) -> Ending | None:
    """What `value` (a parsed answer, stream event or error body) says of how the answer ended;
    None when it says nothing (most events of a stream)."""
    if not isinstance(value, dict):
        return None
    kind = value.get("type")
    if kind == "error":  # Anthropic's error body and event, the Responses stream's error event
        return error_ending(value.get("error") if isinstance(value.get("error"), dict) else value)
    if kind in TERMINAL_EVENTS:
        return _of_response(value.get("response"))
    if value.get("object") == "response":
        return _of_response(value)
    if isinstance(choices := value.get("choices"), list):
        return _of_choices(choices)
    if kind == "message":
        return _stopped(_reason(value.get("stop_reason")))
    if kind == "message_delta" and isinstance(delta := value.get("delta"), dict):
        return _stopped(_reason(delta.get("stop_reason")))
    if isinstance(value.get("error"), dict) and kind is None:  # OpenAI's error body, a chat stream's error chunk
        return error_ending(value["error"])
    return None


_MAY_END = re.compile(
    r'"(finish_reason|stop_reason)"\s*:\s*"|"error"\s*:\s*\{|"type"\s*:\s*"error"|'
    r'"response\.(completed|incomplete|failed)"'
)


def may_end(data: str) -> bool:
    """Might one event's JSON text say how its answer ended (worth parsing)? Not a chat chunk's
    `"finish_reason": null`, nor a Responses delta."""
    return _MAY_END.search(data) is not None


# ==================== growing text
# Text that arrives in pieces (a streamed answer, a tool call's arguments), read once it is whole.
#
# `text += piece` on an attribute or a dict entry copies the whole text at every piece: a 512 KB
# answer in 4-byte deltas copies about 34 GB. `GrowingText` keeps the pieces in a list and joins
# them when read, so collecting a stream costs time linear in its size, however it is cut.


class GrowingText:
    """Pieces of text in order; `str(...)` or `text()` is their concatenation (joined once, then kept)."""

    __slots__ = ("pieces",)

    def __init__(self, start: str = "") -> None:
        self.pieces: list[str] = [start] if start else []

    def add(self, piece: str) -> None:
        if piece:
            self.pieces.append(piece)

    def text(self) -> str:
        pieces = self.pieces
        if len(pieces) > 1:
            pieces[:] = ["".join(pieces)]  # later reads (and later pieces) start from the joined text
        return pieces[0] if pieces else ""

    __str__ = text

    def __bool__(self) -> bool:
        return bool(self.pieces)

    def __repr__(self) -> str:
        return f"GrowingText({len(self.pieces)} pieces)"


# ==================== repeats
# Repeated identical tool calls in a history: an agent re-running what it already ran is the
# signature of lost context, so the holdout counts them per session (`proxy.stats.arms`). Pure.
#
# Two calls are the same when their tool names are equal and their arguments are: a JSON object's
# arguments compared as parsed (key order and spacing aside), any other input as written.

MAX_ARGUMENT_CHARS = 100_000  # longer arguments are compared as written, never parsed


def call_key(name: str, arguments: str) -> tuple[str, str]:
    text = arguments.strip()
    if text.startswith("{") and len(text) <= MAX_ARGUMENT_CHARS:
        try:
            return name, json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
        except (ValueError, RecursionError):
            pass
    return name, arguments


def repeated_calls(items: Iterable[Any], view: ItemView) -> int:
    """How many tool calls in `items` repeat an earlier call of the same history exactly."""
    seen: set[tuple[str, str]] = set()
    repeats = 0
    for item in items:
        for name, arguments in view.call_details(item):
            key = call_key(name, arguments)
            if key in seen:
                repeats += 1
            else:
                seen.add(key)
    return repeats


# ==================== usage
# Summing usage objects over rounds (any wire format's shape: numbers and nested details).


def add_usage(total: JsonObject | None, usage: JsonObject | None) -> JsonObject | None:
    """Sum two usage objects: numbers are added, nested objects (`*_details`) summed the same way;
    other values are kept from the first that has them. Returns a new dict (None only when both
    are empty); neither argument is changed."""
    if not usage:
        return copy.deepcopy(total) if total else None
    if not total:
        return copy.deepcopy(usage)
    out = copy.deepcopy(total)
    for key, value in usage.items():
        if isinstance(value, bool) or value is None:
            out.setdefault(key, value)
        elif isinstance(value, (int, float)):
            current = out.get(key)
            out[key] = (current if isinstance(current, (int, float)) and not isinstance(current, bool) else 0) + value
        elif isinstance(value, dict):
            out[key] = add_usage(out.get(key) if isinstance(out.get(key), dict) else None, value)
        else:
            out.setdefault(key, copy.deepcopy(value))
    return out
