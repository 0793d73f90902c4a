"""The usage statistics API through the real proxy: traffic sent with the openai SDK first,
then the API's numbers equal what the responses' X-Offload-* headers said; tenants see only
themselves, the admin token sees all and is never a client credential; windows; paging; a
failing store never fails a request."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import httpx2
import openai

from proxy.offload.tenant import namespace_for
from proxy.stats._recorder import session_keys, sessions_key
from proxy.store.sqlite import SQLiteStore
from tests.harness.history import agent_history
from tests.harness.servers import free_port

ADMIN = "admin-token-for-stats-tests"
KEY_A, KEY_B = "pk-stats-team-a-0001", "pk-stats-team-b-0002"
CLIENT_KEY = "sk-stats-client-key"
CHEAP = {"X-Offload-Max-Total-Tokens": "1000"}


def tenants_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenants.toml"
    path.write_text(f'[tenants.team-a]\napi_keys = ["{KEY_A}"]\n[tenants.team-b]\napi_keys = ["{KEY_B}"]\n')
    return path


def sdk_turn(url: str, key: str, history: list, *, session: str | None = None, stream: bool = False) -> dict[str, str]:
    """One chat completion through the openai SDK; the response's headers."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)
    headers = {**CHEAP, **({"X-Offload-Session": session} if session else {})}
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=history, stream=stream, extra_headers=headers
    )
    parsed = raw.parse()
    if stream:
        list(parsed)
    return dict(raw.headers)


def api(url: str, path: str, key: str, **params) -> httpx2.Response:
    return httpx2.get(f"{url}{path}", params=params, headers={"authorization": f"Bearer {key}"}, timeout=10)


def stats_when(url: str, key: str, requests: int, **params) -> dict:
    """The stats once the recorder has flushed `requests` turns (about a second after them)."""
    deadline = time.monotonic() + 10
    while True:
        r = api(url, "/v1/offload/stats", key, **params)
        assert r.status_code == 200, r.text
        if r.json()["totals"]["requests"] >= requests or time.monotonic() > deadline:
            return r.json()
        time.sleep(0.2)


