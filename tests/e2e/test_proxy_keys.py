"""Proxy keys, client credentials and anonymous mode: who may use the proxy, and whose content they see."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx2
import openai
import pytest
from pydantic import ValidationError
from starlette.responses import JSONResponse

from proxy.config import ServerSettings
from proxy.http.caller import Gatekeeper
from tests.harness.history import agent_history, refs_sent
from tests.harness.requests import post
from tests.harness.servers import completion

KEY_A = "pk-team-a-secret-0001"
KEY_B = "pk-team-b-secret-0002"
KEY_B2 = "pk-team-b-second-key"
CHEAP = {"X-Offload-Max-Total-Tokens": "1000"}


def tenants_file(tmp_path: Path, upstream_url: str = "", extra_b: str = "") -> Path:
    path = tmp_path / "tenants.toml"
    path.write_text(
        f'[tenants.team-a]\napi_keys = ["{KEY_A}"]\nmax_total_tokens = 1000\n'
        f'[tenants.team-b]\napi_keys = ["{KEY_B}", "sha256:{hashlib.sha256(KEY_B2.encode()).hexdigest()}"]\n'
        f'upstream_api_key = "sk-team-b-upstream"\n{extra_b}'
        f"[tenants.open]\nmax_total_tokens = 1000\n"
    )
    return path


def chat(messages: list | None = None) -> dict:
    return {"model": "gpt-4o", "messages": messages or [{"role": "user", "content": "hi"}]}


def credentials_sent(rec) -> dict[str, str]:
    return {k: v for k, v in rec.headers.items() if k in ("authorization", "x-api-key", "api-key")}


def test_server_key_requires_a_proxy_key_and_never_forwards_it(make_proxy, upstream, tmp_path):
    with make_proxy(upstream_api_key="sk-server", tenants_file=tenants_file(tmp_path)) as url:
        for path in ("/v1/chat/completions", "/v1/models", "/v1/offload", "/v1/offload/events", "/v1/offload/abc"):
            r = httpx2.request("POST" if path.endswith(("completions", "offload")) else "GET", f"{url}{path}", json={})
            assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key", path
            assert "Authorization: Bearer" in r.json()["error"]["message"]
        for wrong in (
            {"authorization": "Bearer sk-real-openai-key"},
            {"x-api-key": "nope-nope-nope"},
            {"api-key": "azure-key"},
        ):
            r = post(url, body=chat(), headers=wrong)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert not upstream.requests  # the operator's key was never used by them

        assert post(url, body=chat(), key=KEY_A).status_code == 200
        assert credentials_sent(upstream.requests[-1]) == {"authorization": "Bearer sk-server"}
        assert post(url, body=chat(), headers={"x-api-key": KEY_A}).status_code == 200
        assert credentials_sent(upstream.requests[-1]) == {"authorization": "Bearer sk-server"}
        # team-b has its own upstream key; its second key is configured as a SHA-256 digest
        for headers in ({"authorization": f"Bearer {KEY_B}"}, {"x-api-key": KEY_B2}):
            assert httpx2.get(f"{url}/v1/models", headers=headers).status_code == 200
            assert credentials_sent(upstream.requests[-1]) == {"authorization": "Bearer sk-team-b-upstream"}
        for rec in upstream.requests:
            assert not any(key in str(rec.headers) for key in (KEY_A, KEY_B, KEY_B2))


def test_the_key_decides_the_tenant_and_x_offload_tenant_only_narrows(make_proxy, upstream, tmp_path):
    port = upstream.url.rsplit(":", 1)[1]
    tenants = tenants_file(tmp_path, extra_b=f'upstream = "http://localhost:{port}/v1"\n')
    history = agent_history(steps=4)
    with make_proxy(upstream_api_key="sk-server", tenants_file=tenants) as url:
        # team-a's settings (max_total_tokens = 1000) come from its key: its history is compacted
        r = post(url, body=chat(history), key=KEY_A)
        assert r.headers["x-offload-action"] == "compact"
        ref = refs_sent(upstream.chat_requests()[-1])[0]
        assert upstream.requests[-1].headers["host"] == f"127.0.0.1:{port}"
        # naming team-b does not switch to team-b (its upstream, its key, its content): a sub-tenant of team-a
        r = post(url, body=chat(), key=KEY_A, headers={"X-Offload-Tenant": "team-b"})
        assert r.status_code == 200
        assert upstream.requests[-1].headers["host"] == f"127.0.0.1:{port}"
        assert credentials_sent(upstream.requests[-1]) == {"authorization": "Bearer sk-server"}

        def read(headers: dict) -> int:
            return httpx2.get(f"{url}/v1/offload/{ref}", headers=headers).status_code

        assert read({"authorization": f"Bearer {KEY_A}"}) == 200
        assert read({"authorization": f"Bearer {KEY_A}", "X-Offload-Tenant": "sub"}) == 404  # narrower
        assert read({"authorization": f"Bearer {KEY_B}"}) == 404
        assert read({"authorization": f"Bearer {KEY_B}", "X-Offload-Tenant": "team-a"}) == 404
        assert read({"X-Offload-Tenant": "team-a"}) == 401
        # team-b's own upstream (a host alias of the fake) is used for team-b's key only
        httpx2.get(f"{url}/v1/models", headers={"authorization": f"Bearer {KEY_B}"})
        assert upstream.requests[-1].headers["host"] == f"localhost:{port}"


def test_without_a_server_key_every_credential_header_is_a_namespace(make_proxy, upstream, tmp_path):
    history = agent_history(steps=4)
    with make_proxy(tenants_file=tenants_file(tmp_path)) as url:
        refs = {}
        for name, headers in {
            "azure-1": {"api-key": "azure-key-1"},
            "azure-2": {"api-key": "azure-key-2"},
            "anthropic": {"x-api-key": "sk-ant-1"},
        }.items():
            r = post(url, body=chat(history), headers={**headers, **CHEAP, "X-Offload-Session": "s1"})
            assert r.status_code == 200 and r.headers["x-offload-action"] == "compact"
            assert credentials_sent(upstream.requests[-1]) == headers  # the client's own credential, relayed
            refs[name] = refs_sent(upstream.chat_requests()[-1])[0]
        # equal content, different credentials: different refs, and none readable across
        assert len(set(refs.values())) == 3
        assert httpx2.get(f"{url}/v1/offload/{refs['azure-1']}", headers={"api-key": "azure-key-1"}).status_code == 200
        assert httpx2.get(f"{url}/v1/offload/{refs['azure-1']}", headers={"api-key": "azure-key-2"}).status_code == 404
        events = httpx2.get(f"{url}/v1/offload/events?session=s1", headers={"api-key": "azure-key-2"}).json()["data"]
        assert refs["azure-1"] not in str(events) and refs["azure-2"] in str(events)
        # a tenant with proxy keys cannot be claimed by naming it; a tenant without may be, as before
        r = post(url, body=chat(), headers={"authorization": "Bearer sk-client", "X-Offload-Tenant": "team-a"})
        assert r.status_code == 403 and r.json()["error"]["param"] == "X-Offload-Tenant"
        assert (
            post(url, body=chat(history), key="sk-client", headers={"X-Offload-Tenant": "open"}).headers[
                "x-offload-action"
            ]
            == "compact"
        )


def test_anonymous_only_with_the_flag(make_proxy, upstream):
    with make_proxy() as url:
        r = post(url, body=chat(), headers={})
        assert r.status_code == 401 and "x-api-key" in r.json()["error"]["message"]
        assert openai.OpenAI(base_url=f"{url}/v1", api_key="sk-any", max_retries=0).models.list()
    with make_proxy(allow_anonymous=True) as url:
        history = agent_history(steps=4)
        r = post(url, body=chat(history), headers=CHEAP)
        assert r.status_code == 200 and r.headers["x-offload-action"] == "compact"
        assert credentials_sent(upstream.requests[-1]) == {}
        ref = refs_sent(upstream.chat_requests()[-1])[0]
        assert httpx2.get(f"{url}/v1/offload/{ref}").status_code == 200  # one shared anonymous namespace
        r = httpx2.get(f"{url}/v1/offload/events")
        assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key"
    with make_proxy(allow_anonymous=True, upstream_api_key="sk-server") as url:
        assert post(url, body=chat(), headers={}).status_code == 200
        assert credentials_sent(upstream.requests[-1]) == {"authorization": "Bearer sk-server"}
        assert post(url, body=chat(), headers={"authorization": "Bearer sk-guess"}).status_code == 401


@pytest.mark.parametrize(
    "value",
    [
        "http://a:b:c/",
        "http://[::1/",
        "http://a\tb/v1",
        "http://h:99999/v1",
        "http://user:pw@h/v1",
        "javascript:alert(1)",
        "http://",
        "http://localhost/v1/../../",
        "http://localhost/v1/%2e%2e/x",
        "http://localhost:1234/v1",
    ],
)
def test_malformed_or_unlisted_upstream_header_is_400_everywhere(make_proxy, upstream, value):
    """`localhost` on the allowlist admits its default port only, and no path leaving the base."""
    headers = {"authorization": "Bearer sk-test-key", "X-Offload-Upstream": value}
    with make_proxy(upstream_allowlist=["localhost"]) as url:
        for method, path in (("POST", "/v1/chat/completions"), ("GET", "/v1/models"), ("POST", "/v1/offload")):
            r = httpx2.request(
                method,
                f"{url}{path}",
                headers=headers,
                json={"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]},
            )
            assert r.status_code == 400, (path, r.text)
            assert r.json()["error"]["code"] in ("invalid_upstream", "upstream_not_allowed")
    assert not upstream.requests


def test_placeholder_secrets_and_unsafe_tenants_files_are_refused():
    for name in ("upstream_api_key", "admin_token", "encryption_key"):
        with pytest.raises(ValidationError, match="example value"):
            ServerSettings(**{name: "change-me: a secret"})
    bad = [
        ({"t": {"api_keys": ["change-me-please-now"]}}, "example value"),
        ({"t": {"api_keys": ["short"]}}, "at least"),
        ({"t": {"api_keys": "pk-not-a-list-of-keys"}}, "list"),
        ({"t": {"api_keys": ["sha256:1234"]}}, "64 hex"),
        ({"t": {"upstream_api_key": "sk-unprotected"}}, "needs api_keys"),
        ({"a": {"api_keys": [KEY_A]}, "b": {"api_keys": [KEY_A]}}, "share"),
    ]
    for tenants, message in bad:
        with pytest.raises(ValueError, match=message):
            Gatekeeper(tenants, server_key=None, allow_anonymous=False, upstream_allowlist=[])
    with pytest.raises(ValueError, match="example value"):
        Gatekeeper({}, server_key="change-me", allow_anonymous=False, upstream_allowlist=[])


def test_storage_quota_per_namespace(make_proxy, upstream):
    """POST /v1/offload answers 429 past the quota without storing; chat goes through unreduced."""
    alice, bob = {"authorization": "Bearer sk-alice"}, {"authorization": "Bearer sk-bob"}
    with make_proxy(max_stored_bytes_per_namespace=6000) as url:

        def offload(headers: dict, steps: int, label: str) -> httpx2.Response:
            history = agent_history(steps=steps, system=label)
            for m in history:  # distinct content per call, so each call stores anew
                if m["role"] == "tool":
                    m["content"] = f"{label}\n{m['content']}"
            return httpx2.post(
                f"{url}/v1/offload", json={"model": "gpt-4o", "messages": history}, headers={**headers, **CHEAP}
            )

        first = offload(alice, 2, "one")
        assert first.status_code == 200 and first.json()["refs"]  # ~2 compressed items, under 6000 bytes
        refused = offload(alice, 6, "two")
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "storage_quota_exceeded"
        assert offload(bob, 2, "one").status_code == 200  # the quota is per namespace
        # nothing of the refused request was stored: its refs do not resolve
        r = post(url, body=chat(agent_history(steps=6, system="two")), headers={**alice, **CHEAP})
        assert r.status_code == 200 and "quota" in r.headers["x-offload-warning"]
        assert r.headers["x-offload-action"] == "none" and refs_sent(upstream.chat_requests()[-1]) == []
        kept = first.json()["refs"][0]["ref"]
        assert httpx2.get(f"{url}/v1/offload/{kept}", headers=alice).status_code == 200


def test_invented_client_keys_store_nothing(make_proxy, upstream):
    """Without a server key the client's own key is relayed; one the upstream refuses stores nothing."""

    async def handler(request, rec):
        if rec.headers.get("authorization") == "Bearer sk-invented":
            return JSONResponse(
                {"error": {"message": "Incorrect API key", "type": "invalid_request_error", "code": "invalid_api_key"}},
                status_code=401,
            )
        return JSONResponse(completion("ok") if rec.path.endswith("completions") else {"object": "list", "data": []})

    upstream.handler = handler
    history = agent_history(steps=4)
    with make_proxy() as url:
        r = httpx2.post(
            f"{url}/v1/offload",
            json={"model": "gpt-4o", "messages": history},
            headers={"authorization": "Bearer sk-invented", **CHEAP},
        )
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        r = post(url, body=chat(history), headers={"authorization": "Bearer sk-invented", **CHEAP})
        assert r.status_code == 401  # the upstream's own answer, relayed; nothing was stored for it
        assert refs_sent(upstream.chat_requests()[-1]) == [] and "credential" in r.headers["x-offload-warning"]
        models_asked = len([q for q in upstream.requests if q.path == "/v1/models"])
        assert models_asked == 1  # the refusal is remembered
        ok = post(url, body=chat(history), headers={"authorization": "Bearer sk-real", **CHEAP})
        assert ok.status_code == 200 and ok.headers["x-offload-action"] == "compact"


