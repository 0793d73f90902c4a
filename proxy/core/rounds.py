"""The round interface: what the reload loop (`proxy.reload.loop`) asks of a wire format.

The loop is written once; each wire format (`proxy.formats.chat`, `proxy.formats.responses`)
supplies a `Rounds` object for one request. The object holds the request's history and every
round's answer, builds each upstream request body, says which injected calls a round asks
for, and rewrites what comes back so the client sees one ordinary answer: injected calls
hidden, usage summed, one identity, one end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from proxy.core.jsonio import JsonObject
from proxy.core.media import ToolResult


@dataclass(frozen=True)
class ToolCall:
    """A call to one of the injected tools, as the loop runs it."""

    name: str
    arguments: Any  # JSON text; an object when the upstream sent one (or a text could not be written)
    call_id: str | None = None


class Rounds(Protocol):
    """One request's reload rounds in one wire format (see the module docstring).

    Both ways: `request(offered)` is the body of the next upstream call (`offered`: with the
    injected tools); after a round that asked for injected calls only, `answer(results)` adds
    the round's items and the calls' results to the history for the next request.

    Non-streamed: `take(answer)` reads a round's answer (a JSON object) and returns the calls
    to run (none: the loop ends); `result()` is then the one answer for the client.

    Streamed: `feed(event)` returns the events to send for one upstream SSE event (a JSON
    object); when a round's stream has ended, `calls()` returns the calls to run (none: the
    loop ends and `finish()` gives the last events); `fail(error)` ends the stream when
    something goes wrong (`error` in the API's error-body shape `{"error": {...}}`).
    `encode(event)` writes one SSE event and `closing` is what ends a stream.
    """

    what: str  # what one answer is called in error messages ("chat completion", "response")
    closing: bytes
    # Where the upstream stores answers: the id the client gets (the first round's) and the id
    # of the answer holding the whole exchange (the last round's); None elsewhere.
    first_id: str | None
    last_id: str | None
    # Injected calls of the last round that came with calls of the client's own tools: the
    # client gets its calls, these are hidden. Where the upstream keeps the exchange, their
    # answers (`carried(results)`) must come first in the client's next input.
    unanswered: list[ToolCall]
    # What the answer's `context_management` says of the clearing edits the proxy applied
    # (`proxy.turn._context_management`; Messages only, None elsewhere and when none were applied).
    context_management: JsonObject | None

    def request(self, offered: bool) -> JsonObject: ...

    def answer(self, results: list[ToolResult]) -> None:
        """A result is a text, or reloaded media (`proxy.core.media.Reloaded`) the format shows
        as itself where it can."""

    def take(self, answer: JsonObject) -> list[ToolCall]: ...

    def result(self) -> JsonObject: ...

    def feed(self, event: JsonObject) -> list[JsonObject]: ...

    def calls(self) -> list[ToolCall]: ...

    def finish(self) -> list[JsonObject]: ...

    def fail(self, error: JsonObject) -> list[JsonObject]: ...

    def encode(self, event: Any) -> bytes: ...

    def carried(self, results: list[ToolResult]) -> list[Any]:
        """Items answering `unanswered` with `results`, for the client's next request."""
