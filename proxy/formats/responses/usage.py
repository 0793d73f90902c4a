"""The Responses API's usage as a bill (`proxy.core.answers`).

`usage.input_tokens` is every input token, `input_tokens_details.cached_tokens` the share a
prompt cache served (OpenAI reports no cache writes: they cost the input price),
`output_tokens` the output (reasoning included). A stream always reports it, on its terminal
event's `response` (`response.completed`, `.incomplete`, `.failed`); over the WebSocket mode the
events are the same.
"""

from __future__ import annotations

from typing import Any

from proxy.core.answers import UNREPORTED, Bill, of_openai_usage
from proxy.core.jsonio import JsonObject

TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


def bill_of(usage: object) -> Bill:
    return of_openai_usage(
        usage, input_key="input_tokens", output_key="output_tokens", details_key="input_tokens_details"
    )


class ResponsesUsageStream:
    def __init__(self) -> None:
        self._usage: object = None

    def feed(self, event: JsonObject) -> None:
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

    def asking(self, body: JsonObject) -> JsonObject | None:
        return None  # a stream reports its usage unasked

    def unasked(self, data: bytes) -> bytes | None:
        return data


USAGE = ResponsesUsage()
