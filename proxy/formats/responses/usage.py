"""The Responses API's usage as a bill (`proxy.core.bill`).

`usage.input_tokens` is every input token, `input_tokens_details.cached_tokens` the share a
prompt cache served (OpenAI reports no cache writes: they cost the input price),
`output_tokens` the output (reasoning included). A stream always reports it, on its terminal
event's `response` (`response.completed`, `.incomplete`, `.failed`); over the WebSocket mode the
events are the same.
"""

from __future__ import annotations

from typing import Any

from proxy.core.bill import UNREPORTED, Bill, count, optional, reported

TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


def bill_of(usage: object) -> Bill:
    if not isinstance(usage, dict):
        return UNREPORTED
    total, output = count(usage.get("input_tokens")), optional(usage.get("output_tokens"))
    details = usage.get("input_tokens_details")
    if details is not None and not isinstance(details, dict):
        return UNREPORTED
    cached = optional((details or {}).get("cached_tokens"))
    if total is None or cached is None or cached > total:
        return UNREPORTED
    return reported(uncached=total - cached, cache_read=cached, output=output)


class ResponsesUsageStream:
    def __init__(self) -> None:
        self._usage: object = None

    def feed(self, event: dict) -> None:
        response = event.get("response")
        if event.get("type") in TERMINAL and isinstance(response, dict):
            self._usage = response.get("usage")

    def bill(self) -> Bill:
        return bill_of(self._usage)


class ResponsesUsage:
    def of_answer(self, answer: Any) -> Bill:
        return bill_of(answer.get("usage")) if isinstance(answer, dict) else UNREPORTED

    def stream(self) -> ResponsesUsageStream:
        return ResponsesUsageStream()

    def asking(self, body: dict) -> dict | None:
        return None  # a stream reports its usage unasked

    def unasked(self, data: bytes) -> bytes | None:
        return data


USAGE = ResponsesUsage()
