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

from proxy.formats.responses.wire import RESPONSES, ResponsesFormat

__all__ = ["RESPONSES", "ResponsesFormat"]  # the format
