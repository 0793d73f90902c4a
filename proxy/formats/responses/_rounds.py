"""The reload rounds of a Responses request: the non-streamed round helpers (`injected_only`,
`calls_to_run`, `round_items`, `injected_results`, `hide_injected`, `combine_rounds`,
`add_usage`), the streamed rounds (`StreamRewriter`), the rounds of one request
(`ResponsesRounds`, a `proxy.core.rounds.Rounds`), and the Responses API's usage as a bill (`USAGE`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.core import texts
from proxy.core.answers import UNREPORTED, Bill, add_usage, of_openai_usage
from proxy.core.jsonio import JsonObject, array_or, object_or, string_or
from proxy.core.media import ToolResult, as_text
from proxy.core.rounds import ToolCall
from proxy.formats.responses._items import _type, is_injected, needs_client, reloaded_output
from proxy.formats.responses._request import _hide_tools, inject_tools, with_history
from proxy.upstream import sse

# --- usage ---
# The Responses API's usage as a bill (`proxy.core.answers`).
#
# `usage.input_tokens` is every input token, `input_tokens_details.cached_tokens` the share a
# prompt cache served (OpenAI reports no cache writes: they cost the input price),
# `output_tokens` the output (reasoning included). A stream always reports it, on its terminal
# event's `response` (`response.completed`, `.incomplete`, `.failed`); over the WebSocket mode the
# events are the same.

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


# --- rounds ---
# Non-streamed reload rounds of the Responses API.


def _output(response: Any) -> list[Any]:
    output = response.get("output") if isinstance(response, dict) else None
    return output if isinstance(output, list) else []


def injected_only(response: JsonObject, names: Collection[str]) -> bool:
    """Does the loop run another round: the response completed (or carries no status) and its
    output holds at least one injected call and nothing waiting for the client? Messages,
    reasoning and hosted tool calls (web search, MCP, …) may come with the injected calls."""
    if not isinstance(response, dict) or response.get("status") not in (None, "completed"):
        return False
    output = _output(response)
    return any(is_injected(i, names) for i in output) and not any(needs_client(i, names) for i in output)


def calls_to_run(response: JsonObject, names: Collection[str]) -> list[JsonObject]:
    """The injected function_call items of the response (each has `call_id`, `name`, `arguments`)."""
    return [item for item in _output(response) if is_injected(item, names)]


def round_items(response: JsonObject, names: Collection[str]) -> list[JsonObject]:
    """The output items to append to `input` for the next round, in order: the round's
    reasoning items, its messages and hosted calls, and the injected function_call items; the
    `injected_results` follow them.

    Only a round that `injected_only` accepts continues. A round mixing injected calls with
    the client's calls ends the loop, as in the chat loop: the client's calls can only be
    answered by the client and the API accepts no next round without their outputs. The
    client then gets the response without the injected calls (`hide_injected`); those are
    not run, and the model may ask again on the client's next turn. (Client calls are left
    out here anyway.)

    With `store: false`, a reasoning item can only be sent back with its `encrypted_content`
    (`include: ["reasoning.encrypted_content"]`, which Codex asks for); when
    `reasoning_replayable(body)` is false the caller should drop reasoning items from what it
    appends.
    """
    return [item for item in _output(response) if isinstance(item, dict) and not needs_client(item, names)]


def reasoning_replayable(body: JsonObject) -> bool:
    """Can the request's reasoning items be sent back in a next round? Not when `store` is false
    and `include` lacks "reasoning.encrypted_content": the upstream then has no copy to refer to.
    (The caller may instead add that `include` entry to the forwarded body.)"""
    include = array_or(body.get("include"), [])
    return body.get("store") is not False or "reasoning.encrypted_content" in include


def injected_results(calls: Sequence[JsonObject], results: Sequence[ToolResult]) -> list[JsonObject]:
    """`function_call_output` items answering `calls` (from `calls_to_run`) with `results`, pairwise;
    reloaded media as an `input_image` / `input_file` output."""
    if len(calls) != len(results):
        raise ValueError(f"{len(calls)} calls but {len(results)} results")
    return [
        {"type": "function_call_output", "call_id": call.get("call_id"), "output": _result_output(result)}
        for call, result in zip(calls, results)
    ]


def _result_output(result: ToolResult) -> Any:
    if isinstance(result, str):
        return result
    if result.kind in ("image", "document"):
        return reloaded_output(result.kind, result.data_url, result.ref)
    return texts.media_not_here(result.kind, result.ref)


def _hidden_flags(output: list[Any], names: Collection[str]) -> list[bool]:
    """Which output items the client must not see: the injected calls, and each reasoning item
    followed only by injected calls (up to the next reasoning item or the end, at least one)."""
    hidden = [is_injected(item, names) for item in output]
    for i, item in enumerate(output):
        if _type(item) != "reasoning":
            continue
        end = i + 1
        while end < len(output) and _type(output[end]) != "reasoning":
            end += 1
        hidden[i] = end > i + 1 and all(hidden[i + 1 : end])
    return hidden


def _output_text(output: list[Any]) -> str:
    """What the SDK's `Response.output_text` computes: every message's output_text parts, joined."""
    return "".join(
        part["text"]
        for item in output
        if _type(item) == "message"
        for part in (array_or(item.get("content"), ()))
        if isinstance(part, dict) and part.get("type") == "output_text" and isinstance(part.get("text"), str)
    )


def _with_output(response: JsonObject, output: list[Any]) -> JsonObject:
    """`response` with `output` replaced and its `output_text` field (when present) recomputed."""
    out = {**response, "output": output}
    if "output_text" in out:
        out["output_text"] = _output_text(output)
    return out


def hide_injected(response: JsonObject, names: Collection[str]) -> JsonObject:
    """The response as the client gets it (a new dict): injected function_call items removed,
    and the reasoning items that led only to injected calls; the injected tools removed from
    the echoed `tools`; `output_text`, if present, kept consistent. Other keys keep their order."""
    output = _output(response)
    visible = [item for item, hidden in zip(output, _hidden_flags(output, names)) if not hidden]
    return _with_output(_hide_tools(response, names), visible)


def combine_rounds(
    responses: Sequence[JsonObject],
    names: Collection[str],
    *,
    extra_usage: JsonObject | None = None,
    lead: Sequence[JsonObject] = (),
) -> JsonObject:
    """The one response the client gets from the rounds of a non-streamed reload loop.

    The last round's response (its status, model, …) with the first round's `id` and
    `created_at` (the same identity a stream announces, see `StreamRewriter`), the visible
    output items of every round in order, and `usage` summed over the rounds plus
    `extra_usage` (the proxy's own calls, in Responses shape) when any round reported usage.
    `lead`: the proxy's own output items, first (an emulated compaction item).
    """
    if not responses:
        raise ValueError("no rounds")
    first, last = responses[0], responses[-1]
    output = [*lead, *(item for response in responses for item in hide_injected(response, names)["output"])]
    final = _with_output(_hide_tools(last, names), output)
    for key in ("id", "created_at"):
        if key in first:
            final[key] = first[key]
    usages = [r["usage"] for r in responses if isinstance(r.get("usage"), dict)]
    if usages:
        total = add_usage(None, extra_usage)
        for usage in usages:
            total = add_usage(total, usage)
        final["usage"] = total
    return final


# --- stream ---
# Streamed reload rounds of the Responses API: one response for the client.

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


# --- reload_rounds ---
# Reload rounds of a Responses request (`proxy.core.rounds.Rounds` for `POST /v1/responses`).
#
# How a later round is asked for depends on where the conversation lives:
#
# - `conversation` given: the upstream adds each round's input and output to the conversation,
#   so a later round sends only the results of the injected calls (the conversation then holds
#   the injected calls and their results, paired).
# - `previous_response_id` given (and `store` not false): the rounds are chained, each from the
#   previous round's response id, sending only the results.
# - otherwise (`store: false` with the whole history, the full-offloading case): the whole
#   reduced input again, with the round's items and the results appended.
#
# The client gets the first round's response id (a stream announces it before anyone knows
# whether more rounds follow); `last_id` is the response that holds the whole exchange, which
# the HTTP layer remembers so that a later `previous_response_id` naming the first id continues
# from it.
#
# With `store: false` and no `reasoning.encrypted_content` in `include`, a reasoning item cannot
# be sent back (the upstream kept no copy): the round's reasoning items are dropped from what is
# appended, and the other items lose their `id`, which would name items nobody stored.

# `response.error.code` values the openai SDK accepts (a fixed set); anything else is sent as server_error.
ERROR_CODES = frozenset({"server_error", "rate_limit_exceeded", "invalid_prompt"})


def usage_from_chat(usage: JsonObject | None) -> JsonObject | None:
    """A chat-shaped usage (the proxy's own summary calls) in the Responses shape."""
    if not usage:
        return None
    prompt, completion = usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0
    return {
        "input_tokens": prompt,
        "output_tokens": completion,
        "total_tokens": usage.get("total_tokens") or prompt + completion,
    }


def _tool_calls(calls: list[JsonObject]) -> list[ToolCall]:
    return [
        ToolCall(str(c.get("name") or ""), string_or(c.get("arguments"), ""), string_or(c.get("call_id"), None))
        for c in calls
    ]


def _replayable_items(items: list[JsonObject], replayable: bool) -> list[JsonObject]:
    if replayable:
        return items
    return [{k: v for k, v in item.items() if k != "id"} for item in items if _type(item) != "reasoning"]


class ResponsesRounds:
    """The reload rounds of one Responses request (see the module docstring)."""

    what = "response"
    closing = b""
    context_management: JsonObject | None = None  # no clearing edits in the Responses API

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
        """`lead`: the proxy's own output items, first in the client's answer (an emulated compaction)."""
        self.body, self.items, self.tools, self.names = body, list(items), list(tools), names
        self.extra_usage = usage_from_chat(extra_usage)
        self.round = 0
        self.offered = False
        if body.get("conversation"):
            self.chaining = "conversation"
        elif isinstance(body.get("previous_response_id"), str) and body.get("store") is not False:
            self.chaining = "previous_response_id"
        else:
            self.chaining = "full"
        self._replayable = reasoning_replayable(body)
        self._pending: tuple[list[JsonObject], list[JsonObject]] = ([], [])  # the round's items, its injected calls
        self._results: list[JsonObject] = []  # what a chained round sends
        self._answers: list[JsonObject] = []
        self.lead = list(lead)
        self._rewriter = StreamRewriter(names, extra_usage=self.extra_usage, lead=self.lead)
        self.first_id: str | None = None
        self.last_id: str | None = None
        self.unanswered: list[ToolCall] = []

    def request(self, offered: bool) -> JsonObject:
        self.offered = offered
        if self.round == 0 or self.chaining == "full":
            payload = with_history(self.body, self.items)
        else:
            payload = {**self.body, "input": self._results}
            if self.chaining == "previous_response_id" and self.last_id:
                payload["previous_response_id"] = self.last_id
        return inject_tools(payload, self.tools) if offered else payload

    def answer(self, results: list[ToolResult]) -> None:
        done, calls = self._pending
        self._results = injected_results(calls, results)
        self.items += [*_replayable_items(done, self._replayable), *self._results]
        self.round += 1
        self._pending = ([], [])
        self._rewriter.next_round()

    def _note(self, response_id: Any) -> None:
        if isinstance(response_id, str):
            self.first_id = self.first_id or response_id
            self.last_id = response_id

    def _calls(self, done: list[JsonObject], calls: list[JsonObject]) -> list[ToolCall]:
        self._pending = (done, calls)
        return _tool_calls(calls)

    def _stop(self, calls: list[JsonObject]) -> list[ToolCall]:
        """The loop ends: injected calls still in the round (beside the client's) stay unanswered."""
        self.unanswered = _tool_calls(calls)
        return []

    # -- non-streamed ------------------------------------------------------------------------

    def take(self, answer: JsonObject) -> list[ToolCall]:
        self._answers.append(answer)
        self._note(answer.get("id"))
        if self.offered and injected_only(answer, self.names):
            return self._calls(round_items(answer, self.names), calls_to_run(answer, self.names))
        return self._stop(calls_to_run(answer, self.names))

    def result(self) -> JsonObject:
        return combine_rounds(self._answers, self.names, extra_usage=self.extra_usage, lead=self.lead)

    # -- streamed ----------------------------------------------------------------------------

    def feed(self, event: JsonObject) -> list[JsonObject]:
        out = self._rewriter.feed(event)
        self.first_id, self.last_id = self._rewriter.response_id, self._rewriter.last_response_id
        return out

    def calls(self) -> list[ToolCall]:
        rewriter = self._rewriter
        if not (self.offered and rewriter.injected_only):
            return self._stop(rewriter.calls_to_run if rewriter.ended and not rewriter.errored else [])
        return self._calls(rewriter.round_items, rewriter.calls_to_run)

    def finish(self) -> list[JsonObject]:
        out = self._rewriter.finish()
        if not out and not self._rewriter.errored:
            return self._rewriter.fail("The upstream's stream ended before the response completed.")
        return out

    def fail(self, error: JsonObject) -> list[JsonObject]:
        detail = object_or(error.get("error"), {})
        code = given if isinstance(given := detail.get("code"), str) and given in ERROR_CODES else "server_error"
        return self._rewriter.fail(str(detail.get("message") or "The request failed."), code=code)

    def carried(self, results: list[ToolResult]) -> list[JsonObject]:
        return [
            {"type": "function_call_output", "call_id": call.call_id, "output": as_text(result)}
            for call, result in zip(self.unanswered, results)
        ]

    def encode(self, event: Any) -> bytes:
        return sse.encode_typed(event)
