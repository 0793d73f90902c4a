"""Usage statistics: per-tenant time buckets and per-session turns, kept in the store.

`prices` values tokens in money, `buckets` is the pure arithmetic of buckets and windows,
`recorder` writes off the request path, `reader` answers the JSON API.
"""
