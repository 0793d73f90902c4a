"""The OpenAI Responses API (`POST /v1/responses`) as one wire format of the format-neutral core:
`RESPONSES`, a `proxy.core.wire.WireFormat`, and what code outside the package reaches for.

The history the core reduces is `input` (a string input is one user message); `instructions`
stays where it is, never summarised. What lives upstream (`previous_response_id`,
`conversation`) is not the proxy's to reduce: only what the request carries is offloaded.
Pure functions and small classes over plain JSON values, no IO:

- `_items`: how the planners see Responses *input items* (`ResponsesView`, an `ItemView`);
- `_request`: the history a request carries (`history`, `with_history`), the tools the proxy
  adds (`inject_tools`, `colliding_tool_names`), request bodies parsed and checked
  (`parse_responses_body`), the summary request (`summary_request`, `summary_answer`);
- `_rounds`: the reload rounds of one request (`ResponsesRounds`, a `proxy.core.rounds.Rounds`),
  non-streamed (`injected_only`, `calls_to_run`, `round_items`, …) and streamed
  (`StreamRewriter`), and the usage as a bill (`USAGE`);
- `_compaction`: OpenAI's compaction done by the proxy (`ResponsesCompaction`: `compaction`
  items, thresholds, `compaction_trigger`, the answers of `POST /v1/responses/compact`);
- `_from_chat`: chat traces as Responses items (`replay`);
- `_wire`: all of it as a `proxy.core.wire.WireFormat` (`RESPONSES`).
"""

from proxy.formats.responses._compaction import (
    TYPE,
    compacted_response,
    parse_compact_body,
    summary_body,
)
from proxy.formats.responses._from_chat import items_from_chat, items_from_message, items_with_offsets, tools_from_chat
from proxy.formats.responses._items import ResponsesView
from proxy.formats.responses._request import check_responses_input, inject_tools, instruction_item
from proxy.formats.responses._wire import RESPONSES, ResponsesFormat

# the format, and what code outside the package reaches for (the compact route, the WebSocket
# mode's checks, replay's requests)
__all__ = [
    "RESPONSES",
    "ResponsesFormat",
    "TYPE",
    "compacted_response",
    "parse_compact_body",
    "summary_body",
    "check_responses_input",
    "inject_tools",
    "instruction_item",
    "items_from_chat",
    "items_from_message",
    "items_with_offsets",
    "tools_from_chat",
    "ResponsesView",
]
