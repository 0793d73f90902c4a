"""The Anthropic Messages API (`POST /v1/messages`) as one wire format of the format-neutral core.

Pure functions and small classes over plain JSON values, no IO:

- `items`: how the planners see the history (`MessagesView`, an `ItemView`): one item per
  message, a user message holding several tool results split into parts (the private
  keys `PART`, `SUMMARY` mark a later part and the summary item; they never reach the upstream);
- `request`: the history a request carries (`history`, `with_history`, `messages_of`) and the
  tools the proxy adds (`inject_tools`, `anthropic_tool`, `colliding_tool_names`);
- `body`: request bodies parsed and checked (`parse_messages_body`);
- `rounds`: non-streamed reload rounds (`injected_only`, `calls_to_run`, `tool_calls`,
  `assistant_turn`, `tool_results`, `combine_rounds`, `usage_from_chat`);
- `stream`: streamed reload rounds (`StreamRewriter`: the SSE events of successive upstream
  rounds as the events of one message for the client);
- `reload_rounds`: the reload rounds of one request (`MessagesRounds`, a `proxy.core.rounds.Rounds`);
- `summary`: a summary asked for the way the conversation is sent (`summary_request`, `summary_answer`);
- `from_chat`: chat traces as Messages requests and back (`replay --format anthropic`);
- `emulation`: Anthropic's context management done by the proxy (`MessagesCompaction`:
  `compaction_blocks`, `threshold`, the paused answer `compaction`; `MessagesEdits`: `edits`,
  `edits_config`), and `betas` (the emulated `anthropic-beta` values the upstream is not sent);
- `wire`: all of it as a `proxy.core.wire.WireFormat` (`MESSAGES`).
"""

from proxy.formats.messages.betas import without_emulated_betas
from proxy.formats.messages.request import history, inject_tools, messages_of
from proxy.formats.messages.wire import MESSAGES, MessagesFormat

# the format, and what code outside the package reaches for (the HTTP layer's headers, replay's
# requests)
__all__ = ["MESSAGES", "MessagesFormat", "without_emulated_betas", "history", "inject_tools", "messages_of"]
