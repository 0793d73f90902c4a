"""The offload pipeline with its IO: plans from the core, then refs, summaries (and the
summariser), quota and credential check, events, tenant namespaces; large requests planned in
a CPU pool."""
