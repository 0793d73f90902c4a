"""Wire formats, one package each: how a request's history is read and written back,
which tools are injected, and how injected calls are hidden from what the client gets.

`chat` (Chat Completions), `responses` (the Responses API) and `messages` (Anthropic's Messages
API), each a package whose `__init__` exports its `WireFormat` (`proxy.core.wire`; built in its
private `_wire`) and what other packages use of it: a complete adapter, what the proxy does in
place of its provider's context management included (its `compaction_emulation`, its
`clearing_edits`). Shared by the formats: `json_body` (the body checks), `prompt_cache` (OpenAI's
prompt cache, the keep-alive pings), `context_threshold` (the threshold checks two of them share).
"""
