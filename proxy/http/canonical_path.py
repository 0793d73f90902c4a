"""One spelling of each path before routing: `/v1//messages`, `/v1/responses/` and
`/v1/chat//completions/` reach the managed endpoints (and their checks) like `/v1/messages`,
never the relay behind them.

Only the decoded `path` that routing, the API family and the metrics read is rewritten: runs
of slashes become one and a trailing slash goes. `raw_path`, which the relay forwards, stays
as the client sent it.

An API path without its `/v1` (`/chat/completions`, `/responses`, `/messages`, `/models`…: a
client configured with the proxy's root as its base URL, as other OpenAI-compatible gateways
allow) is the same path with it: routed, identified and managed as `/v1/…`. The proxy's own
paths (`/healthz`, `/readyz`, `/metrics`, `/dashboard`) are not API paths and stay.
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Receive, Scope, Send

_SLASHES = re.compile(r"//+")
# The first segments of OpenAI's and Anthropic's API paths (under /v1)
API_SEGMENTS = frozenset(
    {
        "chat",
        "completions",
        "responses",
        "messages",
        "models",
        "embeddings",
        "moderations",
        "audio",
        "images",
        "files",
        "uploads",
        "batches",
        "fine_tuning",
        "vector_stores",
        "assistants",
        "threads",
        "conversations",
        "realtime",
        "evals",
        "containers",
    }
)


def canonical(path: str) -> str:
    if "//" in path:
        path = _SLASHES.sub("/", path)
    if len(path) > 1 and path.endswith("/"):
        path = path.rstrip("/") or "/"
    if path.partition("/")[2].partition("/")[0] in API_SEGMENTS:  # `/messages/x` → `messages`
        path = f"/v1{path}"
    return path


class CanonicalPath:
    """ASGI middleware: `scope["path"]` in its one spelling (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            path = scope.get("path", "")
            fixed = canonical(path)
            if fixed != path:
                scope = {**scope, "path": fixed}
        await self.app(scope, receive, send)
