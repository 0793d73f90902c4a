"""Does an upstream apply the providers' own context management, or does the proxy emulate it?

`context_management` (Responses compaction, Anthropic's edits and compaction) and
`POST /v1/responses/compact` exist on OpenAI's and Anthropic's own APIs only: vLLM, Ollama,
llama.cpp and most OpenAI-compatible servers and gateways answer them with a 404 or ignore them.
The setting (`--context-management`, a tenant's `context_management`, the
`X-Offload-Context-Management` header) says who applies them: `relay` the upstream, `emulate`
the proxy (its summaries and refs), `auto` the upstream when it is one of the providers' APIs.
"""

from __future__ import annotations

from urllib.parse import urlsplit

NATIVE_HOSTS = frozenset({"api.openai.com", "api.anthropic.com"})


def emulates(setting: str, base_url: str) -> bool:
    """True when the proxy applies context management itself for an upstream at `base_url`."""
    if setting == "relay":
        return False
    if setting == "emulate":
        return True
    host = (urlsplit(base_url).hostname or "").lower().rstrip(".")
    return host not in NATIVE_HOSTS
