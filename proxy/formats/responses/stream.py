"""Streamed reload rounds of the Responses API: one response for the client."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.core.answers import add_usage
from proxy.core.jsonio import JsonObject, object_or
from proxy.formats.responses.items import _type, is_injected, needs_client
from proxy.formats.responses.request import _hide_tools
from proxy.formats.responses.rounds import _hidden_flags, _output, _with_output

TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})
_START_EVENTS = frozenset({"response.created", "response.in_progress", "response.queued"})

# ---------------------------------------------------------------------------------------------
# Streamed rounds


@dataclass
class _Item:
    """One output item of the current round, keyed by its upstream `output_index`."""

    index: int
    state: str  # "visible" | "hidden" | "pending" (a reasoning item waiting for what follows it)
    #             | "unknown" (events came before the item was announced: held)
    injected: bool = False
    client: bool = False  # waits for the client
    client_index: int | None = None
    item_id: str | None = None
    buffer: list[JsonObject] = field(default_factory=list)  # a pending item's events, held back
    done: JsonObject | None = None  # the item of its `response.output_item.done`
    followed_by_injected: bool = False  # pending reasoning: injected calls came after it


class StreamRewriter:
    """Rewrites the SSE events of successive upstream rounds into one response stream.

    Feed every parsed event (`data` as a dict) of a round to `feed`, send what it returns, and
    when the round's stream has ended ask `injected_only`. If the loop goes on: append
    `round_items` and `injected_results(calls_to_run, results)` to the input, call
    `next_round()`, send the next request and feed its events. When the loop stops, send
    `finish()` (the one terminal event). If a later round cannot be sent or breaks off, send
    `fail(message)` instead. Sketch::

        rewriter = StreamRewriter(INJECTED_TOOLS)
        while True:
            async for event in events(response):
                for out in rewriter.feed(event):
                    yield out
            if not (offered and rewriter.injected_only):
                break
            items += rewriter.round_items
            items += injected_results(rewriter.calls_to_run, await run(rewriter.calls_to_run))
            rewriter.next_round()
            response = await send(items)      # on failure: yield from rewriter.fail(...); return
        for out in rewriter.finish():
            yield out

    What the client sees:

    - `response.created`, `response.in_progress` (and `response.queued`) of the first round
      only; later rounds' are swallowed.
    - Identity: the first round's response `id` and `created_at` everywhere (created,
      in_progress, the final terminal event). It is the id announced first, before anyone
      knows whether more rounds follow; later rounds' ids never reach the client (the openai
      SDK's stream accumulator refuses an id that changes midstream). The last
      round's id is `last_response_id`: with `store: true` only that stored response holds the
      whole exchange, so a caller that supports `previous_response_id` should map the client's
      id to it.
    - Every event of an injected function_call item is dropped (`output_item.added/.done`,
      `function_call_arguments.delta/.done`, anything with its `output_index` or `item_id`).
    - Reasoning items: a reasoning item that led only to injected calls is dropped, which is
      known only once what follows it is known. So a reasoning item's events are held back
      (buffered) from its first event on. The next item decides: a non-injected item (a
      message, a client call, a hosted call) releases the buffer before its own events; an
      injected call keeps it waiting; another reasoning item or the end of the round drops the
      buffer if injected calls came in between and releases it otherwise. The delay is that of
      one item; a reasoning summary reaches the client when the next item starts.
    - `output_index` renumbered: each visible item gets the next index at its first relayed
      event, so indexes stay contiguous across rounds; `sequence_number` renumbered strictly
      increasing over the whole stream (from the first event's own number).
    - Terminal events (`response.completed` / `.incomplete` / `.failed`) are held back; only
      `finish()` sends one, the last round's, with `output` = the visible items of all rounds
      and `usage` summed over the rounds (plus `extra_usage`, Responses-shaped).
    - `error` events are relayed at once (renumbered).

    A stream that announces nothing but `output_item.done` events still works (items are
    classified at their first event). One that sends only a terminal event with its `output`:
    the items are taken from there, visible ones appear only in the final event.
    The events given to `feed` are not changed; relayed events are shallow copies.
    """

    def __init__(
        self, injected_names: Iterable[str], *, extra_usage: JsonObject | None = None, lead: Sequence[JsonObject] = ()
    ) -> None:
        """`lead`: the proxy's own output items (an emulated compaction item), first in the
        output: announced (`output_item.added` and `.done`) once the response has started."""
        self.names = frozenset(injected_names)
        self.response_id: str | None = None  # the first round's: what the client sees
        self.last_response_id: str | None = None
        self.round = 0
        self._sequence: int | None = None
        self._first: JsonObject | None = None  # the first round's response object (created / in_progress)
        self._visible: dict[int, JsonObject] = dict(enumerate(lead))  # client output_index → finished item
        self._next_index = len(lead)
        self._lead = list(lead)  # still to announce
        self._usage: JsonObject | None = add_usage(None, extra_usage)
        self._usage_reported = False
        self._finished = False
        self._new_round()

    def _new_round(self) -> None:
        self._items: dict[int, _Item] = {}
        self._hidden_ids: set[str] = set()
        self._pending: _Item | None = None
        self._terminal: JsonObject | None = None
        self._errored = False

    # -- what the loop asks after a round ------------------------------------------------------

    @property
    def ended(self) -> bool:
        """The current round sent its terminal event."""
        return self._terminal is not None

    @property
    def errored(self) -> bool:
        """The current round relayed an `error` event."""
        return self._errored

    @property
    def injected_only(self) -> bool:
        """The round completed (`response.completed`), asked for at least one injected call and
        for nothing that waits for the client: the loop may run the calls and go on."""
        return (
            self._terminal is not None
            and self._terminal.get("type") == "response.completed"
            and not self._errored
            and any(s.injected for s in self._items.values())
            and not any(s.client for s in self._items.values())
        )

    @property
    def calls_to_run(self) -> list[JsonObject]:
        """The round's injected function_call items (`call_id`, `name`, `arguments`), in order."""
        return [s.done for s in self._ordered() if s.injected and s.done is not None]

    @property
    def round_items(self) -> list[JsonObject]:
        """The round's finished items to append to `input` (see the module's `round_items`):
        reasoning, messages, hosted calls and the injected calls, in upstream order."""
        return [s.done for s in self._ordered() if s.done is not None and not s.client]

    def next_round(self) -> None:
        """Start feeding the next round's events (the held terminal event is dropped; its usage counted)."""
        self.round += 1
        self._new_round()

    def finish(self) -> list[JsonObject]:
        """The last round's terminal event for the client: first id, visible output of every
        round, summed usage. [] if the round sent none (it broke off, or ended on an `error`)."""
        if self._terminal is None or self._finished:
            return []
        self._finished = True
        return [self._emit({**self._terminal, "response": self._final(self._terminal.get("response"))})]

    def fail(self, message: str, *, code: str = "server_error") -> list[JsonObject]:
        """A `response.failed` event ending the stream when a round cannot go on (the next
        request failed, the upstream broke off): the visible output so far, summed usage.
        `code` should be one the API uses in `response.error` ("server_error",
        "rate_limit_exceeded", …): the openai SDK parses it as a fixed set of values."""
        if self._finished:
            return []
        self._finished = True
        base = (self._terminal or {}).get("response") or self._first or {"object": "response"}
        response = {**self._final(base), "status": "failed", "error": {"code": code, "message": message}}
        return [self._emit({"type": "response.failed", "sequence_number": 0, "response": response})]

    # -- events ----------------------------------------------------------------------------------

    def feed(self, event: JsonObject) -> list[JsonObject]:
        """The events to send the client now for one upstream event (often none or one; the
        release of a held reasoning item gives several)."""
        if not isinstance(event, dict):
            return []
        if self._sequence is None:
            number = event.get("sequence_number")
            self._sequence = number if isinstance(number, int) and not isinstance(number, bool) else 0
        kind = event.get("type")
        if kind in _START_EVENTS:
            return self._start(event)
        if self._lead:
            return self._announce_lead() + self.feed(event)
        if kind in TERMINAL_EVENTS:
            return self._end(event)
        if kind == "error":
            self._errored = True
            return [self._emit(event)]
        index = event.get("output_index")
        if not isinstance(index, int) or isinstance(index, bool):
            if event.get("item_id") in self._hidden_ids:
                return []
            return [self._emit(event)]  # not about one output item (audio, …): relayed
        out: list[JsonObject] = []
        state = self._items.get(index)
        item = object_or(event.get("item"), None)
        if state is None and item is None:
            if event.get("item_id") in self._hidden_ids:
                return []
            # an event before the item was announced: held until an event (or the end) says what it is
            self._items[index] = _Item(index, "unknown", buffer=[event])
            return []
        if state is not None and state.state == "unknown":
            if item is None:
                state.buffer.append(event)
                return []
            state = self._resolve(state, item, out)
        elif state is None:
            state = self._classify(index, item, out)
        if kind == "response.output_item.done" and isinstance(event.get("item"), dict):
            state.done = event["item"]
            if state.state == "visible" and state.client_index is not None:
                self._visible[state.client_index] = state.done
        self._route(state, event, out)
        return out

    def _route(self, state: _Item, event: JsonObject, out: list[JsonObject]) -> None:
        """One event of a classified item: sent (visible), held (pending) or dropped (hidden)."""
        if state.state == "visible":
            out.append(self._emit(event, state.client_index))
        elif state.state == "pending":
            state.buffer.append(event)

    def _start(self, event: JsonObject) -> list[JsonObject]:
        response = object_or(event.get("response"), None)
        if response is not None:
            self._note(response)
        if self.round > 0:
            return []
        if response is not None:
            self._first = response
            event = {**event, "response": _hide_tools(response, self.names)}
        return [self._emit(event)]

    def _announce_lead(self) -> list[JsonObject]:
        """The lead items' events, before the first event of the upstream's own output."""
        lead, self._lead = self._lead, []
        return [
            self._emit({"type": kind, "output_index": index, "item": item, "sequence_number": 0})
            for index, item in enumerate(lead)
            for kind in ("response.output_item.added", "response.output_item.done")
        ]

    def _resolve(self, state: _Item, item: JsonObject, out: list[JsonObject]) -> _Item:
        """An item whose first events came before it was announced, now known: classified, and
        its held events sent (visible), kept (pending) or dropped (hidden)."""
        del self._items[state.index]
        held = state.buffer
        state = self._classify(state.index, item, out)
        for event in held:
            self._route(state, event, out)
        return state

    def _end(self, event: JsonObject) -> list[JsonObject]:
        out: list[JsonObject] = []
        response = object_or(event.get("response"), {})
        output = _output(response)
        for state in [s for s in self._ordered() if s.state == "unknown"]:
            item = output[state.index] if state.index < len(output) and isinstance(output[state.index], dict) else {}
            self._resolve(state, item, out)
        self._settle(out)
        self._note(response)
        if isinstance(response.get("usage"), dict):
            self._usage = add_usage(self._usage, response["usage"])
            self._usage_reported = True
        self._take_output(_output(response))
        self._terminal = event
        return out

    def _take_output(self, output: list[Any]) -> None:
        """Complete the round's items from a terminal event's `output`: items no event announced
        (a stream of only `response.completed`), or announced without `output_item.done`."""
        hidden_flags = _hidden_flags(output, self.names)
        for index, (item, hidden) in enumerate(zip(output, hidden_flags)):
            if not isinstance(item, dict):
                continue
            state = self._items.get(index)
            if state is None:
                state = self._items[index] = _Item(
                    index,
                    "hidden" if hidden else "visible",
                    injected=is_injected(item, self.names),
                    client=needs_client(item, self.names),
                    client_index=None if hidden else self._assign(),
                )
            if state.done is None:
                state.done = item
                if (
                    state.state == "visible"
                    and state.client_index is not None
                    and state.client_index not in self._visible
                ):
                    self._visible[state.client_index] = item

    def _classify(self, index: int, item: JsonObject | None, out: list[JsonObject]) -> _Item:
        """The state of a newly seen item; settles a held reasoning item into `out` as needed."""
        item_id = item.get("id") if item is not None and isinstance(item.get("id"), str) else None
        if item is not None and is_injected(item, self.names):
            state = _Item(index, "hidden", injected=True, item_id=item_id)
            if item_id:
                self._hidden_ids.add(item_id)
            if self._pending is not None:
                self._pending.followed_by_injected = True
        elif item is not None and _type(item) == "reasoning":
            self._settle(out)
            state = self._pending = _Item(index, "pending", item_id=item_id)
        else:
            if self._pending is not None:
                self._release(self._pending, out)
            state = _Item(
                index, "visible", client=needs_client(item, self.names), item_id=item_id, client_index=self._assign()
            )
        self._items[index] = state
        return state

    def _settle(self, out: list[JsonObject]) -> None:
        """Decide the held reasoning item: dropped if only injected calls followed it, else released."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        if pending.followed_by_injected:
            pending.state, pending.buffer = "hidden", []
            if pending.item_id:
                self._hidden_ids.add(pending.item_id)
        else:
            self._release(pending, out)

    def _release(self, state: _Item, out: list[JsonObject]) -> None:
        """Send a held item's events (it becomes visible with the next client index)."""
        if self._pending is state:
            self._pending = None
        state.state, state.client_index = "visible", self._assign()
        if state.done is not None:
            self._visible[state.client_index] = state.done
        out.extend(self._emit(event, state.client_index) for event in state.buffer)
        state.buffer = []

    # -- helpers -----------------------------------------------------------------------------

    def _assign(self) -> int:
        index, self._next_index = self._next_index, self._next_index + 1
        return index

    def _ordered(self) -> list[_Item]:
        return [self._items[i] for i in sorted(self._items)]

    def _note(self, response: JsonObject) -> None:
        response_id = response.get("id")
        if isinstance(response_id, str):
            if self.response_id is None:
                self.response_id = response_id
            self.last_response_id = response_id

    def _emit(self, event: JsonObject, output_index: int | None = None) -> JsonObject:
        if self._sequence is None:
            self._sequence = 0
        out = {**event, "sequence_number": self._sequence}
        self._sequence += 1
        if output_index is not None:
            out["output_index"] = output_index
        return out

    def _final(self, response: Any) -> JsonObject:
        """A terminal response object for the client."""
        base = response if isinstance(response, dict) else {}
        final = _with_output(_hide_tools(base, self.names), [self._visible[i] for i in sorted(self._visible)])
        if self.response_id is not None:
            final["id"] = self.response_id
        if self._first is not None and "created_at" in self._first:
            final["created_at"] = self._first["created_at"]
        if self._usage_reported:
            final["usage"] = self._usage
        return final
