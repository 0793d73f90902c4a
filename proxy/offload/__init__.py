"""The offload pipeline with its IO: plans from the core, then the records a namespace keeps
(refs, compaction records, response chains, events), summaries (and the summariser, made in the
background), the cache keep-alive, quota and credential check, tenant namespaces; large
requests planned in a CPU pool."""
