"""Attacks on the usage statistics through the real proxy: values a client chooses (session ids,
model names, credentials the upstream refuses, no credential at all) must neither fail the
recorder's flush for other tenants, nor take the store down, nor hide a session from its
owner, nor make the statistics grow for callers the upstream never accepted."""

from __future__ import annotations

import time
from pathlib import Path

import httpx2
from starlette.responses import JSONResponse

from proxy.offload.tenant import namespace_for
from tests.harness.requests import post

ADMIN = "admin-token-for-stats-attacks"
KEY_A, KEY_B = "pk-attack-team-a-0001", "pk-attack-team-b-0002"


def tenants_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenants.toml"
    path.write_text(f'[tenants.team-a]\napi_keys = ["{KEY_A}"]\n[tenants.team-b]\napi_keys = ["{KEY_B}"]\n')
    return path


def chat_body(*, model: str = "gpt-4o", raw_model: str | None = None) -> bytes:
    """A chat completion's body; `raw_model` is spliced into the JSON text as it is (escapes and all)."""
    model_json = f'"{raw_model}"' if raw_model is not None else f'"{model}"'
    return ('{"model": ' + model_json + ', "messages": [{"role": "user", "content": "hi"}]}').encode()


def api(url: str, path: str, token: str | None, **params) -> httpx2.Response:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx2.get(f"{url}{path}", params=params, headers=headers, timeout=10)


def admin_stats_when(url: str, requests: int) -> dict:
    deadline = time.monotonic() + 10
    while (body := api(url, "/v1/offload/stats", ADMIN, window="1h").json())["totals"]["requests"] < requests:
        assert time.monotonic() < deadline, body["totals"]
        time.sleep(0.2)
    time.sleep(1.5)  # one more flush: the sessions are written after the buckets
    return api(url, "/v1/offload/stats", ADMIN, window="1h").json()


def test_a_session_id_extending_another_neither_collides_nor_takes_the_store_down(
    make_proxy, upstream, tmp_path, redis_url
):
    """`x` and `x:turns` are two sessions: the totals of one were the turns list of the other, a
    Redis WRONGTYPE error that failed every flush holding it and marked the store unavailable
    for every tenant, again at each read of that session."""
    with make_proxy(
        redis_url=redis_url,
        upstream_api_key="sk-server-upstream",
        admin_token=ADMIN,
        tenants_file=tenants_file(tmp_path),
    ) as url:
        tag = f"collide-{time.time_ns()}"
        assert post(url, body=chat_body(), key=KEY_A, headers={"X-Offload-Session": tag}).status_code == 200
        admin_stats_when(url, 1)
        assert post(url, body=chat_body(), key=KEY_A, headers={"X-Offload-Session": f"{tag}:turns"}).status_code == 200
        assert post(url, body=chat_body(), key=KEY_B, headers={"X-Offload-Session": "victim"}).status_code == 200
        body = admin_stats_when(url, 3)
        assert body["recorder"]["flush_failures"] == 0 and body["recorder"]["dropped"] == 0, body["recorder"]
        for session in (tag, f"{tag}:turns"):
            r = api(url, f"/v1/offload/sessions/{session}", KEY_A)
            assert r.status_code == 200 and r.json()["turns"] == 1, r.text
        ids = [row["id"] for row in api(url, "/v1/offload/sessions", KEY_A).json()["data"]]
        assert {tag, f"{tag}:turns"} <= set(ids)
        assert api(url, "/v1/offload/sessions/victim", KEY_B).json()["turns"] == 1
        assert api(url, "/v1/offload/stats", ADMIN).json()["health"]["store"] is True


def test_a_session_id_with_a_slash_opens(make_proxy, upstream, tmp_path):
    """X-Offload-Session admits `/`: such a session is listed, so its drill-down must answer it
    (it fell through to the relay: 403 for a proxy key, and 403 for the admin token, which the
    page took for a revoked token and signed out). A crafted `..%2F` id stays a session lookup."""
    with make_proxy(
        upstream_api_key="sk-server-upstream", admin_token=ADMIN, tenants_file=tenants_file(tmp_path)
    ) as url:
        assert post(url, body=chat_body(), key=KEY_A, headers={"X-Offload-Session": "team/run-1"}).status_code == 200
        admin_stats_when(url, 1)
        assert [row["id"] for row in api(url, "/v1/offload/sessions", KEY_A).json()["data"]] == ["team/run-1"]
        for token, params in ((KEY_A, {}), (ADMIN, {"tenant": "team-a"})):
            r = api(url, "/v1/offload/sessions/team%2Frun-1", token, **params)
            assert r.status_code == 200 and r.json()["id"] == "team/run-1", r.text
        count = len(upstream.requests)
        for token, params in ((KEY_A, {}), (ADMIN, {"tenant": "team-a"})):
            r = api(url, "/v1/offload/sessions/..%2F..%2Fmodels", token, **params)
            assert r.status_code == 404 and r.json()["error"]["code"] == "session_not_found", r.text
        assert len(upstream.requests) == count  # nothing relayed


