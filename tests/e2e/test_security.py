"""Security: who picks the upstream, encryption at rest, credentials never stored."""

from __future__ import annotations

import sqlite3

import httpx2
import openai
import pytest

from tests.harness.history import agent_history, refs_sent
from tests.harness.requests import post

SECRET = "sk-never-store-this-credential"
AUTH = {"authorization": "Bearer sk-client"}


def test_per_request_upstream_only_from_the_allowlist(make_proxy, upstream):
    port = upstream.url.rsplit(":", 1)[1]
    alias = f"http://localhost:{port}/v1"  # the same fake upstream under another host name
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    with make_proxy() as url:
        r = httpx2.post(f"{url}/v1/chat/completions", json=body, headers={"X-Offload-Upstream": alias, **AUTH})
        assert r.status_code == 400 and r.json()["error"]["code"] == "upstream_not_allowed"
        r = httpx2.get(f"{url}/v1/models", headers={"X-Offload-Upstream": "http://evil.example/v1", **AUTH})
        assert r.status_code == 400
        assert not upstream.requests
    with make_proxy(upstream_allowlist=[f"localhost:{port}"]) as url:
        r = httpx2.post(f"{url}/v1/chat/completions", json=body, headers={"X-Offload-Upstream": alias, **AUTH})
        assert r.status_code == 200 and upstream.requests[-1].headers["host"] == f"localhost:{port}"
        r = httpx2.post(
            f"{url}/v1/chat/completions", json=body, headers={"X-Offload-Upstream": "ftp://localhost/x", **AUTH}
        )
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_upstream"
        assert "x-offload-upstream" not in upstream.requests[-1].headers


def test_tenant_upstream_from_the_tenants_file(make_proxy, upstream, tmp_path):
    port = upstream.url.rsplit(":", 1)[1]
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(f'[tenants.acme]\nupstream = "http://localhost:{port}/v1"\n')
    with make_proxy(tenants_file=tenants) as url:
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        c.models.list(extra_headers={"X-Offload-Tenant": "acme"})
        assert upstream.requests[-1].headers["host"] == f"localhost:{port}"
        c.models.list()
        assert upstream.requests[-1].headers["host"] == f"127.0.0.1:{port}"


def offload_history(url: str, history: list) -> str:
    r = post(
        url,
        json={"model": "gpt-4o", "messages": history},
        key=SECRET,
        headers={"X-Offload-Max-Total-Tokens": "1000"},
        timeout=5,  # httpx2's default, as this request had
    )
    assert r.status_code == 200
    return r.headers["x-offload-refs"]


def test_encryption_at_rest(make_proxy, upstream, tmp_path):
    history = agent_history(steps=4)
    with make_proxy(data_dir=tmp_path, encryption_key="correct horse battery staple") as url:
        assert offload_history(url, history) == "3"
        ref = refs_sent(upstream.chat_requests()[-1])[0]
        ok = httpx2.get(f"{url}/v1/offload/{ref}", headers={"authorization": f"Bearer {SECRET}"})
        assert ok.json()["content"] == history[3]["content"]
    raw = b"".join(row[0] for row in sqlite3.connect(tmp_path / "offload.sqlite3").execute("SELECT value FROM kv"))
    assert b"step0 line" not in raw and SECRET.encode() not in raw
    for key in (None, "another key"):
        with make_proxy(data_dir=tmp_path, encryption_key=key) as url:
            r = httpx2.get(f"{url}/v1/offload/{ref}", headers={"authorization": f"Bearer {SECRET}"})
            assert r.status_code == 404  # sealed content does not open without its key


@pytest.mark.parametrize("backend", ["embedded", "redis"])
def test_credentials_are_never_stored(make_proxy, upstream, tmp_path, backend, request):
    import redis

    options = {"data_dir": tmp_path} if backend == "embedded" else {"redis_url": request.getfixturevalue("redis_url")}
    with make_proxy(**options) as url:
        offload_history(url, agent_history(steps=4))
        httpx2.get(f"{url}/v1/offload/events", headers={"authorization": f"Bearer {SECRET}"})
    if backend == "embedded":
        dump = (tmp_path / "offload.sqlite3").read_bytes()
        for extra in tmp_path.glob("offload.sqlite3-*"):
            dump += extra.read_bytes()
    else:
        client = redis.Redis.from_url(options["redis_url"])
        dump = b"".join(k + (client.dump(k) or b"") for k in client.scan_iter("off:*"))
    assert dump and SECRET.encode() not in dump and b"never-store" not in dump


def test_a_per_request_upstream_that_is_an_endpoint_is_a_400_saying_what_to_give(make_proxy, upstream):
    port = upstream.url.rsplit(":", 1)[1]
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    with make_proxy(upstream_allowlist=[f"localhost:{port}"]) as url:
        r = httpx2.post(
            f"{url}/v1/chat/completions",
            json=body,
            headers={"X-Offload-Upstream": f"http://localhost:{port}/v1/chat/completions", **AUTH},
        )
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_upstream"
        assert f"drop '/chat/completions', i.e. give http://localhost:{port}/v1" in r.json()["error"]["message"]
        assert not upstream.requests
