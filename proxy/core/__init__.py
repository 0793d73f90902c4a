"""The offload core: pure and format-neutral (no starlette, httpx2 or store imports).

How a wire format's history looks to the planners (`view`) and what the HTTP layer and the
reload loop ask of a format (`wire`, `rounds`); what leaves the context (`compaction`, `fold`,
`media`, `compression`), the texts the model sees in its place (`texts`, `preview`,
`summary_index`); the per-request settings, token counting, JSON (`jsonio`), the prompt cache's
prices (`prompt_cache`) and what upstream answers report (`answers`). Tests drive it directly
(tests/unit/core).
"""
