"""The wire-format interface: what the HTTP layer asks of a managed API (chat, responses, …).

One `WireFormat` per managed endpoint: it parses a request body, reads the history the core
reduces and writes the reduced history back (byte-stable: every other key kept, in order),
names the tools a client declares that collide with the injected ones, and makes the
`Rounds` (`proxy.core.rounds`) of one request for the reload loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from proxy.core.rounds import Rounds
from proxy.core.view import ItemView


class WireFormat(Protocol):
    endpoint: str  # the upstream path under /v1, e.g. "chat/completions"
    view: ItemView
    stored: bool  # may a request continue state stored upstream (previous_response_id, conversation)?

    def parse(self, raw: bytes, *, max_items: int | None) -> dict:
        """The body as a JSON object; raises the HTTP layer's 400 error for a malformed one."""

    def history(self, body: dict) -> list[Any]: ...

    def with_history(self, body: dict, items: list[Any]) -> dict: ...

    def colliding_tool_names(self, body: dict) -> set[str]: ...

    def rounds(self, body: dict, items: list[Any], tools: Sequence[dict], *,
               extra_usage: dict | None) -> Rounds:
        """`tools`: the injected tools' chat-style schemas; `extra_usage`: chat-shaped."""
