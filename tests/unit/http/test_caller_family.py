"""Who calls on the Anthropic API: its upstream, how a held key goes there, the namespace."""

from __future__ import annotations

import pytest
from starlette.datastructures import Headers

from proxy.errors import ProxyError
from proxy.http.caller import Gatekeeper
from proxy.http.error_map import status_of
from proxy.http.routing import family_of

KEY_A = "pk-team-a-secret-0001"
KEY_B = "pk-team-b-secret-0002"
TENANTS = {
    "team-a": {"api_keys": [KEY_A]},
    "team-b": {
        "api_keys": [KEY_B],
        "upstream_api_key": "sk-b-openai",
        "anthropic_api_key": "sk-ant-b",
        "upstream": "https://openai.example/v1",
        "anthropic_upstream": "https://claude.example",
    },
}


def headers(**values: str) -> Headers:
    return Headers({k.replace("_", "-"): v for k, v in values.items()})


def scope(path: str, *pairs: tuple[bytes, bytes]) -> dict:
    return {"type": "http", "path": path, "headers": list(pairs)}


def test_family_by_path_or_anthropic_version_header():
    assert family_of(scope("/v1/messages")) == "anthropic"
    assert family_of(scope("/v1/messages/count_tokens")) == "anthropic"
    assert family_of(scope("/v1/messages/batches/abc")) == "anthropic"
    assert family_of(scope("/v1/models", (b"anthropic-version", b"2023-06-01"))) == "anthropic"
    assert family_of(scope("/v1/models")) == "openai"
    assert family_of(scope("/v1/chat/completions")) == "openai"
    assert family_of(scope("/v1/messagesX")) == "openai"  # not the Messages API's path


def test_proxy_keys_get_the_tenants_anthropic_key_as_x_api_key():
    gate = Gatekeeper(
        TENANTS,
        server_key="sk-server-openai",
        anthropic_key="sk-ant-server",
        allow_anonymous=False,
        upstream_allowlist=[],
    )
    a = gate.identify(headers(x_api_key=KEY_A), "anthropic")
    assert a.base == "https://api.anthropic.com/v1" and a.shared_key and a.family == "anthropic"
    sent = a.upstream_headers([(b"x-api-key", KEY_A.encode()), (b"anthropic-version", b"2023-06-01")])
    assert sent == [(b"anthropic-version", b"2023-06-01"), (b"x-api-key", b"sk-ant-server")]
    b = gate.identify(headers(authorization=f"Bearer {KEY_B}"), "anthropic")
    assert b.base == "https://claude.example/v1" and not b.shared_key
    assert b.upstream_headers([(b"authorization", f"Bearer {KEY_B}".encode())]) == [(b"x-api-key", b"sk-ant-b")]
    # the same key on OpenAI's API: OpenAI's upstream and key, as a Bearer token
    b_openai = gate.identify(headers(authorization=f"Bearer {KEY_B}"), "openai")
    assert b_openai.base == "https://openai.example/v1"
    assert b_openai.upstream_headers([]) == [(b"authorization", b"Bearer sk-b-openai")]
    assert a.namespace == gate.identify(headers(x_api_key=KEY_A), "openai").namespace  # one tenant, one namespace


def test_an_anthropic_key_alone_puts_the_proxy_in_proxy_key_mode():
    gate = Gatekeeper(
        TENANTS, server_key=None, anthropic_key="sk-ant-server", allow_anonymous=False, upstream_allowlist=[]
    )
    with pytest.raises(ProxyError) as refused:
        gate.identify(headers(x_api_key="sk-ant-someone-else"), "anthropic")
    assert status_of(refused.value) == 401
    a = gate.identify(headers(x_api_key=KEY_A), "openai")  # no OpenAI key held: nothing goes there as one
    assert a.upstream_headers([(b"x-api-key", KEY_A.encode())]) == []


def test_client_credentials_are_relayed_and_are_the_namespace():
    gate = Gatekeeper(
        {},
        server_key=None,
        allow_anonymous=False,
        upstream_allowlist=["claude.example"],
        anthropic_upstream="http://127.0.0.1:9/",
    )
    api_key = gate.identify(headers(x_api_key="sk-ant-api03-a"), "anthropic")
    oauth = gate.identify(headers(authorization="Bearer sk-ant-oat01-b"), "anthropic")
    assert api_key.base == oauth.base == "http://127.0.0.1:9/v1"
    assert api_key.namespace != oauth.namespace
    assert oauth.upstream_headers([(b"authorization", b"Bearer sk-ant-oat01-b")]) == [
        (b"authorization", b"Bearer sk-ant-oat01-b")
    ]
    # an allowlisted X-Offload-Upstream is written like ANTHROPIC_BASE_URL: /v1 is added
    chosen = gate.identify(headers(x_api_key="k", x_offload_upstream="https://claude.example"), "anthropic")
    assert chosen.base == "https://claude.example/v1"
    chosen = gate.identify(headers(x_api_key="k", x_offload_upstream="https://claude.example/v1"), "anthropic")
    assert chosen.base == "https://claude.example/v1"
    with pytest.raises(ProxyError):
        gate.identify(headers(x_api_key="k", x_offload_upstream="https://evil.example"), "anthropic")


def test_tenants_file_anthropic_keys_are_checked():
    with pytest.raises(ValueError, match="anthropic_api_key needs api_keys"):
        Gatekeeper(
            {"t": {"anthropic_api_key": "sk-ant-x"}}, server_key=None, allow_anonymous=False, upstream_allowlist=[]
        )
    with pytest.raises(ValueError, match="example value"):
        Gatekeeper(
            {"t": {"api_keys": [KEY_A], "anthropic_api_key": "change-me"}},
            server_key=None,
            allow_anonymous=False,
            upstream_allowlist=[],
        )
    with pytest.raises(ValueError, match="--anthropic-api-key"):
        Gatekeeper({}, server_key=None, anthropic_key="change-me", allow_anonymous=False, upstream_allowlist=[])
