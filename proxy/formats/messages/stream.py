"""Streamed reload rounds of the Messages API: the SSE events of successive upstream rounds as
the events of one message for the client.

An Anthropic stream is `message_start`, then per content block `content_block_start`,
`content_block_delta`… and `content_block_stop` (each with the block's `index`), then
`message_delta` (`stop_reason`, `usage`) and `message_stop`; `ping` may come anywhere, and an
`error` event ends a stream that fails midway. What the client sees (`StreamRewriter`):

- one `message_start`, the first round's (its id, model and first usage);
- the blocks of every round, the calls to the injected tools left out (all their events), and
  the `index` of the visible blocks renumbered contiguously from 0 across the rounds (the
  anthropic SDK keeps blocks in a list it indexes with it);
- `ping` as it comes; an upstream `error` event relayed, which ends the stream;
- one `message_delta` at the very end: the last round's (`stop_reason`, `stop_sequence`, …),
  its `usage` the sum over the rounds (`input_tokens`, `output_tokens`, `cache_*`, …; the
  SDK overwrites its usage with the counts a `message_delta` carries), then one `message_stop`.

Each round's own message is rebuilt from its events (text, thinking with its signature,
tool_use with its input parsed from the `input_json_delta` fragments, server tool blocks as
announced) for the next round's request.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.core.answers import GrowingText, add_usage
from proxy.core.jsonio import JsonObject, object_or
from proxy.errors import ANTHROPIC_ERROR_TYPES
from proxy.formats.messages.items import block_type, is_injected, is_tool_use
from proxy.formats.messages.rounds import assistant_turn, client_stop_reason

_INPUT_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})  # their input comes as JSON fragments
ERROR_TYPES = ANTHROPIC_ERROR_TYPES  # the error types a client may be sent


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_GROWING = {"text_delta": "text", "thinking_delta": "thinking"}  # delta type → the block's field it extends


@dataclass
class _Block:
    """One content block of the current round, by its upstream `index`. What its deltas add is
    collected apart (`grown`, `citations`, `fragments`) and put into the block by `finished`."""

    block: JsonObject
    hidden: bool  # a call to an injected tool
    client_index: int | None = None
    grown: dict[str, GrowingText] = field(default_factory=dict)  # "text" / "thinking" → the field so far
    citations: list[Any] | None = None  # the block's citations so far, once a citations_delta came
    fragments: GrowingText = field(default_factory=GrowingText)  # input_json_delta partial_json, in order

    def _rebuilt(self) -> JsonObject:
        if not self.grown and self.citations is None:
            return self.block
        block = {**self.block, **{name: text.text() for name, text in self.grown.items()}}
        if self.citations is not None:
            block["citations"] = list(self.citations)
        return block

    def finished(self) -> JsonObject:
        """The block as sent back in a request: its text and thinking whole, a tool's input
        parsed from its fragments (`{}` for none; the raw text under `_raw` if it is not a JSON
        object)."""
        block = self._rebuilt()
        if block_type(block) not in _INPUT_BLOCKS or not self.fragments:
            if block_type(block) in _INPUT_BLOCKS and block.get("input") is None:
                return {**block, "input": {}}
            return block
        text = self.fragments.text()
        try:
            value = json.loads(text) if text.strip() else {}
        except (ValueError, RecursionError):  # RecursionError: nested past what the parser reads
            value = None
        return {**block, "input": value if isinstance(value, dict) else {"_raw": text}}


def _apply(delta: JsonObject, state: _Block) -> None:
    """Grow the block by one delta (the anthropic SDK's rules), in time linear in what it adds."""
    kind = delta.get("type")
    name = _GROWING.get(kind) if isinstance(kind, str) else None
    if name is not None and isinstance(delta.get(name), str):
        text = state.grown.get(name)
        if text is None:
            start = state.block.get(name)
            text = state.grown[name] = GrowingText(start if isinstance(start, str) else "")
        text.add(delta[name])
    elif kind == "signature_delta" and isinstance(delta.get("signature"), str):
        state.block["signature"] = delta["signature"]
    elif kind == "citations_delta" and "citation" in delta:
        if state.citations is None:
            known = state.block.get("citations")
            state.citations = list(known) if isinstance(known, list) else []
        state.citations.append(delta["citation"])
    elif kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
        state.fragments.add(delta["partial_json"])
    elif kind == "compaction_delta":  # a provider's compaction block comes whole in one delta
        state.block.update({k: delta.get(k) for k in ("content", "encrypted_content") if k in delta})


def _counts(usage: JsonObject) -> JsonObject:
    """The counts of a usage object (numbers and nested counts), for a `message_delta`."""
    return {k: v for k, v in usage.items() if _int(v) is not None or isinstance(v, (float, dict))}


def block_events(index: int, block: JsonObject) -> list[JsonObject]:
    """A whole block as Anthropic streams it: `content_block_start`, one delta, `content_block_stop`.
    A `compaction` block starts empty and comes in one `compaction_delta`; others start whole."""
    if block_type(block) == "compaction":
        start = {"type": "compaction", "content": None, "encrypted_content": None}
        deltas = [
            {
                "type": "compaction_delta",
                "content": block.get("content"),
                "encrypted_content": block.get("encrypted_content"),
            }
        ]
    else:
        start, deltas = block, []
    return (
        [{"type": "content_block_start", "index": index, "content_block": start}]
        + [{"type": "content_block_delta", "index": index, "delta": delta} for delta in deltas]
        + [{"type": "content_block_stop", "index": index}]
    )


class StreamRewriter:
    """Rewrites the events of successive upstream rounds into one message stream (see the
    module docstring). Feed each round's events to `feed` and send what it returns; once the
    round's stream has ended, `injected_only` says whether the loop may go on (then
    `round_message` and `calls_to_run` make the next request, and `next_round()` starts it);
    `finish()` gives the last events, `fail(...)` an error event instead."""

    def __init__(
        self, injected_names: Iterable[str], *, extra_usage: JsonObject | None = None, lead: Sequence[JsonObject] = ()
    ) -> None:
        """`lead`: the proxy's own blocks (an emulated compaction block), at the first indexes,
        streamed whole right after `message_start`."""
        self.names = frozenset(injected_names)
        self.message_id: str | None = None  # the first round's: what the client sees
        self.round = 0
        self._started = False
        self._lead = list(lead)
        self._next_index = len(self._lead)
        self._usage: JsonObject | None = add_usage(None, extra_usage)  # the finished rounds' sum
        self._finished = False
        self._new_round()

    def _new_round(self) -> None:
        self._blocks: dict[int, _Block] = {}
        self._round_usage: JsonObject | None = None
        self._delta: JsonObject | None = None
        self._stop: JsonObject | None = None
        self._errored = False

    # -- what the loop asks after a round ------------------------------------------------------

    @property
    def ended(self) -> bool:
        """The round's message is complete (`message_stop`, or a `message_delta` with a stop reason)."""
        return self._stop is not None or (self._delta is not None and self._stop_reason() is not None)

    @property
    def errored(self) -> bool:
        return self._errored

    def _stop_reason(self) -> Any:
        delta = self._delta.get("delta") if self._delta is not None else None
        return delta.get("stop_reason") if isinstance(delta, dict) else None

    def _ordered(self) -> list[_Block]:
        return [self._blocks[i] for i in sorted(self._blocks)]

    @property
    def injected_only(self) -> bool:
        """The round ended to use tools, at least one injected and none of the client's."""
        blocks = self._ordered()
        return (
            self.ended
            and not self._errored
            and self._stop_reason() == "tool_use"
            and any(b.hidden for b in blocks)
            and not any(is_tool_use(b.block) and not b.hidden for b in blocks)
        )

    @property
    def calls_to_run(self) -> list[JsonObject]:
        """The round's injected tool_use blocks (input parsed), in order."""
        return [b.finished() for b in self._ordered() if b.hidden]

    def round_message(self) -> JsonObject:
        """The round's assistant message, every block rebuilt (see `rounds.assistant_turn`)."""
        return assistant_turn([b.finished() for b in self._ordered()])

    def next_round(self) -> None:
        """Start the next round: the ended round's usage is counted, its held events dropped."""
        self._usage = add_usage(self._usage, self._round_usage)
        self.round += 1
        self._new_round()

    # -- the end ---------------------------------------------------------------------------------

    def finish(self, *, context_management: JsonObject | None = None) -> list[JsonObject]:
        """The last events for the client: one `message_delta` (the last round's, summed usage,
        `context_management` when given, as Anthropic sends it there) and `message_stop`. An
        error event instead when the round never completed; nothing after an error event."""
        if self._finished or self._errored:
            return []
        if not (self._started and self.ended):
            return self.fail("The upstream's stream ended before the message completed.")
        self._finished = True
        template = self._delta or {"type": "message_delta", "delta": {"stop_reason": None, "stop_sequence": None}}
        delta = dict(object_or(template.get("delta"), {}))
        visible = [b.block for b in self._ordered() if not b.hidden]
        if "stop_reason" in delta:
            delta["stop_reason"] = client_stop_reason(delta["stop_reason"], visible)
        usage = add_usage(self._usage, self._round_usage) or {}
        last = {**template, "delta": delta, "usage": _counts(usage)}
        if context_management is not None:
            last["context_management"] = context_management
        return [last, self._stop or {"type": "message_stop"}]

    def fail(self, message: str, *, kind: str = "api_error") -> list[JsonObject]:
        """An `error` event ending the stream (once)."""
        if self._finished:
            return []
        self._finished = True
        return [{"type": "error", "error": {"type": kind if kind in ERROR_TYPES else "api_error", "message": message}}]

    # -- events ----------------------------------------------------------------------------------

    def feed(self, event: JsonObject) -> list[JsonObject]:
        """The events to send the client now for one upstream event (none or one)."""
        if not isinstance(event, dict) or self._finished:
            return []
        kind = event.get("type")
        if kind == "message_start":
            return self._start(event)
        if kind == "message_delta":
            self._delta = event
            if isinstance(event.get("usage"), dict):
                base = self._round_usage or {}
                self._round_usage = {**base, **{k: v for k, v in event["usage"].items() if v is not None}}
            return []
        if kind == "message_stop":
            self._stop = event
            return []
        if kind == "error":
            self._errored = self._finished = True
            return [event]
        index = _int(event.get("index"))
        if index is None:
            return [event]  # ping, and events of no block
        state = self._blocks.get(index)
        if kind == "content_block_start":  # the index it had (an event before its start) stays its index
            block = object_or(event.get("content_block"), {})
            shown = state.client_index if state is not None and not state.hidden else None
            state = self._blocks[index] = _Block(
                copy.deepcopy(block), hidden=is_injected(block, self.names), client_index=shown
            )
        elif state is None:  # an event of a block never announced: shown, not rebuilt
            state = self._blocks[index] = _Block({}, hidden=False)
        if kind == "content_block_delta" and isinstance(event.get("delta"), dict):
            _apply(event["delta"], state)
        if state.hidden:
            return []
        if state.client_index is None:
            state.client_index, self._next_index = self._next_index, self._next_index + 1
        return [{**event, "index": state.client_index}]

    def _start(self, event: JsonObject) -> list[JsonObject]:
        message = object_or(event.get("message"), {})
        if isinstance(message.get("usage"), dict):
            self._round_usage = dict(message["usage"])
        if self._started:
            return []
        self._started = True
        if isinstance(message.get("id"), str):
            self.message_id = message["id"]
        return [event, *(e for index, block in enumerate(self._lead) for e in block_events(index, block))]
