"""The upstream provider: the pooled HTTP client (`client`), its transport and error mapping
(`transport`), which upstream a request goes to (`base_url`), server-sent events (`sse`)."""
