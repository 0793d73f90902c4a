"""Which provider's API a request speaks: it decides the upstream, how a held key is sent, and
the shape of the proxy's own errors.

Anthropic: the Messages API's paths (`/v1/messages`, `/v1/messages/count_tokens`,
`/v1/messages/batches…`) and any request carrying `anthropic-version` (every Anthropic SDK and
Claude Code send it, e.g. on `/v1/models`). Everything else is OpenAI's.
"""

from __future__ import annotations

from typing import Literal

from starlette.types import Scope

Family = Literal["openai", "anthropic"]


def family_of(scope: Scope) -> Family:
    path = scope.get("path", "")
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return "anthropic"
    if any(name == b"anthropic-version" for name, _ in scope.get("headers", ())):
        return "anthropic"
    return "openai"
