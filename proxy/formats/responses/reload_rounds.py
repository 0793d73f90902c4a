"""Reload rounds of a Responses request (`proxy.core.rounds.Rounds` for `POST /v1/responses`).

How a later round is asked for depends on where the conversation lives:

- `conversation` given: the upstream adds each round's input and output to the conversation,
  so a later round sends only the results of the injected calls (the conversation then holds
  the injected calls and their results, paired).
- `previous_response_id` given (and `store` not false): the rounds are chained, each from the
  previous round's response id, sending only the results.
- otherwise (`store: false` with the whole history, the full-offloading case): the whole
  reduced input again, with the round's items and the results appended.

The client gets the first round's response id (a stream announces it before anyone knows
whether more rounds follow); `last_id` is the response that holds the whole exchange, which
the HTTP layer remembers so that a later `previous_response_id` naming the first id continues
from it.

With `store: false` and no `reasoning.encrypted_content` in `include`, a reasoning item cannot
be sent back (the upstream kept no copy): the round's reasoning items are dropped from what is
appended, and the other items lose their `id`, which would name items nobody stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.core.jsonio import JsonObject, object_or, string_or
from proxy.core.media import ToolResult, as_text
from proxy.core.rounds import ToolCall
from proxy.formats.responses.items import _type
from proxy.formats.responses.request import inject_tools, with_history
from proxy.formats.responses.rounds import (
    calls_to_run,
    combine_rounds,
    injected_only,
    injected_results,
    reasoning_replayable,
    round_items,
)
from proxy.formats.responses.stream import StreamRewriter
from proxy.upstream import sse

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
