"""The holdout end to end (`--holdout`): a control session's requests go upstream byte for byte as
the client sent them, in every format, streamed and not, over HTTP and the Responses WebSocket;
a managed session's are offloaded; every turn is recorded in its session's arm, and the
statistics API compares the arms, saying when there are too few sessions to tell and finding a
difference the sessions have."""

from __future__ import annotations

import gzip
import json
import time
import uuid

import httpx2
import pytest

from proxy.core.settings import arm
from proxy.replay._runner import requests_of
from tests.harness.history import agent_history
from tests.harness.websocket import Socket, completed

SMALL = {"X-Offload-Max-Total-Tokens": "1500"}
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01", "content-type": "application/json"}
ROUTES = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "anthropic": "/v1/messages"}


def body_of(format: str, *, stream: bool, steps: int = 6) -> dict:
    messages = agent_history(steps=steps, lines=200)
    messages.append({"role": "assistant", "content": "done"})
    requests, _ = requests_of({"messages": messages}, format)
    items = requests[-1]
    if format == "chat":
        return {"model": "gpt-4o", "messages": items, "stream": stream}
    if format == "responses":
        return {"model": "gpt-4o", "input": items, "stream": stream}
    system = [m["content"] for m in messages if m["role"] == "system"][0]
    return {"model": "claude-sonnet-4-5", "max_tokens": 256, "system": system, "messages": items, "stream": stream}


def auth(format: str, key: str) -> dict[str, str]:
    if format == "anthropic":
        return {"x-api-key": key, **ANTHROPIC_HEADERS}
    return {"authorization": f"Bearer {key}", "content-type": "application/json"}


def sent_of(upstream, format: str) -> list:
    return {
        "chat": upstream.chat_requests,
        "responses": upstream.responses_requests,
        "anthropic": upstream.messages_requests,
    }[format]()