def test_numbers_equal_what_was_sent(make_proxy, upstream):
    """Turns of one session and one without: totals, series, actions, the session's turns."""
    histories = [agent_history(steps=s) for s in (2, 4, 6)] + [[{"role": "user", "content": "hi"}]]
    with make_proxy() as url:
        sent = [sdk_turn(url, CLIENT_KEY, h, session="run-1") for h in histories]
        sent.append(sdk_turn(url, CLIENT_KEY, agent_history(steps=5), session="run-1", stream=True))
        sent.append(sdk_turn(url, CLIENT_KEY, agent_history(steps=3)))  # no header: a session derived from it
        before = [int(h["x-offload-tokens-before"]) for h in sent]
        after = [int(h["x-offload-tokens-after"]) for h in sent]
        actions = Counter(h["x-offload-action"] for h in sent)
        assert after != before and "compact" in "".join(actions)  # something was offloaded

        body = stats_when(url, CLIENT_KEY, len(sent), window="1h")
        ns = namespace_for("credential", [CLIENT_KEY], None)
        assert body["object"] == "offload.stats" and body["window"] == "1h"
        assert body["tenant"] == ns and body["name"] == ns[:12] and CLIENT_KEY not in str(body)
        totals = body["totals"]
        assert totals["requests"] == len(sent)
        assert totals["tokens_before"] == sum(before) and totals["tokens_after"] == sum(after)
        assert totals["tokens_saved"] == sum(before) - sum(after)
        assert totals["forwarded_ratio"] == round(sum(after) / sum(before), 4)
        assert {k: v for k, v in totals["actions"].items() if v} == dict(actions)
        # the bill as the fake upstream reported it: (10, 5) per answer; its stream reports none
        turn_bill = totals["bill"]["calls"]["turn"]
        assert turn_bill["tokens"] == {
            "uncached": 10 * 5,
            "cache_read": 0,
            "cache_write_5m": 0,
            "cache_write_1h": 0,
            "output": 5 * 5,
        }
        assert turn_bill["answers"] == 5 and turn_bill["answers_without_usage"] == 1
        assert totals["bill"]["turns_without_usage"] == 1 and totals["counterfactual"]["turns"] == 5
        assert turn_bill["usd"]["total"] == round((50 * 2.5 + 25 * 10.0) / 1e6, 6)
        assert totals["counterfactual"]["usd"]["total"] > turn_bill["usd"]["total"]  # the raw history was larger
        assert totals["errors"] == 0 and totals["reload_rounds"] == 0
        series = body["series"]
        assert len(series) <= 60 and series[-1]["t"] <= body["now"] < series[-1]["t"] + 60
        assert sum(p["tokens_before"] for p in series) == sum(before)
        assert sum(p["tokens_after"] for p in series) == sum(after)
        assert body["step"] == 60 and body["from"] == series[0]["t"] and "tenants" not in body

        for window in ("15m", "24h", "7d", "30d"):  # the same turns, read from other buckets
            other = stats_when(url, CLIENT_KEY, len(sent), window=window)
            assert other["totals"] == totals, window
            assert sum(p["tokens_after"] for p in other["series"]) == sum(after)
        quarter = api(url, "/v1/offload/stats", CLIENT_KEY, window="15m").json()  # seconds old: all in it
        assert quarter["step"] == 60 and len(quarter["series"]) == 15 and quarter["to"] - quarter["from"] == 900
        bad = api(url, "/v1/offload/stats", CLIENT_KEY, window="2h")
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_window"
        assert bad.json()["error"]["param"] == "window"

        listing = api(url, "/v1/offload/sessions", CLIENT_KEY).json()
        assert listing["object"] == "list" and listing["total"] == 2 and listing["has_more"] is False
        [row] = [r for r in listing["data"] if r["id"] == "run-1"]
        [auto] = [r for r in listing["data"] if r["id"] != "run-1"]
        assert auto["id"].startswith("auto-") and auto["turns"] == 1 and auto["tokens_before"] == before[5]
        assert row["id"] == "run-1" and row["turns"] == 5 and row["models"] == {"gpt-4o": 5}
        assert row["tokens_before"] == sum(before[:5]) and row["tokens_after"] == sum(after[:5])
        assert row["last_seen"] <= time.time()
        detail = api(url, "/v1/offload/sessions/run-1", CLIENT_KEY).json()
        assert detail["object"] == "offload.session" and detail["id"] == "run-1" and detail["turns_kept"] == 5
        assert [t["tokens_before"] for t in detail["data"]] == before[:5]
        assert [t["tokens_after"] for t in detail["data"]] == after[:5]
        assert [t["action"] for t in detail["data"]] == [h["x-offload-action"] for h in sent[:5]]
        assert [t["refs"] for t in detail["data"]] == [int(h["x-offload-refs"]) for h in sent[:5]]
        assert [t["stream"] for t in detail["data"]] == [False] * 4 + [True]
        assert all(t["model"] == "gpt-4o" and t["route"] == "chat" and t["status"] == 200 for t in detail["data"])
        missing = api(url, "/v1/offload/sessions/run-2", CLIENT_KEY)
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "session_not_found"


def test_reload_rounds_and_searches_are_counted(make_proxy, upstream):
    from starlette.responses import JSONResponse

    from tests.harness.history import refs_sent
    from tests.harness.servers import completion, tool_call

    async def handler(request, rec):
        messages = rec.json()["messages"]
        if messages[-1].get("tool_call_id") == "search_1":
            return JSONResponse(completion("found it"))
        if messages[-1].get("tool_call_id") == "reload_1":
            return JSONResponse(
                completion(None, tool_calls=[tool_call("context_search", {"query": "value=7"}, id="search_1")])
            )
        if refs_sent(rec):
            return JSONResponse(
                completion(None, tool_calls=[tool_call("context_reload", {"ref": refs_sent(rec)[0]}, id="reload_1")])
            )
        return JSONResponse(completion("hi"))

    upstream.handler = handler
    with make_proxy() as url:
        sdk_turn(url, "sk-stats-reloader", agent_history(steps=4), session="reloads")
        totals = stats_when(url, "sk-stats-reloader", 1, window="1h")["totals"]
        assert totals["reload_rounds"] == 2 and totals["searches"] == 1 and totals["reload_rate"] == 2.0
        [turn] = api(url, "/v1/offload/sessions/reloads", "sk-stats-reloader").json()["data"]
        assert turn["reload_rounds"] == 2 and turn["searches"] == 1


