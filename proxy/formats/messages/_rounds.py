"""The reload rounds of a Messages request: the non-streamed round helpers (`injected_only`,
`calls_to_run`, `tool_calls`, `assistant_turn`, `tool_results`, `combine_rounds`,
`usage_from_chat`), the streamed rounds (`StreamRewriter`), the rounds of one request
(`MessagesRounds`, a `proxy.core.rounds.Rounds`), and the Messages API's usage as a bill (`USAGE`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.core import texts
from proxy.core.answers import UNREPORTED, Bill, GrowingText, add_usage, count, optional, reported
from proxy.core.jsonio import JsonObject, nested_deeper_than, object_or, string_or
from proxy.core.media import ToolResult, as_text
from proxy.core.rounds import ToolCall
from proxy.errors import ANTHROPIC_ERROR_TYPES, anthropic_error_event
from proxy.formats.json_body import MAX_DEPTH
from proxy.formats.messages._items import block_type, input_text, is_injected, is_tool_use, reloaded_block
from proxy.formats.messages._request import inject_tools, with_history
from proxy.upstream import sse

# --- usage ---
# The Messages API's usage as a bill (`proxy.core.answers`).
#
# Anthropic splits the input itself: `input_tokens` are those after the last cache breakpoint
# (uncached), `cache_read_input_tokens` those read from the cache, `cache_creation_input_tokens`
# those written to it, split by lifetime in `cache_creation` (`ephemeral_5m_input_tokens`,
# `ephemeral_1h_input_tokens`; without the split a write is a 5-minute one, the default TTL).
# A stream's `message_start` carries the usage so far and each `message_delta` the counts that
# changed, cumulative: later counts replace earlier ones, key by key.


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


# --- rounds ---
# Non-streamed reload rounds of the Messages API: what a round asks for, what the next round
# sends, and the one message the client gets.


def content_of(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def injected_only(answer: Any, names: Collection[str]) -> bool:
    """Does the loop run another round: the model stopped to use tools (`stop_reason`
    "tool_use"), at least one of them injected and none of the client's? Text, thinking and
    server tools (web search, code execution, …) may come with the injected calls."""
    if not isinstance(answer, dict) or answer.get("stop_reason") != "tool_use":
        return False
    content = content_of(answer)
    return any(is_injected(b, names) for b in content) and not any(
        is_tool_use(b) and not is_injected(b, names) for b in content
    )


def calls_to_run(answer: Any, names: Collection[str]) -> list[JsonObject]:
    """The injected tool_use blocks of the answer, in order."""
    return [block for block in content_of(answer) if is_injected(block, names)]


def _arguments(value: Any) -> Any:
    """A tool_use input as the loop runs it: JSON text (`{}` when absent); the model's own text
    when it was no JSON object (`{"_raw": text}`); the object itself when it nests too deep to
    write (the tools refuse it as such)."""
    if value is None:
        return "{}"
    if type(value) is dict and len(value) == 1 and type(value.get("_raw")) is str:
        return value["_raw"]
    if nested_deeper_than(value, MAX_DEPTH):
        return value
    return input_text(value)


def tool_calls(blocks: Sequence[JsonObject]) -> list[ToolCall]:
    """The injected tool_use blocks as the loop runs them (see `_arguments`)."""
    return [
        ToolCall(str(b.get("name") or ""), _arguments(b.get("input")), string_or(b.get("id"), None)) for b in blocks
    ]


def _sendable(block: Any) -> Any:
    """A block with an input nesting past MAX_DEPTH gets a note instead: it could not be written."""
    if isinstance(block, dict) and nested_deeper_than(block.get("input"), MAX_DEPTH):
        return {**block, "input": {"_raw": texts.input_not_repeated()}}
    return block


def assistant_turn(content: list[Any]) -> JsonObject:
    """The round's assistant message for the next round: every block as the upstream sent it
    (thinking and redacted_thinking included, which the API requires back with the tool
    results), less empty text blocks (which the API refuses in a request), a tool input too
    deep to send back replaced by a note."""
    return {
        "role": "assistant",
        "content": [
            _sendable(block) for block in content if not (block_type(block) == "text" and block.get("text") == "")
        ],
    }


def tool_results(calls: Sequence[JsonObject], results: Sequence[ToolResult]) -> JsonObject:
    """The user message answering `calls` (tool_use blocks) with `results`, one tool_result each,
    in order; reloaded media as an image or document block."""
    if len(calls) != len(results):
        raise ValueError(f"{len(calls)} calls but {len(results)} results")
    return {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": call.get("id"), "content": _result_content(result)}
            for call, result in zip(calls, results)
        ],
    }


def _result_content(result: ToolResult) -> Any:
    if isinstance(result, str):
        return result
    if result.kind in ("image", "document"):
        return [reloaded_block(result.kind, result.data_url)]
    return texts.media_not_here(result.kind, result.ref)


def visible(content: list[Any], names: Collection[str]) -> list[Any]:
    """The blocks the client sees: all but the calls to the injected tools."""
    return [block for block in content if not is_injected(block, names)]


def client_stop_reason(stop_reason: Any, content: list[Any]) -> Any:
    """`tool_use` with no tool_use left for the client (only injected ones were hidden) is `end_turn`."""
    if stop_reason == "tool_use" and not any(is_tool_use(b) for b in content):
        return "end_turn"
    return stop_reason


def usage_from_chat(usage: JsonObject | None) -> JsonObject | None:
    """A chat-shaped usage (the proxy's own summary calls) in the Messages shape."""
    if not usage:
        return None
    return {"input_tokens": usage.get("prompt_tokens") or 0, "output_tokens": usage.get("completion_tokens") or 0}


def sum_usage(usages: Sequence[Any], extra_usage: JsonObject | None) -> JsonObject | None:
    """Every numeric field summed over the rounds (`cache_*` and nested counts included), plus
    `extra_usage` (Messages-shaped); None when no round reported usage."""
    reported = [u for u in usages if isinstance(u, dict)]
    if not reported:
        return None
    total = add_usage(None, extra_usage)
    for usage in reported:
        total = add_usage(total, usage)
    return total


def combine_rounds(
    answers: Sequence[JsonObject],
    names: Collection[str],
    *,
    extra_usage: JsonObject | None = None,
    lead: Sequence[JsonObject] = (),
) -> JsonObject:
    """The one message the client gets from the rounds of a non-streamed reload loop.

    The last round's message (its `stop_reason`, `stop_sequence`, `model`, …) with the first
    round's `id` (the id a stream announces in `message_start`, before anyone knows whether
    more rounds follow), the visible blocks of every round in order (what the stream shows
    too: each round's text and thinking, never an injected tool_use), and `usage` summed over
    the rounds plus `extra_usage` (Messages-shaped). A `tool_use` stop with no tool_use left
    becomes `end_turn`. `lead`: the proxy's own blocks, first (an emulated compaction block).
    """
    if not answers:
        raise ValueError("no rounds")
    first, last = answers[0], answers[-1]
    final = dict(last)
    if isinstance(last.get("content"), list) or len(answers) > 1 or lead:
        final["content"] = [*lead, *(block for answer in answers for block in visible(content_of(answer), names))]
    if "id" in first:
        final["id"] = first["id"]
    if "stop_reason" in final:
        final["stop_reason"] = client_stop_reason(final["stop_reason"], content_of(final))
    total = sum_usage([a.get("usage") for a in answers], extra_usage)
    if total is not None:
        final["usage"] = total
    return final


# --- stream ---
# Streamed reload rounds of the Messages API: the SSE events of successive upstream rounds as
# the events of one message for the client.
#
# An Anthropic stream is `message_start`, then per content block `content_block_start`,
# `content_block_delta`… and `content_block_stop` (each with the block's `index`), then
# `message_delta` (`stop_reason`, `usage`) and `message_stop`; `ping` may come anywhere, and an
# `error` event ends a stream that fails midway. What the client sees (`StreamRewriter`):
#
# - one `message_start`, the first round's (its id, model and first usage);
# - the blocks of every round, the calls to the injected tools left out (all their events), and
#   the `index` of the visible blocks renumbered contiguously from 0 across the rounds (the
#   anthropic SDK keeps blocks in a list it indexes with it);
# - `ping` as it comes; an upstream `error` event relayed, which ends the stream;
# - one `message_delta` at the very end: the last round's (`stop_reason`, `stop_sequence`, …),
#   its `usage` the sum over the rounds (`input_tokens`, `output_tokens`, `cache_*`, …; the
#   SDK overwrites its usage with the counts a `message_delta` carries), then one `message_stop`.
#
# Each round's own message is rebuilt from its events (text, thinking with its signature,
# tool_use with its input parsed from the `input_json_delta` fragments, server tool blocks as
# announced) for the next round's request.

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


# --- reload_rounds ---
# Reload rounds of a Messages request (`proxy.core.rounds.Rounds` for `POST /v1/messages`).
#
# The API keeps no state: every round sends the whole reduced history again, with each earlier
# round's assistant message (all its blocks, thinking included) and one user message of
# `tool_result` blocks answering its injected calls appended.
#
# The client gets one message: the first round's `id` (a stream announces it before anyone
# knows whether more rounds follow), the visible blocks of every round, the last round's
# `stop_reason`, and `usage` summed over the rounds plus the proxy's own summary calls
# (`extra_usage`, chat-shaped, added to `input_tokens` / `output_tokens`). `first_id` and
# `last_id` stay None: nothing is stored upstream, nothing to continue.
#
# Once a round has called the injected tools, every later request lists them, offered or not:
# the API refuses a history holding `tool_use` blocks when no tools are defined. A last round
# (not offered) that calls them anyway ends the loop like any other; its injected calls are
# hidden and its `tool_use` stop becomes `end_turn`.


class MessagesRounds:
    """The reload rounds of one Messages request (see the module docstring)."""

    what = "message"
    closing = b""
    first_id: str | None = None
    last_id: str | None = None
    # the `context_management` the client's message carries when the proxy applied the edits
    # itself (`proxy.turn._context_management`): on the message, or on a stream's last `message_delta`
    context_management: JsonObject | None = None

    def __init__(
        self,
        body: JsonObject,
        items: list[Any],
        tools: Sequence[JsonObject],
        *,
        names: frozenset[str],
        extra_usage: JsonObject | None = None,
        lead: Sequence[JsonObject] = (),
    ) -> None:
        """`lead`: the proxy's own blocks, first in the client's answer (an emulated compaction)."""
        self.body, self.items, self.tools, self.names = body, list(items), list(tools), names
        self.extra_usage = usage_from_chat(extra_usage)
        self.round = 0
        self.offered = False
        # the round's assistant message, its injected calls
        self._pending: tuple[JsonObject, list[JsonObject]] | None = None
        self._answers: list[JsonObject] = []
        self.lead = list(lead)
        self._rewriter = StreamRewriter(names, extra_usage=self.extra_usage, lead=self.lead)
        self.unanswered: list[ToolCall] = []

    def request(self, offered: bool) -> JsonObject:
        self.offered = offered
        payload = with_history(self.body, self.items)
        return inject_tools(payload, self.tools) if offered or self.round else payload

    def answer(self, results: list[ToolResult]) -> None:
        if self._pending is None:
            raise ValueError("no round asked for calls")
        message, calls = self._pending
        self.items += [message, tool_results(calls, results)]
        self.round += 1
        self._pending = None
        self._rewriter.next_round()

    def _calls(self, message: JsonObject, calls: list[JsonObject]) -> list[ToolCall]:
        self._pending = (message, calls)
        return tool_calls(calls)

    def _stop(self, calls: list[JsonObject]) -> list[ToolCall]:
        """The loop ends: injected calls still in the round (beside the client's) stay unanswered."""
        self.unanswered = tool_calls(calls)
        return []

    # -- non-streamed ------------------------------------------------------------------------

    def take(self, answer: JsonObject) -> list[ToolCall]:
        self._answers.append(answer)
        if self.offered and injected_only(answer, self.names):
            return self._calls(assistant_turn(content_of(answer)), calls_to_run(answer, self.names))
        return self._stop(calls_to_run(answer, self.names))

    def result(self) -> JsonObject:
        final = combine_rounds(self._answers, self.names, extra_usage=self.extra_usage, lead=self.lead)
        if self.context_management is not None:
            final["context_management"] = self.context_management
        return final

    # -- streamed ----------------------------------------------------------------------------

    def feed(self, event: JsonObject) -> list[JsonObject]:
        return self._rewriter.feed(event)

    def calls(self) -> list[ToolCall]:
        rewriter = self._rewriter
        if not (rewriter.ended and not rewriter.errored):
            return self._stop([])
        if self.offered and rewriter.injected_only:
            return self._calls(rewriter.round_message(), rewriter.calls_to_run)
        return self._stop(rewriter.calls_to_run)

    def finish(self) -> list[JsonObject]:
        return self._rewriter.finish(context_management=self.context_management)

    def fail(self, error: JsonObject) -> list[JsonObject]:
        detail = anthropic_error_event(error)["error"]
        return self._rewriter.fail(detail["message"], kind=detail["type"])

    def encode(self, event: Any) -> bytes:
        return sse.encode_typed(event)

    def carried(self, results: list[ToolResult]) -> list[Any]:
        """The user message answering `unanswered` (nothing is stored upstream: unused by the proxy)."""
        if not self.unanswered:
            return []
        return [
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call.call_id, "content": as_text(result)}
                    for call, result in zip(self.unanswered, results)
                ],
            }
        ]
