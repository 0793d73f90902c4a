"""The offload pipeline with its IO: plans from the core (`pipeline`), then the records a
tenant's namespace keeps and the tenant's store handle (`records`), summaries (`summaries`: the
Compressor; `summarizer`: the summary call, its context, made in the background), the cache
keep-alive, the tenant's keys, quota and credential check (`tenant`), the store's shared secrets
(`canary`); large requests planned in a CPU pool (`cpu_pool`)."""
