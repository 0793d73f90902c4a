"""The Chat Completions API (`POST /v1/chat/completions`) as one wire format of the core: `CHAT`,
a `proxy.core.wire.WireFormat`, and what code outside the package reaches for.

- `_items`: how the planners see chat messages (`ChatView`, `VIEW`, `text_of`, `with_text`);
- `_request`: request bodies parsed and checked (`parse_chat_body`), the client's tools that
  collide with the injected ones, the summary request (`summary_request`, `summary_answer`);
- `_rounds`: the reload rounds of one request (`ChatRounds`), streamed and not, and the usage
  as a bill (`USAGE`);
- `_wire`: all of it as a `proxy.core.wire.WireFormat` (`CHAT`).
"""

from proxy.formats.chat._items import VIEW
from proxy.formats.chat._request import parse_chat_body
from proxy.formats.chat._rounds import USAGE
from proxy.formats.chat._wire import CHAT, ChatFormat

# the format, and what code outside the package reaches for (the default view of the planners,
# the offload API's body check, the summariser's usage)
__all__ = ["CHAT", "ChatFormat", "VIEW", "parse_chat_body", "USAGE"]