def test_tenants_see_themselves_and_the_admin_sees_all(make_proxy, upstream, tmp_path):
    with make_proxy(
        upstream_api_key="sk-server-upstream", tenants_file=tenants_file(tmp_path), admin_token=ADMIN
    ) as url:
        a = [sdk_turn(url, KEY_A, agent_history(steps=4), session="a-run") for _ in range(2)]
        b = [sdk_turn(url, KEY_B, agent_history(steps=3), session="b-run")]
        ns_a, ns_b = (namespace_for("tenant", [name], None) for name in ("team-a", "team-b"))

        mine = stats_when(url, KEY_A, 2, window="1h")
        assert mine["tenant"] == ns_a and mine["name"] == "team-a" and mine["totals"]["requests"] == 2
        assert mine["totals"]["tokens_before"] == sum(int(h["x-offload-tokens-before"]) for h in a)
        assert api(url, "/v1/offload/stats", KEY_A, tenant="team-a").status_code == 200
        assert api(url, "/v1/offload/stats", KEY_A, tenant=ns_a).status_code == 200
        for other in ("team-b", ns_b, "nobody"):
            for path in ("/v1/offload/stats", "/v1/offload/sessions", "/v1/offload/sessions/b-run"):
                refused = api(url, path, KEY_A, tenant=other)
                assert refused.status_code == 403 and refused.json()["error"]["code"] == "tenant_forbidden"
                assert "b-run" not in refused.text
        listing = api(url, "/v1/offload/sessions", KEY_A).json()
        assert [r["id"] for r in listing["data"]] == ["a-run"]
        assert api(url, "/v1/offload/sessions/b-run", KEY_A).status_code == 404  # B's session: not A's

        everyone = stats_when(url, ADMIN, 3, window="24h")
        assert everyone["tenant"] is None and everyone["totals"]["requests"] == 3
        assert everyone["totals"]["tokens_before"] == sum(int(h["x-offload-tokens-before"]) for h in a + b)
        rows = {r["name"]: r for r in everyone["tenants"]}
        assert set(rows) == {"team-a", "team-b"} and rows["team-b"]["tenant"] == ns_b
        assert rows["team-a"]["totals"]["requests"] == 2 and rows["team-b"]["totals"]["requests"] == 1
        assert everyone["recorder"]["dropped"] == 0 and everyone["recorder"]["recorded"] >= 3
        one = api(url, "/v1/offload/stats", ADMIN, window="24h", tenant="team-b").json()
        assert one["tenant"] == ns_b and one["totals"]["requests"] == 1 and "tenants" not in one
        assert api(url, "/v1/offload/stats", ADMIN, tenant=ns_b).json()["totals"]["requests"] == 1
        assert api(url, "/v1/offload/stats", ADMIN, tenant="nobody").status_code == 404
        assert api(url, "/v1/offload/sessions", ADMIN, tenant="team-b").json()["data"][0]["id"] == "b-run"
        assert api(url, "/v1/offload/sessions/b-run", ADMIN, tenant="team-b").json()["turns"] == 1
        needs = api(url, "/v1/offload/sessions", ADMIN)
        assert needs.status_code == 400 and needs.json()["error"]["code"] == "tenant_required"

        # the admin token is no client credential: never relayed, never a namespace
        count = len(upstream.requests)
        for headers in ({"authorization": f"Bearer {ADMIN}"}, {"x-api-key": ADMIN}):
            r = httpx2.post(
                f"{url}/v1/chat/completions", json={"model": "gpt-4o", "messages": []}, headers=headers, timeout=10
            )
            assert r.status_code == 403 and r.json()["error"]["code"] == "admin_token_not_a_credential"
        assert httpx2.get(f"{url}/v1/models", headers={"authorization": f"Bearer {ADMIN}"}).status_code == 403
        assert len(upstream.requests) == count
        assert api(url, "/v1/offload/stats", "pk-wrong-key-000").status_code == 401
        assert httpx2.get(f"{url}/v1/offload/stats").status_code == 401


