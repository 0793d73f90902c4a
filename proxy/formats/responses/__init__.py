"""The OpenAI Responses API (`POST /v1/responses`) as one wire format of the format-neutral core.

Pure functions and small classes over plain JSON values, no IO:

- `items`: how the planners see Responses *input items* (`ResponsesView`, an `ItemView`);
- `request`: the history a request carries (`history`, `with_history`) and the tools the proxy
  adds (`inject_tools`, `colliding_tool_names`);
- `rounds`: non-streamed reload rounds (`injected_only`, `calls_to_run`, `round_items`,
  `injected_results`, `hide_injected`, `combine_rounds`, `add_usage`);
- `stream`: streamed reload rounds (`StreamRewriter`: the SSE events of successive upstream
  rounds as the events of one response for the client);
- `body`: request bodies parsed and checked (`parse_responses_body`);
- `reload_rounds`: the reload rounds of one request (`ResponsesRounds`, a `proxy.core.rounds.Rounds`);
- `summary`: a summary asked for the way the conversation is sent (`summary_request`, `summary_answer`);
- `emulation`: OpenAI's compaction done by the proxy (`ResponsesCompaction`: `compaction_items`,
  `threshold`, `trigger`, the answers `compact`);
- `wire`: all of it as a `proxy.core.wire.WireFormat` (`RESPONSES`).
"""

from proxy.formats.responses.items import ResponsesView, is_injected, needs_client
from proxy.formats.responses.reload_rounds import ResponsesRounds
from proxy.formats.responses.request import colliding_tool_names, history, inject_tools, responses_tool, with_history
from proxy.formats.responses.rounds import (
    add_usage,
    calls_to_run,
    combine_rounds,
    hide_injected,
    injected_only,
    injected_results,
    reasoning_replayable,
    round_items,
)
from proxy.formats.responses.stream import TERMINAL_EVENTS, StreamRewriter
from proxy.formats.responses.wire import RESPONSES, ResponsesFormat

__all__ = [
    "ResponsesView",
    "history",
    "with_history",
    "inject_tools",
    "responses_tool",
    "colliding_tool_names",
    "is_injected",
    "needs_client",
    "injected_only",
    "calls_to_run",
    "round_items",
    "reasoning_replayable",
    "injected_results",
    "hide_injected",
    "combine_rounds",
    "add_usage",
    "StreamRewriter",
    "TERMINAL_EVENTS",
    "ResponsesRounds",
    "RESPONSES",
    "ResponsesFormat",
]
