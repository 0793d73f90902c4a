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
CACHE_KEY_HOSTS = {"api.openai.com"}  # the upstreams given a prompt_cache_key (`accepts_cache_key`)


def _host(base_url: str) -> str:
    return (urlsplit(base_url).hostname or "").lower().rstrip(".")


def emulates(setting: str, base_url: str) -> bool:
    """True when the proxy applies context management itself for an upstream at `base_url`."""
    if setting == "relay":
        return False
    if setting == "emulate":
        return True
    return _host(base_url) not in NATIVE_HOSTS


def accepts_cache_key(base_url: str) -> bool:
    """Is the upstream at `base_url` OpenAI's own API, which takes a `prompt_cache_key`? Other
    OpenAI-compatible servers may refuse a field they do not know (`--cache-control`)."""
    return _host(base_url) in CACHE_KEY_HOSTS