def test_without_an_admin_token_it_is_a_client_key_like_any(make_proxy, upstream):
    """No --admin-token: nothing is admin; a client key reads its own (empty) namespace."""
    with make_proxy() as url:
        body = api(url, "/v1/offload/stats", "admin-ish-client-key", window="7d").json()
        assert body["tenant"] == namespace_for("credential", ["admin-ish-client-key"], None)
        assert body["totals"]["requests"] == 0 and "tenants" not in body
        assert len(body["series"]) <= 7 * 24 and body["step"] == 3600


def test_admin_token_is_not_relayed_in_client_key_mode(make_proxy, upstream):
    with make_proxy(admin_token=ADMIN) as url:
        r = httpx2.post(
            f"{url}/v1/chat/completions",
            json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
            headers={"authorization": f"Bearer {ADMIN}"},
            timeout=10,
        )
        assert r.status_code == 403 and not upstream.requests
        assert api(url, "/v1/offload/stats", ADMIN).json()["tenant"] is None


def test_sessions_page_fast_with_ten_thousand(make_proxy, upstream, tmp_path):
    data_dir = tmp_path / "store"
    key = "sk-stats-many-sessions"
    ns = namespace_for("credential", [key], None)

    async def fill() -> None:
        store = SQLiteStore(data_dir)
        now = time.time()

        def op(db, _now):
            with db:
                db.executemany(
                    "INSERT INTO ranked VALUES (?, ?, ?, ?)",
                    [(sessions_key(ns), f"s{i:05}", now - 10_000 + i, now + 3600) for i in range(10_000)],
                )
                db.executemany(
                    "INSERT INTO hashes VALUES (?, ?, ?, ?)",
                    [(session_keys(ns, f"s{i:05}")[1], "requests", i % 7 + 1, now + 3600) for i in range(10_000)],
                )

        await store._run(op)
        await store.close()

    asyncio.run(fill())
    with make_proxy(data_dir=data_dir) as url:
        sdk_turn(url, key, agent_history(steps=2), session="s-live")
        deadline = time.monotonic() + 10
        while api(url, "/v1/offload/sessions", key).json()["total"] < 10_001 and time.monotonic() < deadline:
            time.sleep(0.2)
        seen: list[str] = []
        for offset in (0, 50, 5_000, 9_990):
            page = api(url, "/v1/offload/sessions", key, limit=50, offset=offset).json()
            assert page["total"] == 10_001 and page["offset"] == offset and page["limit"] == 50
            seen += [r["id"] for r in page["data"]]
        assert seen[0] == "s-live" and seen[1] == "s09999" and seen[50] == "s09950"  # last active first
        assert seen[100] == "s05000" and seen[-1] == "s00000" and len(seen) == 50 + 50 + 50 + 11
        last = api(url, "/v1/offload/sessions", key, limit=50, offset=9_990).json()
        assert last["has_more"] is False and len(last["data"]) == 11
        assert api(url, "/v1/offload/sessions", key, limit=5).json()["has_more"] is True
        row = api(url, "/v1/offload/sessions", key, limit=1, offset=1).json()["data"][0]
        assert row["id"] == "s09999" and row["turns"] == 9_999 % 7 + 1
        for bad in ({"limit": "0"}, {"limit": "501"}, {"offset": "-1"}, {"limit": "x"}):
            r = api(url, "/v1/offload/sessions", key, **bad)
            assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_parameter"


def test_a_failing_store_never_fails_a_request(make_proxy, upstream):
    dead = f"redis://127.0.0.1:{free_port()}/0"
    with make_proxy(redis_url=dead, store_timeout=0.2, admin_token=ADMIN) as url:
        for _ in range(3):
            headers = sdk_turn(url, "sk-stats-no-store", agent_history(steps=3), session="lost")
            assert "store unavailable" in headers["x-offload-warning"]
        time.sleep(1.5)  # a flush: refused by the store, dropped
        r = api(url, "/v1/offload/stats", "sk-stats-no-store")
        assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable"
        assert api(url, "/v1/offload/sessions", "sk-stats-no-store").status_code == 503
        assert sdk_turn(url, "sk-stats-no-store", [{"role": "user", "content": "still fine"}])


