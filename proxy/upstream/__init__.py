"""The upstream provider: the pooled HTTP client and its error mapping (`client`), which upstream
a request goes to (`choice`), server-sent events (`sse`)."""