def namespace_of(url: str, key: str, **headers: str) -> str:
    r = httpx2.get(f"{url}/v1/offload/stats", headers={"authorization": f"Bearer {key}", **headers}, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["tenant"]


def sessions_in(namespace: str, fraction: float, wanted: str, count: int, *, salt: str = "") -> list[str]:
    """`count` session ids the holdout puts in arm `wanted`."""
    found: list[str] = []
    i = 0
    while len(found) < count:
        name = f"s-{i}"
        if arm(namespace, name, fraction, salt=salt) == wanted:
            found.append(name)
        i += 1
    return found


def holdout_of(url: str, key: str, *, sessions: int, turns: int = 0, timeout: float = 20, **headers: str) -> dict:
    """The holdout section once it counts `sessions` sessions and `turns` turns (written within
    a second or so: a session's later turn may come in a flush after its first)."""
    deadline = time.monotonic() + timeout
    while True:
        r = httpx2.get(
            f"{url}/v1/offload/stats",
            params={"window": "1h"},
            headers={"authorization": f"Bearer {key}", **headers},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        section = r.json()["holdout"]
        arms = section["arms"].values()
        if (
            sum(a["sessions"] for a in arms) >= sessions and sum(a["turns"] for a in arms) >= turns
        ) or time.monotonic() > deadline:
            return section
        time.sleep(0.3)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("format", ["chat", "responses", "anthropic"])
def test_control_goes_up_as_sent_managed_is_offloaded_and_both_are_recorded(make_proxy, upstream, format, stream):
    key = f"sk-{uuid.uuid4().hex}"
    # odd spacing, escapes and key order: what goes up is these bytes, not an equal JSON
    raw = json.dumps(body_of(format, stream=stream), indent=1, ensure_ascii=True).encode()
    with make_proxy(holdout=0.5) as url:
        namespace = namespace_of(url, key)
        [control] = sessions_in(namespace, 0.5, "control", 1)
        [managed] = sessions_in(namespace, 0.5, "managed", 1)
        r = httpx2.post(
            url + ROUTES[format],
            content=raw,
            headers={**auth(format, key), **SMALL, "X-Offload-Session": control},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        sent = sent_of(upstream, format)
        assert [s.body for s in sent] == [raw]  # byte for byte: no reload tools, no caching, no summary
        assert not any(name.lower().startswith("x-offload") for name in r.headers)
        upstream.requests.clear()

        r = httpx2.post(
            url + ROUTES[format],
            content=raw,
            headers={**auth(format, key), **SMALL, "X-Offload-Session": managed},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        [first, *_] = sent_of(upstream, format)
        assert len(first.body) < len(raw) / 2 and b"ref=" in first.body  # offloaded
        assert "compact" in r.headers["x-offload-action"]

        section = holdout_of(url, key, sessions=2)
    assert section["fraction"] == 0.5
    assert section["arms"] == {"control": {"sessions": 1, "turns": 1}, "managed": {"sessions": 1, "turns": 1}}
    assert not section["enough"] and section["verdict"].startswith("Too few sessions to tell: 1 control and 1 managed")
    figures = {f["figure"]: f for f in section["figures"]}
    assert figures["tokens_forwarded"]["managed"] < figures["tokens_forwarded"]["control"] / 2
    assert figures["ended"]["control"] == figures["ended"]["managed"] == 1.0  # each answer finished normally
    assert figures["repeated_calls"]["control"] == 0
    assert all(f["verdict"] == "too few sessions" for f in figures.values())


def test_the_responses_websocket_control_turn_goes_up_as_the_event_built_it(make_proxy, upstream):
    key = f"sk-{uuid.uuid4().hex}"
    body = body_of("responses", stream=False)
    del body["stream"]
    with make_proxy(holdout=0.5) as url:
        namespace = namespace_of(url, key)
        [control] = sessions_in(namespace, 0.5, "control", 1)
        [managed] = sessions_in(namespace, 0.5, "managed", 1)
        with Socket(url, key, headers={**SMALL, "X-Offload-Session": control}, timeout=30) as ws:
            answer = completed(ws.create(**body))
        assert answer["status"] == "completed"
        [sent] = upstream.responses_requests()
        assert json.loads(sent.body) == {**body, "stream": True}  # as the event asked: nothing added
        assert b"context_reload" not in sent.body and b"ref=" not in sent.body
        upstream.requests.clear()
        with Socket(url, key, headers={**SMALL, "X-Offload-Session": managed}, timeout=30) as ws:
            completed(ws.create(**body))
        [first, *_] = upstream.responses_requests()
        assert b"ref=" in first.body
        section = holdout_of(url, key, sessions=2)
    assert section["arms"] == {"control": {"sessions": 1, "turns": 1}, "managed": {"sessions": 1, "turns": 1}}


def test_a_header_cannot_choose_the_arm_and_a_bad_one_is_refused(make_proxy, upstream):
    key = f"sk-{uuid.uuid4().hex}"
    body = body_of("chat", stream=False, steps=1)
    with make_proxy(holdout=0.1) as url:
        for value, status in (
            ("0.1", 200),
            ("0", 400),
            ("0.9", 400),
            ("1", 400),
            ("-0.5", 400),
            ("lots", 400),
            ("x" * 300, 400),
        ):
            r = httpx2.post(
                url + ROUTES["chat"], json=body, headers={**auth("chat", key), "X-Offload-Holdout": value}, timeout=30
            )
            assert r.status_code == status, (value, r.text)
            if status == 400:
                error = r.json()["error"]
                assert error["param"] == "X-Offload-Holdout" and "holdout" in error["message"].lower()


def totals_of(url: str, key: str, *, requests: int, timeout: float = 15) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        r = httpx2.get(
            f"{url}/v1/offload/stats", params={"window": "1h"}, headers={"authorization": f"Bearer {key}"}, timeout=30
        )
        totals = r.json()["totals"]
        if totals["requests"] >= requests or time.monotonic() > deadline:
            return totals
        time.sleep(0.3)


def test_requests_with_no_session_or_no_management_stay_outside_the_comparison(make_proxy, upstream):
    """No session to decide by (no history to derive it from), X-Offload-Mode off or observe:
    recorded as ever, never in an arm."""
    key = f"sk-{uuid.uuid4().hex}"
    body = body_of("chat", stream=False, steps=1)
    with make_proxy(holdout=0.99) as url:
        r = httpx2.post(
            url + ROUTES["chat"], json={"model": "gpt-4o", "messages": []}, headers=auth("chat", key), timeout=30
        )
        assert r.status_code == 200, r.text
        for mode in ("off", "observe"):
            r = httpx2.post(
                url + ROUTES["chat"],
                json=body,
                headers={**auth("chat", key), "X-Offload-Mode": mode, "X-Offload-Session": "s-1"},
                timeout=30,
            )
            assert r.status_code == 200, r.text
        assert totals_of(url, key, requests=2)["requests"] >= 2
        section = holdout_of(url, key, sessions=0, timeout=0)
    assert section["arms"] == {"control": {"sessions": 0, "turns": 0}, "managed": {"sessions": 0, "turns": 0}}


def test_a_derived_session_and_its_responses_continuation_stay_in_one_arm(make_proxy, upstream):
    """No X-Offload-Session: the session is derived from the conversation's start; the turn
    continuing from the answer's id (`previous_response_id`, only its new items) is in the same
    arm, forwarded as received when that is control."""
    key = f"sk-{uuid.uuid4().hex}"
    headers = {**auth("responses", key), **SMALL}
    body = body_of("responses", stream=False)
    with make_proxy(holdout=0.5) as url:
        arms = []
        for task in range(16):  # sessions of both arms, each of a conversation of its own
            first = {**body, "input": [{"role": "user", "content": f"task {task}"}, *body["input"][1:]]}
            r = httpx2.post(url + ROUTES["responses"], json=first, headers=headers, timeout=30)
            assert r.status_code == 200, r.text
            control = "x-offload-action" not in r.headers
            upstream.requests.clear()
            then = json.dumps(
                {
                    "model": "gpt-4o",
                    "previous_response_id": r.json()["id"],
                    "input": [{"role": "user", "content": "go on"}],
                }
            ).encode()
            r = httpx2.post(url + ROUTES["responses"], content=then, headers=headers, timeout=30)
            assert r.status_code == 200, r.text
            assert ("x-offload-action" not in r.headers) == control
            if control:
                assert [s.body for s in upstream.responses_requests()] == [then]
            upstream.requests.clear()
            arms.append("control" if control else "managed")
        assert set(arms) == {"control", "managed"}
        section = holdout_of(url, key, sessions=16, turns=32)
    assert section["arms"] == {
        a: {"sessions": arms.count(a), "turns": 2 * arms.count(a)} for a in ("control", "managed")
    }


def test_sessions_with_a_known_difference_are_found_and_without_one_are_not_claimed(make_proxy, upstream):
    """32 sessions per arm of one turn each: the managed arm forwards far fewer tokens (found,
    the interval above nothing); every session has one turn in both arms (no difference claimed)."""
    key = f"sk-{uuid.uuid4().hex}"
    with make_proxy(holdout=0.5) as url:
        namespace = namespace_of(url, key)
        names = sessions_in(namespace, 0.5, "control", 32) + sessions_in(namespace, 0.5, "managed", 32)
        raw = json.dumps(body_of("chat", stream=False, steps=4)).encode()
        for name in names:
            r = httpx2.post(
                url + ROUTES["chat"],
                content=raw,
                headers={**auth("chat", key), **SMALL, "X-Offload-Session": name},
                timeout=30,
            )
            assert r.status_code == 200, r.text
        section = holdout_of(url, key, sessions=64, timeout=30)
    assert section["arms"]["control"]["sessions"] == section["arms"]["managed"]["sessions"] == 32
    assert section["enough"]
    figures = {f["figure"]: f for f in section["figures"]}
    tokens = figures["tokens_forwarded"]
    assert tokens["verdict"] == "managed lower" and tokens["high"] < 0 and tokens["low"] <= tokens["difference"]
    assert figures["turns"]["verdict"] == "no difference found" and figures["turns"]["difference"] == 0
    assert figures["upstream_errors"]["verdict"] == "no difference found"
    assert "tokens forwarded per session lower" in section["verdict"]


def test_a_tenants_file_holdout_and_count_tokens_of_a_control_session_as_sent(make_proxy, upstream, tmp_path):
    tenants = tmp_path / "tenants.toml"
    key = f"sk-ant-{uuid.uuid4().hex}"
    tenants.write_text("[tenants.trial]\nholdout = 0.5\nmax_total_tokens = 1500\n")
    raw = json.dumps(body_of("anthropic", stream=False)).encode()
    sub = {"X-Offload-Tenant": "trial"}  # the client key's namespace for this tenants-file entry
    headers = {**auth("anthropic", key), **sub}
    with make_proxy(tenants_file=tenants, admin_token="admin-holdout-token") as url:
        namespace = namespace_of(url, key, **sub)
        [control] = sessions_in(namespace, 0.5, "control", 1)
        [managed] = sessions_in(namespace, 0.5, "managed", 1)
        for path in ("/v1/messages/count_tokens", "/v1/messages"):
            upstream.requests.clear()
            r = httpx2.post(url + path, content=raw, headers={**headers, "X-Offload-Session": control}, timeout=30)
            assert r.status_code == 200, r.text
            assert [s.body for s in upstream.requests if s.method == "POST"] == [raw]
            upstream.requests.clear()
            r = httpx2.post(url + path, content=raw, headers={**headers, "X-Offload-Session": managed}, timeout=30)
            assert r.status_code == 200, r.text
            assert b"ref=" in [s for s in upstream.requests if s.method == "POST"][0].body
        r = httpx2.post(
            url + ROUTES["anthropic"],
            content=raw,
            timeout=30,
            headers={**headers, "X-Offload-Session": control, "X-Offload-Holdout": "0.5"},
        )
        assert r.status_code == 200, r.text  # a header repeating the tenant's value is accepted
        section = holdout_of(url, key, sessions=2, turns=3, **sub)  # (a later turn may come in a later flush)
        admin = httpx2.get(
            f"{url}/v1/offload/stats",
            params={"tenant": namespace},
            headers={"authorization": "Bearer admin-holdout-token"},
            timeout=30,
        )
        everyone = httpx2.get(
            f"{url}/v1/offload/stats", headers={"authorization": "Bearer admin-holdout-token"}, timeout=30
        )
    assert section["arms"] == {"control": {"sessions": 1, "turns": 2}, "managed": {"sessions": 1, "turns": 1}}
    assert section["fraction"] == 0.5  # the tenants-file entry's
    assert admin.status_code == 200 and admin.json()["holdout"]["arms"] == section["arms"]  # the admin's view of it
    assert "holdout" not in everyone.json()  # all tenants together: no comparison of one tenant's sessions


def test_a_continuation_of_a_gzipped_control_answer_stays_in_its_session(make_proxy, upstream):
    """An upstream that compresses its answers (OpenAI gzips a Responses JSON answer for a client
    accepting it): a control turn's answer goes to the client as sent, encoded, and its id still
    names the session the turn continuing from it is in (else every continuation would be a
    session of its own, drawn into either arm)."""
    from starlette.responses import Response

    from tests.harness.servers import default_handler

    async def gzipping(request, rec):
        answer = await default_handler(request, rec)
        return Response(
            gzip.compress(bytes(answer.body)),
            status_code=answer.status_code,
            headers={"content-encoding": "gzip", "content-type": "application/json"},
        )

    upstream.handler = gzipping
    key = f"sk-{uuid.uuid4().hex}"
    headers = {**auth("responses", key), **SMALL, "accept-encoding": "gzip"}
    body = body_of("responses", stream=False)
    with make_proxy(holdout=0.5) as url:
        arms = []
        for task in range(12):
            first = {**body, "input": [{"role": "user", "content": f"task {task}"}, *body["input"][1:]]}
            r = httpx2.post(url + ROUTES["responses"], json=first, headers=headers, timeout=30)
            assert r.status_code == 200, r.text
            control = "x-offload-action" not in r.headers
            then = {
                "model": "gpt-4o",
                "previous_response_id": r.json()["id"],
                "input": [{"role": "user", "content": "go on"}],
            }
            for _ in range(2):
                r = httpx2.post(url + ROUTES["responses"], json=then, headers=headers, timeout=30)
                assert r.status_code == 200, r.text
                assert ("x-offload-action" not in r.headers) == control
                then = {**then, "previous_response_id": r.json()["id"]}
            arms.append("control" if control else "managed")
        assert "control" in arms
        expected = {a: {"sessions": arms.count(a), "turns": 3 * arms.count(a)} for a in ("control", "managed")}
        deadline = time.monotonic() + 20
        while (section := holdout_of(url, key, sessions=12))["arms"] != expected and time.monotonic() < deadline:
            time.sleep(0.3)  # the last turns' writes
    assert section["arms"] == expected
