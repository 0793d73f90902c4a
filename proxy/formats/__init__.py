"""Wire formats, one module (or package) each: how a request's history is read and written back,
which tools are injected, and how injected calls are hidden from what the client gets.

`chat` (Chat Completions), `responses` (the Responses API) and `messages` (Anthropic's Messages
API), each a package whose `wire` module holds its `WireFormat` (`proxy.core.wire`): a complete
adapter, what the proxy does in place of its provider's context management included (its
`compaction_emulation`, its `clearing_edits`). `context_threshold` holds the threshold checks
two of them share.
"""
