"""The Chat Completions API (`POST /v1/chat/completions`) as one wire format of the core.

- `items`: how the planners see chat messages (`ChatView`, `VIEW`, `text_of`, `with_text`);
- `body`: request bodies parsed and checked (`parse_chat_body`);
- `request`: the client's tools that collide with the injected ones;
- `rounds`: the reload rounds of one request (`ChatRounds`), streamed and not;
- `summary`: a summary asked for the way the conversation is sent (`summary_request`, `summary_answer`);
- `wire`: all of it as a `proxy.core.wire.WireFormat` (`CHAT`).
"""

from proxy.formats.chat.items import VIEW
from proxy.formats.chat.wire import CHAT, ChatFormat

# the format, and what code outside the package reaches for (the default view of the planners)
__all__ = ["CHAT", "ChatFormat", "VIEW"]