def test_a_key_without_a_tenants_file_name_may_name_itself_as_the_api_names_it(make_proxy, upstream):
    """Its `name` is its namespace's first 12 digits: `tenant=<name>` reads itself; another's is refused."""
    with make_proxy() as url:
        sdk_turn(url, CLIENT_KEY, agent_history(steps=2), session="mine")
        sdk_turn(url, "sk-someone-else-0001", agent_history(steps=2), session="theirs")
        me = stats_when(url, CLIENT_KEY, 1, window="1h")
        assert me["name"] == me["tenant"][:12]
        assert api(url, "/v1/offload/stats", CLIENT_KEY, tenant=me["name"]).json()["totals"]["requests"] == 1
        assert [r["id"] for r in api(url, "/v1/offload/sessions", CLIENT_KEY, tenant=me["name"]).json()["data"]] == [
            "mine"
        ]
        other = namespace_for("credential", ["sk-someone-else-0001"], None)
        for name in (other[:12], other):
            assert api(url, "/v1/offload/sessions", CLIENT_KEY, tenant=name).status_code == 403


def test_client_keys_are_labelled_by_their_fingerprint_only(make_proxy, upstream):
    """Client-key mode: a tenant is a hash of its key, so the API labels it with the key's
    vendor prefix and last 4 characters; the admin sees every label, a tenant its own only, and no
    answer holds more of a key."""
    proj, ant = "sk-proj-" + "Zq4r" * 12 + "AbCd", "sk-ant-api03-" + "Lm7p" * 12 + "WXYZ"
    with make_proxy(admin_token=ADMIN) as url:
        sdk_turn(url, proj, agent_history(steps=2), session="p")
        sdk_turn(url, ant, agent_history(steps=2), session="a")
        sdk_turn(url, "sk-short-0001", agent_history(steps=2), session="s")
        stats_when(url, ADMIN, 3, window="1h")
        time.sleep(1.2)  # the sessions are written after the buckets
        everything = api(url, "/v1/offload/stats", ADMIN, window="1h").json()
        assert everything["first_seen"] <= everything["now"] < everything["first_seen"] + 3600
        labels = sorted(r["label"] for r in everything["tenants"])
        short = namespace_for("credential", ["sk-short-0001"], None)
        assert labels == sorted(["sk-proj…AbCd", "sk-ant…WXYZ", short[:12]])
        mine = api(url, "/v1/offload/stats", proj, window="1h").json()
        assert mine["label"] == "sk-proj…AbCd" and mine["name"] == mine["tenant"][:12] and "tenants" not in mine
        assert api(url, "/v1/offload/sessions", proj).json()["label"] == "sk-proj…AbCd"
        assert api(url, "/v1/offload/sessions/p", proj).json()["label"] == "sk-proj…AbCd"
        one = api(url, "/v1/offload/stats", ADMIN, window="1h", tenant=mine["tenant"]).json()
        assert one["label"] == "sk-proj…AbCd"
        answers = [
            api(url, path, key, **params).text
            for path, key, params in [
                ("/v1/offload/stats", ADMIN, {"window": "1h"}),
                ("/v1/offload/stats", proj, {}),
                ("/v1/offload/stats", ant, {"window": "7d"}),
                ("/v1/offload/sessions", ant, {}),
                ("/v1/offload/sessions/a", ant, {}),
            ]
        ]
        for text in answers:
            for key in (proj, ant):
                assert key[:9] not in text and key[-5:] not in text and key[12:-4] not in text
        assert "AbCd" not in "".join(answers[2:])  # the other tenant's label


def test_a_key_fingerprint_is_sealed_at_rest_with_an_encryption_key(make_proxy, upstream, tmp_path):
    key = "sk-proj-" + "Tn5c" * 12 + "QrSt"
    with make_proxy(data_dir=tmp_path, encryption_key="labels at rest are sealed too", admin_token=ADMIN) as url:
        sdk_turn(url, key, agent_history(steps=2), session="s")
        stats_when(url, key, 1, window="1h")
        assert api(url, "/v1/offload/stats", key, window="1h").json()["label"] == "sk-proj…QrSt"
        assert [r["label"] for r in api(url, "/v1/offload/stats", ADMIN, window="1h").json()["tenants"]] == [
            "sk-proj…QrSt"
        ]
    dump = b"".join(path.read_bytes() for path in tmp_path.glob("offload.sqlite3*"))
    assert b":stats:label" in dump and b"QrSt" not in dump
