"""The providers' own context management, done by the proxy for upstreams without it.

`--context-management` (`proxy.upstream.native`) decides, per request, whether the upstream
applies `context_management` and `/responses/compact` itself (relay) or the proxy does, with its
own summaries and refs (emulate). Everything here runs at the edges (store, upstream); the rules
are in `proxy.core` (`compaction_token`, `provider_context`).
"""

# What X-Offload-Action gains when the proxy applied the provider's context management itself
# (alone, or after a `+`: `Prepared.add_action`); the statistics count them apart.
COMPACTION_ACTION = "emulated-compaction"
EDITS_ACTION = "context-edits"
