"""An upstream base URL in the one form the proxy appends API paths to (`chat/completions`,
`messages`, `models`…): with its `/v1`, however the operator wrote it.

OpenAI's (`--upstream`, a tenant's `upstream`, `X-Offload-Upstream`): as an SDK's `base_url`
is written, `https://api.openai.com/v1`; a bare host (`https://api.openai.com`) gets `/v1`.
Any other path is the gateway's own and kept (`https://openrouter.ai/api/v1`,
`…/v1beta/openai`). Anthropic's (`--anthropic-upstream`, a tenant's `anthropic_upstream`): as
`ANTHROPIC_BASE_URL` is written (`https://api.anthropic.com`, the SDK appends `/v1/messages`),
or with its `/v1`.

`base_url_problem` says, in one line, what is wrong with one given another way: without its
scheme, or with an endpoint's path (`…/v1/chat/completions`, which would be sent
`…/v1/chat/completions/chat/completions`).
"""

from __future__ import annotations

from urllib.parse import urlsplit


def openai_base(url: str) -> str:
    url = url.rstrip("/")
    return url if urlsplit(url).path else f"{url}/v1"


def anthropic_base(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/v1") else f"{url}/v1"


# The API paths the proxy appends to a base URL: one written with it (copied from a curl line)
# would be sent `…/v1/chat/completions/chat/completions`
ENDPOINTS = (
    "chat/completions",
    "completions",
    "responses",
    "responses/compact",
    "responses/input_tokens",
    "messages",
    "messages/count_tokens",
    "embeddings",
)
EXAMPLES = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
FORMS = {"openai": "as an OpenAI SDK's base_url is written", "anthropic": "as ANTHROPIC_BASE_URL is written"}
_LOCAL = ("localhost", "127.", "[::1]", "0.0.0.0", "host.docker.internal")


def _endpoint(url: str, family: str) -> tuple[str, str] | None:
    """(the endpoint path `url` ends with, the base URL without it), else None. On Anthropic's
    API the endpoint's `/v1` goes too: its base is written without it."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    lowered = path.lower()
    for endpoint in sorted(ENDPOINTS, key=len, reverse=True):
        if lowered.endswith(f"/{endpoint}"):
            cut = len(endpoint) + 1
            if family == "anthropic" and lowered[:-cut].endswith("/v1"):
                cut += 3
            return path[-cut:], parts._replace(path=path[:-cut], query="", fragment="").geturl()
    return None


def base_url_problem(url: str, family: str) -> str | None:
    """What is wrong with `url` as the base URL of `family`'s API ("openai" or "anthropic"), in
    one line that quotes it and says what to give instead; None when it will do."""
    example, form = EXAMPLES[family], FORMS[family]
    if not url or any(c.isspace() for c in url):
        return f"{url!r} is not a URL: give the API's base URL, e.g. {example}"
    if "://" not in url:
        fixed = f"{'http' if url.lower().startswith(_LOCAL) else 'https'}://{url}"
        fixed = (_endpoint(fixed, family) or ("", fixed))[1]
        return f"{url!r} has no scheme: give {fixed} (the API's base URL, with http:// or https://)"
    if not url.startswith(("http://", "https://")):
        return f"{url!r} is not an http:// or https:// URL: give the API's base URL, e.g. {example}"
    if not urlsplit(url).netloc:
        return f"{url!r} has no host: give the API's base URL, e.g. {example}"
    if (found := _endpoint(url, family)) is not None:
        return f"{url!r} is an endpoint, not the API's base URL ({form}): drop {found[0]!r}, i.e. give {found[1]}"
    return None
