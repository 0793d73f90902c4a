"""The Anthropic Messages API (`POST /v1/messages`) as one wire format of the format-neutral core:
`MESSAGES`, a `proxy.core.wire.WireFormat`, and what code outside the package reaches for.

The history the core reduces is `messages` (a user message holding several tool results split
into parts, see `proxy.formats.messages._items`); `system` stays where it is, never summarised.
Nothing is stored upstream (`stored` is False). Pure functions and small classes over plain
JSON values, no IO:

- `_items`: how the planners see the history (`MessagesView`, an `ItemView`): one item per
  message, a user message holding several tool results split into parts (the private
  keys `PART`, `SUMMARY` mark a later part and the summary item; they never reach the upstream);
- `_request`: the history a request carries (`history`, `with_history`, `messages_of`), the
  tools the proxy adds (`inject_tools`, `anthropic_tool`, `colliding_tool_names`), request
  bodies parsed and checked (`parse_messages_body`), the summary request (`summary_request`,
  `summary_answer`), Anthropic's prompt cache on them (`with_caching`, `cached_request`);
- `_rounds`: the reload rounds of one request (`MessagesRounds`, a `proxy.core.rounds.Rounds`),
  non-streamed (`injected_only`, `calls_to_run`, `combine_rounds`, …) and streamed
  (`StreamRewriter`), and the usage as a bill (`USAGE`);
- `_emulation`: Anthropic's context management done by the proxy (`MessagesCompaction`:
  `compaction` blocks, thresholds, the paused answer; `MessagesEdits`), and the emulated
  `anthropic-beta` values the upstream is not sent (`without_emulated_betas`);
- `_clearing_edits`: the clearing edits' config and their application;
- `_from_chat`: chat traces as Messages requests and back (`replay --format anthropic`);
- `_wire`: all of it as a `proxy.core.wire.WireFormat` (`MESSAGES`).
"""

from proxy.formats.messages._emulation import without_emulated_betas
from proxy.formats.messages._from_chat import (
    body_from_chat,
    items_with_offsets,
    message_answer,
    system_from_chat,
    tools_from_chat,
)
from proxy.formats.messages._request import (
    EPHEMERAL,
    STRATEGY,
    cached_request,
    history,
    inject_tools,
    instruction_message,
    messages_of,
    with_caching,
)
from proxy.formats.messages._wire import MESSAGES, MessagesFormat

# the format, and what code outside the package reaches for (the HTTP layer's headers, replay's
# requests and bills, the fake upstream's cache)
__all__ = [
    "MESSAGES",
    "MessagesFormat",
    "without_emulated_betas",
    "history",
    "inject_tools",
    "messages_of",
    "EPHEMERAL",
    "STRATEGY",
    "cached_request",
    "with_caching",
    "body_from_chat",
    "items_with_offsets",
    "message_answer",
    "system_from_chat",
    "tools_from_chat",
    "instruction_message",
]
