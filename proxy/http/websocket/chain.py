"""The responses one WebSocket connection holds, so that `previous_response_id` with
`store: false` continues them, as OpenAI's WebSocket mode does with its connection-local state.

A response is held once its `response.completed` (or `response.incomplete`) has been sent: its
whole input as the proxy received it (the held history it continued, then the new input) and
its output items. A `response.create` naming one is expanded into the whole history before the
managed turn runs (`previous_response_id` taken out), so the proxy always manages the whole
history, exactly as if the client had sent it over HTTP. The output items go back as input as
the response gave them (`input += response.output`, OpenAI's way of carrying a `store: false`
conversation; Codex resends them with their ids too).

At most `limit` responses are held, and at most `max_bytes` of memory for them together, each
counted as what its whole input and output hold once parsed (`proxy.core.jsonio`: 446,000
small items are 13 MB of JSON and 110 MB of objects; characters would undercount them 8 x);
the least recently used is forgotten first (a continuation of it is then
`previous_response_not_found`, and the client sends its full input, as it must on OpenAI). A
response larger than `max_bytes` on its own is not held. Continued histories share their items
with the responses they continue, so a chain of held responses costs about one history in
memory (the count is cautious: it counts each one whole).

The worker's connections together hold at most `Budget.capacity` bytes (`--ws-held-bytes`):
a response that does not fit forgets this connection's oldest first, and is not held when it
still does not fit (its continuation is then `previous_response_not_found`). So 1,024
connections of 64 MiB each cannot hold 64 GiB.

A response answering a `compaction_trigger` (Codex's remote compaction: the input ends in
`{"type": "compaction_trigger"}`, the output is one `compaction` item) is held without its
trigger: the trigger asks for a compaction now, it is no part of the history, and it must be the
last input item wherever it appears. Its continuation is then the history, the compaction item,
the new items: the newest compaction item supersedes what precedes it (the client's system and
developer messages kept), as it does in any input (docs/offloading.md), so the upstream sees the
summary the item stands for, then the new items; relayed, the provider reads its own item the
same way.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from proxy.errors import Kind, ProxyError
from proxy.formats.responses import TYPE as TRIGGER


@dataclass(frozen=True)
class Held:
    input: list[Any]  # the whole input this response answered
    output: list[Any]  # its output items, as input items
    store: bool  # the request's `store` (OpenAI's default: true)
    size: int  # bytes its input and output hold (proxy.core.jsonio)
    chars: int = 0  # characters of their JSON, about (what a continuation sends again)


def as_input(items: Any) -> list[Any]:
    """A response's output items as they go back in an input."""
    return list(items) if isinstance(items, list) else []


def input_items(body: dict[str, Any]) -> list[Any]:
    """A request's `input` as a list of items (a string is one user message)."""
    given = body.get("input")
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": given}]
    return list(given) if isinstance(given, list) else []


def history_of(items: list[Any]) -> list[Any]:
    """A held response's input as the history its continuation goes on from: without a trailing
    `compaction_trigger`."""
    if items and isinstance(items[-1], dict) and items[-1].get("type") == TRIGGER:
        return items[:-1]
    return items


class Budget:
    """The bytes one worker's WebSocket connections hold in responses, together."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.used = capacity, 0

    def take(self, size: int) -> bool:
        if self.used + size > self.capacity:
            return False
        self.used += size
        return True

    def give_back(self, size: int) -> None:
        self.used -= size


class ConnectionChain:
    def __init__(self, limit: int, max_bytes: int, budget: Budget | None = None) -> None:
        self.limit, self.max_bytes = limit, max_bytes
        self.budget = budget if budget is not None else Budget(max_bytes)
        self._held: OrderedDict[str, Held] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, response_id: object) -> bool:
        return response_id in self._held

    def get(self, response_id: object) -> Held | None:
        return self._held.get(response_id) if isinstance(response_id, str) else None

    def size_of(self, response_id: object) -> int:
        """The bytes a held response holds (0 for one not held)."""
        held = self.get(response_id)
        return held.size if held is not None else 0

    def expand(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body with a held `previous_response_id` replaced by the whole history it stands for.
        An id this connection does not hold: left to the managed turn when the chain is stored
        upstream (`store` not false: the upstream, or the proxy's stored chain, knows it), else
        ProxyError `previous_response_not_found`."""
        previous = body.get("previous_response_id")
        if previous is None:
            return body
        held = self._held.get(previous) if isinstance(previous, str) else None
        if held is None:
            if body.get("store") is False:
                shown = previous[:200] if isinstance(previous, str) else type(previous).__name__
                raise ProxyError(
                    Kind.BAD_REQUEST,
                    f"Previous response with id '{shown}' not found on this WebSocket connection "
                    "(with store: false only responses created on the same connection can be "
                    "continued, and it holds the last few only): send the full input without "
                    "previous_response_id.",
                    code="previous_response_not_found",
                    param="previous_response_id",
                )
            return body
        self._held.move_to_end(previous)
        rest = {k: v for k, v in body.items() if k != "previous_response_id"}
        rest["input"] = [*held.input, *held.output, *input_items(body)]
        return rest

    def hold(self, response_id: str, body: dict[str, Any], output: Any, *, size: int, chars: int = 0) -> bool:
        """Remember a finished response: `body` as expanded (its whole input), `output` its items,
        `size` the bytes both hold (`proxy.core.jsonio`), `chars` their JSON's length. False when it is not held (larger
        than `max_bytes`, or no room left in the worker's budget)."""
        self._forget(response_id)
        if size > self.max_bytes:
            return False
        while self._held and (len(self._held) >= self.limit or self.bytes + size > self.max_bytes):
            self._forget(next(iter(self._held)))
        while not self.budget.take(size):
            if not self._held:
                return False
            self._forget(next(iter(self._held)))
        self._held[response_id] = Held(
            history_of(input_items(body)), as_input(output), body.get("store") is not False, size, chars
        )
        self.bytes += size
        return True

    def clear(self) -> None:
        """Forget every response (the connection has closed): their bytes back to the budget."""
        while self._held:
            self._forget(next(iter(self._held)))

    def _forget(self, response_id: str) -> None:
        held = self._held.pop(response_id, None)
        if held is not None:
            self.bytes -= held.size
            self.budget.give_back(held.size)
