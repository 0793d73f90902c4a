"""WebSocket turns in the proxy's observability, as HTTP turns are: one access log line per
`response.create` saying `"transport":"websocket"` (none on an HTTP turn), each turn in the
statistics and the dashboard's sessions (a conversation one session, whether its turns came over
HTTP, over the WebSocket as `previous_response_id` continuations, or both), and its session
detail naming the transport of every turn."""

from __future__ import annotations

import json
import logging
import time
import uuid

import httpx2

from tests.e2e.test_stats_sessions import derived, sessions, totals
from tests.harness.requests import post
from tests.harness.websocket import Socket, completed, texts

ADMIN = "admin-secret-token-0123456789"


def user(text: str) -> dict:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def test_the_access_log_names_the_websocket_transport(make_proxy, upstream, key, caplog):
    caplog.set_level(logging.INFO, logger="proxy.access")
    with make_proxy() as url:
        with Socket(url, key) as ws:
            one = completed(ws.create(input=[user("one")], store=False))
            completed(ws.create(input=[user("two")], store=False, previous_response_id=one["id"], stream=False))
            [refused] = ws.create(input=[user("three")], store=False, previous_response_id="resp_gone")
            [bad] = ws.create(input=[{"type": "compaction_trigger"}])  # nothing to compact: the route's 400
        assert post(url, "/v1/responses", key=key, body={"model": "gpt-5", "input": [user("over http")]}).is_success
        deadline = time.monotonic() + 10
        while len(lines := [json.loads(r.getMessage()) for r in caplog.records if r.name == "proxy.access"]) < 4:
            assert time.monotonic() < deadline, lines
            time.sleep(0.05)
    assert refused["error"]["code"] == "previous_response_not_found"  # answered by the connection: no request
    assert bad["status"] == 400
    ws_one, ws_two, ws_bad, http = lines
    for line in (ws_one, ws_two, ws_bad):
        assert (line["route"], line["method"], line["path"], line["transport"]) == (
            "responses",
            "POST",
            "/v1/responses",
            "websocket",
        )
    for line in (ws_one, ws_two):  # streaming is implied on the WebSocket, whatever the event says
        assert line["stream"] is True and line["tenant"] == http["tenant"]
    assert (ws_one["status"], ws_two["status"], ws_bad["status"]) == (200, 200, 400)
    assert ws_two["tokens_before"] > ws_one["tokens_before"]  # the whole history, as expanded
    assert http["route"] == "responses" and http["status"] == 200 and "transport" not in http


def test_websocket_turns_are_sessions_and_statistics_like_http_ones(proxy_url, upstream, key):
    # over the WebSocket: one conversation continued by previous_response_id, one sent whole each turn
    with Socket(proxy_url, key) as ws:
        previous = None
        for turn in range(3):
            step = ws.create(
                input=[user("plan the migration" if turn == 0 else f"go on {turn}")],
                store=False,
                **({"previous_response_id": previous} if previous else {}),
            )
            previous = completed(step)["id"]
        items = [user("review the diff")]
        for turn in range(3):
            answer = completed(ws.create(input=items, store=False, instructions="You are Codex."))
            items += [
                {"role": "assistant", "content": [{"type": "output_text", "text": texts(answer)[0]}]},
                user(f"next {turn}"),
            ]
    rows = sessions(proxy_url, key, 6)
    assert derived(rows) == [3, 3]
    assert totals(proxy_url, key)["requests"] == 6
    detail = httpx2.get(
        f"{proxy_url}/v1/offload/sessions/{rows[0]['id']}", headers={"authorization": f"Bearer {key}"}, timeout=10
    ).json()
    assert [(t["route"], t["transport"], t["stream"], t["status"]) for t in detail["data"]] == [
        ("responses", "websocket", True, 200)
    ] * 3

    # a conversation begun over HTTP and continued over the WebSocket (as after a reconnect) is one session
    other = f"sk-{uuid.uuid4().hex}"
    items = [user("fix the flaky test")]
    answer = post(proxy_url, "/v1/responses", key=other, body={"model": "gpt-5", "input": items, "store": False}).json()
    items += [
        {"role": "assistant", "content": [{"type": "output_text", "text": answer["output"][0]["content"][0]["text"]}]},
        user("and now?"),
    ]
    with Socket(proxy_url, other) as ws:
        completed(ws.create(input=items, store=False))
    [row] = sessions(proxy_url, other, 2)
    assert row["turns"] == 2
    detail = httpx2.get(
        f"{proxy_url}/v1/offload/sessions/{row['id']}", headers={"authorization": f"Bearer {other}"}, timeout=10
    ).json()
    assert [t["transport"] for t in detail["data"]] == ["http", "websocket"]


def test_the_admin_sees_websocket_turns_in_the_tenants_statistics(make_proxy, upstream, key):
    with make_proxy(admin_token=ADMIN) as url:
        with Socket(url, key) as ws:
            for text in ("one", "two"):
                completed(ws.create(input=[user(text)], store=False))
        assert post(url, "/v1/responses", key=key, body={"model": "gpt-5", "input": [user("three")]}).is_success
        admin = {"Authorization": f"Bearer {ADMIN}"}
        deadline = time.monotonic() + 10
        while (
            stats := httpx2.get(f"{url}/v1/offload/stats", params={"window": "1h"}, headers=admin, timeout=10).json()
        )["totals"]["requests"] < 3:
            assert time.monotonic() < deadline, stats["totals"]
            time.sleep(0.2)
        # the dashboard's tenants table and its sessions view read these: the WebSocket turns counted
        [tenant] = stats["tenants"]
        assert tenant["totals"]["requests"] == 3
        listing = httpx2.get(
            f"{url}/v1/offload/sessions", params={"tenant": tenant["tenant"]}, headers=admin, timeout=10
        ).json()
        assert sorted(row["turns"] for row in listing["data"]) == [1, 1, 1]
