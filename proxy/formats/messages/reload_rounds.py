"""Reload rounds of a Messages request (`proxy.core.rounds.Rounds` for `POST /v1/messages`).

The API keeps no state: every round sends the whole reduced history again, with each earlier
round's assistant message (all its blocks, thinking included) and one user message of
`tool_result` blocks answering its injected calls appended.

The client gets one message: the first round's `id` (a stream announces it before anyone
knows whether more rounds follow), the visible blocks of every round, the last round's
`stop_reason`, and `usage` summed over the rounds plus the proxy's own summary calls
(`extra_usage`, chat-shaped, added to `input_tokens` / `output_tokens`). `first_id` and
`last_id` stay None: nothing is stored upstream, nothing to continue.

Once a round has called the injected tools, every later request lists them, offered or not:
the API refuses a history holding `tool_use` blocks when no tools are defined. A last round
(not offered) that calls them anyway ends the loop like any other; its injected calls are
hidden and its `tool_use` stop becomes `end_turn`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.core.jsonio import JsonObject
from proxy.core.media import ToolResult, as_text
from proxy.core.rounds import ToolCall
from proxy.errors import anthropic_error_event
from proxy.formats.messages.request import inject_tools, with_history
from proxy.formats.messages.rounds import (
    assistant_turn,
    calls_to_run,
    combine_rounds,
    content_of,
    injected_only,
    tool_calls,
    tool_results,
    usage_from_chat,
)
from proxy.formats.messages.stream import StreamRewriter
from proxy.upstream import sse


class MessagesRounds:
    """The reload rounds of one Messages request (see the module docstring)."""

    what = "message"
    closing = b""
    first_id: str | None = None
    last_id: str | None = None
    # the `context_management` the client's message carries when the proxy applied the edits
    # itself (`proxy.turn._context_edits`): on the message, or on a stream's last `message_delta`
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
