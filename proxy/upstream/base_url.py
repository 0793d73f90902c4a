"""An upstream base URL: the one form the proxy appends API paths to, which one a request goes
to, and whether it is one of the providers' own APIs (whose context management it applies).

The form: with its `/v1`, however the operator wrote it. OpenAI's (`--upstream`, a tenant's
`upstream`, `X-Offload-Upstream`): as an SDK's `base_url` is written, `https://api.openai.com/v1`;
a bare host (`https://api.openai.com`) gets `/v1`. Any other path is the gateway's own and kept
(`https://openrouter.ai/api/v1`, `…/v1beta/openai`). Anthropic's (`--anthropic-upstream`, a
tenant's `anthropic_upstream`): as `ANTHROPIC_BASE_URL` is written (`https://api.anthropic.com`,
the SDK appends `/v1/messages`), or with its `/v1`. `base_url_problem` says, in one line, what is
wrong with one given another way: without its scheme, or with an endpoint's path
(`…/v1/chat/completions`, which would be sent `…/v1/chat/completions/chat/completions`).

The choice: the server's upstream, a tenant's own (in the tenants file, `upstream =
"https://…/v1"`), or one a request names in `X-Offload-Upstream` only when its host is on the
server's allowlist (empty by default): anything else is a 400, so a client can never make the
proxy send its credentials, or anyone's, to a host of its choosing.

Native or emulated: `context_management` (Responses compaction, Anthropic's edits and
compaction) and `POST /v1/responses/compact` exist on OpenAI's and Anthropic's own APIs only:
vLLM, Ollama, llama.cpp and most OpenAI-compatible servers and gateways answer them with a 404 or
ignore them. The setting (`--context-management`, a tenant's `context_management`, the
`X-Offload-Context-Management` header) says who applies them: `relay` the upstream, `emulate`
the proxy (its summaries and refs), `auto` the upstream when it is one of the providers' APIs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

import httpx2

from proxy.core.settings import UPSTREAM_HEADER
from proxy.errors import Kind, ProxyError


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


PARAM = UPSTREAM_HEADER
HEADER = PARAM.lower()


def has_dot_segment(path: str) -> bool:
    """A `.` or `..` segment, also percent-encoded any number of times, behind an encoded slash
    or a backslash, or with `;params`: such a path could leave the prefix it is appended to."""
    decoded = path
    while "%" in decoded and (once := unquote(decoded)) != decoded:  # shrinks every round: ends
        decoded = once
    return any(segment.split(";", 1)[0] in (".", "..") for segment in re.split(r"[/\\]", decoded))


def _invalid(why: str) -> ProxyError:
    return ProxyError(
        Kind.BAD_REQUEST,
        f"X-Offload-Upstream must be an http(s) URL such as https://host/v1: {why}.",
        code="invalid_upstream",
        param=PARAM,
    )


def parse_upstream_url(value: str) -> httpx2.URL:
    """A strict parse: any whitespace or control character, a bad port or a bad host is refused."""
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in value):
        raise _invalid("it contains whitespace or a control character")
    try:
        url = httpx2.URL(value)
        port = url.port
    except (httpx2.InvalidURL, ValueError, TypeError) as exc:
        raise _invalid(str(exc) or "it does not parse") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise _invalid("it needs an http or https scheme and a host")
    if url.userinfo or url.query or url.fragment:
        raise _invalid("it may not carry credentials, a query or a fragment")
    if port is not None and not 0 < port < 65536:
        raise _invalid("its port is out of range")
    if has_dot_segment(urlsplit(value).path):  # as written: httpx2 would already have resolved them
        raise _invalid("its path may not contain '.' or '..' segments")
    return url


def requested_base(headers: Mapping[str, str], allowlist: list[str], family: str = "openai") -> str | None:
    """The base URL an `X-Offload-Upstream` header asks for (allowlisted hosts only), else None;
    `family`: whose API it is the base of (an endpoint's URL is refused)."""
    requested = (headers.get(HEADER) or "").strip()
    if not requested:
        return None
    url = parse_upstream_url(requested)
    if (problem := base_url_problem(requested, family)) is not None:
        raise _invalid(problem)
    host = url.host.lower()
    # "host" allows the scheme's default port only; "host:port" exactly that port
    hostport = f"{host}:{url.port}" if url.port else host
    allowed = {entry.lower() for entry in allowlist}
    if hostport not in allowed:
        raise ProxyError(
            Kind.BAD_REQUEST,
            f"Upstream host {hostport!r} is not on this server's allowlist.",
            code="upstream_not_allowed",
            param=PARAM,
        )
    return requested.rstrip("/")


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