def test_shared_server_key_relays_only_stateless_endpoints(make_proxy, upstream, tmp_path):
    with make_proxy(upstream_api_key="sk-server", tenants_file=tenants_file(tmp_path)) as url:
        a = {"authorization": f"Bearer {KEY_A}", "OpenAI-Organization": "org-operator"}
        for method, path in (
            ("GET", "files"),
            ("GET", "files/file-of-b/content"),
            ("DELETE", "files/file-of-b"),
            ("GET", "responses/resp_of_b"),
            ("GET", "chat/completions"),
            ("POST", "batches"),
            ("GET", "vector_stores"),
            ("POST", "files"),
            ("GET", "chat%2Fcompletions"),
        ):
            r = httpx2.request(method, f"{url}/v1/{path}", headers=a)
            assert r.status_code == 403 and r.json()["error"]["code"] == "endpoint_not_shared", (method, path)
        assert not upstream.requests
        for method, path in (("GET", "models"), ("GET", "models/gpt-4o"), ("POST", "embeddings")):
            assert httpx2.request(method, f"{url}/v1/{path}", headers=a, json={}).status_code == 200, path
            assert "openai-organization" not in upstream.requests[-1].headers  # the operator's account
        # a compaction of the history sent (relayed to a native upstream) keeps no state either
        r = httpx2.post(
            f"{url}/v1/responses/compact",
            headers={**a, "X-Offload-Context-Management": "relay"},
            json={"model": "gpt-5", "input": "hi"},
        )
        assert r.status_code == 200 and upstream.requests[-1].path == "/v1/responses/compact"
        r = httpx2.post(
            f"{url}/v1/responses/compact",
            headers={**a, "X-Offload-Context-Management": "relay"},
            json={"model": "gpt-5", "previous_response_id": "resp_of_b"},
        )
        assert r.status_code == 403 and r.json()["error"]["param"] == "previous_response_id"
        # a tenant with its own upstream key keeps state in its own account: everything is relayed
        b = {"authorization": f"Bearer {KEY_B}"}
        assert httpx2.get(f"{url}/v1/files", headers=b).status_code == 200
        assert credentials_sent(upstream.requests[-1]) == {"authorization": "Bearer sk-team-b-upstream"}
        # and a proxy key's credential goes only where the tenants file says
        r = httpx2.get(f"{url}/v1/models", headers={**b, "X-Offload-Upstream": "http://127.0.0.1:1/v1"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "upstream_not_allowed"


def test_quota_is_per_tenant_not_per_sub_tenant(make_proxy, upstream, tmp_path):
    with make_proxy(
        upstream_api_key="sk-server", tenants_file=tenants_file(tmp_path), max_stored_bytes_per_namespace=6000
    ) as url:
        stored = 0
        for i in range(6):
            history = agent_history(steps=2, system=f"sub {i}")
            for m in history:
                if m["role"] == "tool":
                    m["content"] = f"sub {i}\n{m['content']}"
            r = httpx2.post(
                f"{url}/v1/offload",
                json={"model": "gpt-4o", "messages": history},
                headers={"authorization": f"Bearer {KEY_A}", "X-Offload-Tenant": f"rot{i}", **CHEAP},
            )
            stored += r.status_code == 200
            assert r.status_code in (200, 429)
        assert 1 <= stored < 6  # fresh sub-tenants do not buy a fresh quota


def test_empty_credentials_never_reach_the_upstream_next_to_the_server_key(make_proxy, upstream):
    with make_proxy(allow_anonymous=True, upstream_api_key="sk-server") as url:
        r = httpx2.get(f"{url}/v1/models", headers={"authorization": "Bearer", "api-key": ""})
        assert r.status_code == 200
        assert upstream.requests[-1].all("authorization") == ["Bearer sk-server"]
        assert "api-key" not in upstream.requests[-1].headers
