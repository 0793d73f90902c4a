"""The Messages API's usage as a bill (`proxy.core.answers`).

Anthropic splits the input itself: `input_tokens` are those after the last cache breakpoint
(uncached), `cache_read_input_tokens` those read from the cache, `cache_creation_input_tokens`
those written to it, split by lifetime in `cache_creation` (`ephemeral_5m_input_tokens`,
`ephemeral_1h_input_tokens`; without the split a write is a 5-minute one, the default TTL).
A stream's `message_start` carries the usage so far and each `message_delta` the counts that
changed, cumulative: later counts replace earlier ones, key by key.
"""

from __future__ import annotations

from typing import Any

from proxy.core.answers import UNREPORTED, Bill, count, optional, reported
from proxy.core.jsonio import JsonObject


def bill_of(usage: object) -> Bill:
    if not isinstance(usage, dict):
        return UNREPORTED
    uncached, output = count(usage.get("input_tokens")), optional(usage.get("output_tokens"))
    read, written = optional(usage.get("cache_read_input_tokens")), optional(usage.get("cache_creation_input_tokens"))
    split = usage.get("cache_creation")
    if split is not None and not isinstance(split, dict):
        return UNREPORTED
    five, hour = (
        optional((split or {}).get("ephemeral_5m_input_tokens")),
        optional((split or {}).get("ephemeral_1h_input_tokens")),
    )
    if None in (uncached, output, read, written, five, hour):
        return UNREPORTED
    assert written is not None and five is not None and hour is not None
    if usage.get("cache_creation_input_tokens") is None:
        written = five + hour
    if five + hour > written:
        return UNREPORTED  # the split says more was written than the total: neither is to be trusted
    return reported(
        uncached=uncached, cache_read=read, cache_write_5m=written - hour, cache_write_1h=hour, output=output
    )


class MessagesUsageStream:
    def __init__(self) -> None:
        self._usage: JsonObject | None = None

    def feed(self, event: JsonObject) -> None:
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            usage = event["message"].get("usage")
        elif kind == "message_delta":
            usage = event.get("usage")
        else:
            return
        if isinstance(usage, dict):
            self._usage = {**(self._usage or {}), **{k: v for k, v in usage.items() if v is not None}}
        elif usage is not None:
            self._usage = {"input_tokens": None}  # a usage that is not an object: none to read

    def bill(self) -> Bill:
        return bill_of(self._usage)


class MessagesUsage:
    def of_answer(self, answer: Any) -> Bill:
        return bill_of(answer.get("usage")) if isinstance(answer, dict) else UNREPORTED

    def stream(self) -> MessagesUsageStream:
        return MessagesUsageStream()

    def asking(self, body: JsonObject) -> JsonObject | None:
        return None  # a stream reports its usage unasked

    def unasked(self, data: bytes) -> bytes | None:
        return data


USAGE = MessagesUsage()
