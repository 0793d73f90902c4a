"""Usage statistics: per-tenant time buckets and per-session turns, kept in the store.

`prices` values tokens in money, `buckets` is the pure arithmetic of buckets and windows,
`prefix` estimates prompt-cache reuse, `session_id` names the sessions of clients that send no
`X-Offload-Session` (`replies` those continuing a stored Responses answer), `recorder` writes
off the request path, `reader` answers the JSON API.
"""
