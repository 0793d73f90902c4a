"""Issue 41 attacks: a client key the upstream refuses (401) makes the proxy store nothing, on any
managed path: the store's writes are watched (every write a key names the invented key's
namespace), the answers are the API's own (401 `invalid_api_key`, never a 5xx)."""

from __future__ import annotations

import httpx2
from starlette.responses import JSONResponse

from tests.conftest import LIVE_APPS
from tests.harness.history import agent_history
from tests.harness.requests import post
from tests.harness.servers import completion

WRITES = ("put", "put_if_absent", "push", "incr", "incr_fields", "add_members", "replace_if")


def watch_writes(app) -> list[tuple[str, str]]:
    """Every write of the app's store from now on: (method, key)."""
    store, log = app.state.services.store, []
    for name in WRITES:
        inner = getattr(store, name)

        def spy(key, *args, _inner=inner, _name=name, **kwargs):
            log.append((_name, key))
            return _inner(key, *args, **kwargs)

        setattr(store, name, spy)
    return log


def invented(rec) -> bool:
    sent = [v for k, v in rec.headers.items() if k in ("authorization", "x-api-key")]
    return any(v.removeprefix("Bearer ").startswith("sk-invented") for v in sent)


def refusing(models_status: int | None = None):
    """The upstream: 401 to an invented key (`models_status`: what GET models answers instead)."""

    async def handler(request, rec):
        if rec.path.endswith("/models") and models_status is not None:
            return JSONResponse({"error": {"message": "overloaded", "type": "server_error"}}, status_code=models_status)
        if invented(rec):
            return JSONResponse(
                {"error": {"message": "Incorrect API key", "type": "invalid_request_error", "code": "invalid_api_key"}},
                status_code=401,
            )
        return JSONResponse(completion("ok") if rec.path.endswith("completions") else {"object": "list", "data": []})

    return handler


def lasting(log: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The writes but a summary's lock (a few seconds, deleted once the summary call is done)."""
    return [(name, k) for name, k in log if ":lock:" not in k]


HEADERS = {"authorization": "Bearer sk-invented-1", "X-Offload-Session": "s1", "X-Offload-Max-Total-Tokens": "1000"}


def responses_items() -> list[dict]:
    items: list[dict] = [{"type": "message", "role": "user", "content": "x " * 5000}]
    for i in range(3):
        items += [
            {"type": "function_call", "call_id": f"c{i}", "name": "bash", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{i}", "output": "line\n" * 3000 + str(i)},
        ]
    return items


def test_a_refused_key_with_a_session_writes_nothing_lasting(make_proxy, upstream):
    """Chat (plain and streamed), /v1/offload and responses with store=true, a session named: the
    upstream refuses the key, and no key of its namespace is written (its session's set of refs
    included: it listed refs that were never stored)."""
    upstream.handler = refusing()
    history = agent_history(steps=4)
    with make_proxy() as url:
        log = watch_writes(LIVE_APPS[-1])
        assert post(url, body={"model": "gpt-4o", "messages": history}, headers=HEADERS).status_code == 401
        streamed = {"model": "gpt-4o", "messages": history, "stream": True}
        assert post(url, body=streamed, headers=HEADERS).status_code == 401
        r = httpx2.post(f"{url}/v1/offload", json={"model": "gpt-4o", "messages": history}, headers=HEADERS)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        body = {"model": "gpt-4o", "input": responses_items(), "store": True}
        assert post(url, "/v1/responses", body=body, headers=HEADERS).status_code == 401
        assert lasting(log) == []


def test_responses_compact_with_a_refused_key_is_a_401_in_openai_shape(make_proxy, upstream):
    """/v1/responses/compact with an invented key answers as /v1/offload does (401
    `invalid_api_key`), not a 502 `compaction_failed` (a server error) after a summary call made
    upstream with the invented key."""
    upstream.handler = refusing()
    with make_proxy() as url:
        r = httpx2.post(
            f"{url}/v1/responses/compact", json={"model": "gpt-4o", "input": responses_items()}, headers=HEADERS
        )
        assert r.status_code == 401, r.text
        assert r.json()["error"]["code"] == "invalid_api_key"


def test_an_overloaded_models_endpoint_admits_no_invented_key(make_proxy, upstream):
    """GET models answering 503 (or 429) tells nothing of the key: an invented key must not be
    admitted for the check's TTL (10 minutes) because the upstream was overloaded once."""
    for status in (503, 429):
        upstream.handler = refusing(models_status=status)
        with make_proxy() as url:
            log = watch_writes(LIVE_APPS[-1])
            r = httpx2.post(
                f"{url}/v1/offload",
                json={"model": "gpt-4o", "messages": agent_history(steps=4)},
                headers={**HEADERS, "authorization": f"Bearer sk-invented-{status}"},
            )
            assert r.status_code != 200, (status, r.text[:200])
            assert lasting(log) == [], status


def test_the_websocket_mode_with_a_refused_key_writes_nothing_lasting(make_proxy, upstream):
    """The WebSocket mode of /v1/responses, an invented key, store=true and a session: an error
    event, nothing of its namespace written."""
    from tests.harness.websocket import Socket

    upstream.handler = refusing()
    with make_proxy() as url:
        log = watch_writes(LIVE_APPS[-1])
        with Socket(
            url, "sk-invented-ws", headers={"X-Offload-Session": "w1", "X-Offload-Max-Total-Tokens": "1000"}
        ) as socket:
            events = socket.create(model="gpt-4o", input=responses_items(), store=True)
        assert events[-1]["type"] in ("error", "response.failed"), events[-1]
        assert lasting(log) == []
