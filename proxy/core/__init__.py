"""The offload core: pure and format-neutral (no starlette, httpx2 or store imports).

How a wire format's history looks to the planners (`view`), what leaves the context
(`compaction`, `compression`), the texts the model sees in its place (`markers`), the
per-request settings, token counting and JSON. Tests drive it directly (tests/unit/core).
"""