def test_a_model_name_the_store_cannot_encode_loses_no_other_turn(make_proxy, upstream, tmp_path):
    """A lone surrogate in `model` (valid JSON) failed the whole flush: every tenant's turns of
    that second were counted dropped, and the turns waiting for a response id were lost."""
    with make_proxy(
        upstream_api_key="sk-server-upstream", admin_token=ADMIN, tenants_file=tenants_file(tmp_path)
    ) as url:
        assert (
            post(
                url, body=chat_body(raw_model="gpt\\ud800-x"), key=KEY_A, headers={"X-Offload-Session": "odd-model"}
            ).status_code
            == 200
        )
        assert post(url, body=chat_body(), key=KEY_B, headers={"X-Offload-Session": "innocent"}).status_code == 200
        body = admin_stats_when(url, 2)
        assert body["recorder"]["flush_failures"] == 0 and body["recorder"]["dropped"] == 0, body["recorder"]
        odd = api(url, "/v1/offload/sessions/odd-model", KEY_A)
        assert odd.status_code == 200 and list(odd.json()["models"]) == ["gpt\ufffd-x"], odd.text
        assert api(url, "/v1/offload/sessions/innocent", KEY_B).json()["turns"] == 1


def test_a_credential_the_upstream_refuses_leaves_no_statistics(make_proxy, upstream):
    """Client-key mode: any string is a credential, and each is a namespace. Turns the upstream
    refused (401/403) were recorded, so anyone could add tenants by the thousand to the admin's
    tenants table (read whole on every refresh) and fill the store, without a valid key."""

    async def handler(request, rec):
        if rec.headers.get("authorization") != "Bearer sk-good-client-key":
            return JSONResponse({"error": {"message": "Incorrect API key", "code": "invalid_api_key"}}, status_code=401)
        return JSONResponse(
            {
                "id": "c1",
                "object": "chat.completion",
                "model": "gpt-4o",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            }
        )

    upstream.handler = handler
    with make_proxy(admin_token=ADMIN) as url:
        for i in range(5):
            assert (
                post(url, body=chat_body(), key=f"sk-made-up-{i}", headers={"X-Offload-Session": "spam"}).status_code
                == 401
            )
        assert (
            post(url, body=chat_body(), key="sk-good-client-key", headers={"X-Offload-Session": "real"}).status_code
            == 200
        )
        body = admin_stats_when(url, 1)
        good = namespace_for("credential", ["sk-good-client-key"], None)
        assert [row["tenant"] for row in body["tenants"]] == [good] and body["totals"]["requests"] == 1
        made_up = api(url, "/v1/offload/stats", "sk-made-up-0", window="1h").json()
        assert made_up["totals"]["requests"] == 0


def test_anonymous_callers_list_no_statistics(make_proxy, upstream):
    """Anonymous clients share one namespace: as with events, listing its sessions (their ids,
    models and times are other clients') needs a credential."""
    with make_proxy(allow_anonymous=True, admin_token=ADMIN) as url:
        assert (
            post(url, body=chat_body(), key=None, headers={"X-Offload-Session": "someone-elses-run"}).status_code == 200
        )
        admin_stats_when(url, 1)
        for path in ("/v1/offload/stats", "/v1/offload/sessions", "/v1/offload/sessions/someone-elses-run"):
            r = api(url, path, None)
            assert r.status_code == 401 and r.json()["error"]["code"] == "missing_api_key", r.text
            assert "someone-elses-run" not in r.text


def test_a_session_lists_its_most_used_models_only(make_proxy, upstream):
    """`model` is the client's string: a session sent with a new model each turn listed them all,
    in every row of the sessions page (500 a page) and in one cell of the dashboard."""
    with make_proxy() as url:
        for i in range(14):
            assert (
                post(
                    url,
                    body=chat_body(model=f"model-{i:02d}"),
                    key="sk-many-models",
                    headers={"X-Offload-Session": "zoo"},
                ).status_code
                == 200
            )
        for _ in range(3):
            assert (
                post(
                    url, body=chat_body(model="model-13"), key="sk-many-models", headers={"X-Offload-Session": "zoo"}
                ).status_code
                == 200
            )
        deadline = time.monotonic() + 10
        while (row := api(url, "/v1/offload/sessions", "sk-many-models").json()["data"]) == [] or row[0]["turns"] < 17:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        [row] = row
        assert len(row["models"]) == 8 and row["models"]["model-13"] == 4 and row["models_other"] == 6, row
        detail = api(url, "/v1/offload/sessions/zoo", "sk-many-models").json()
        assert len(detail["models"]) == 8 and detail["models_other"] == 6


def test_sub_tenants_by_the_thousand_leave_the_tenants_table_bounded(make_proxy, upstream, tmp_path, monkeypatch):
    """Each X-Offload-Tenant value is a namespace of its own: the admin's table lists the tenants
    with most raw tokens (`MAX_TENANT_ROWS`) and says there were more."""
    from proxy.stats import _reader as reader

    monkeypatch.setattr(reader, "MAX_TENANT_ROWS", 3)
    with make_proxy(
        upstream_api_key="sk-server-upstream", admin_token=ADMIN, tenants_file=tenants_file(tmp_path)
    ) as url:
        for i in range(6):
            r = httpx2.post(
                f"{url}/v1/chat/completions",
                headers={"authorization": f"Bearer {KEY_A}", "X-Offload-Tenant": f"sub-{i}"},
                timeout=20,
                json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi " * (20 * (i + 1))}]},
            )
            assert r.status_code == 200
        body = admin_stats_when(url, 6)
        subs = [namespace_for("tenant", ["team-a"], f"sub-{i}") for i in (5, 4, 3)]
        assert [row["tenant"] for row in body["tenants"]] == subs and body["tenants_truncated"] is True
        assert api(url, "/v1/offload/stats", ADMIN, window="30d").json()["tenants_truncated"] is True
