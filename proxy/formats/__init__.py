"""Wire formats, one module (or package) each: how a request's history is read and written back,
which tools are injected, and how injected calls are hidden from what the client gets.

`chat` (Chat Completions, routed) and `responses` (the Responses API, not routed yet).
"""
