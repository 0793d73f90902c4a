"""An upstream base URL in the one form the proxy appends API paths to (`chat/completions`,
`messages`, `models`…): with its `/v1`, however the operator wrote it.

OpenAI's (`--upstream`, a tenant's `upstream`, `X-Offload-Upstream`): as an SDK's `base_url`
is written, `https://api.openai.com/v1`; a bare host (`https://api.openai.com`) gets `/v1`.
Any other path is the gateway's own and kept (`https://openrouter.ai/api/v1`,
`…/v1beta/openai`). Anthropic's (`--anthropic-upstream`, a tenant's `anthropic_upstream`): as
`ANTHROPIC_BASE_URL` is written (`https://api.anthropic.com`, the SDK appends `/v1/messages`),
or with its `/v1`.
"""

from __future__ import annotations

from urllib.parse import urlsplit


def openai_base(url: str) -> str:
    url = url.rstrip("/")
    return url if urlsplit(url).path else f"{url}/v1"


def anthropic_base(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/v1") else f"{url}/v1"
