"""With --encryption-key, events are sealed like content and session ids never appear in
clear, neither in values nor in key names; the events API still reads them for their tenant."""

from __future__ import annotations

import sqlite3
import time

import httpx2
import pytest
import redis
from starlette.responses import JSONResponse

from tests.harness.history import agent_history, refs_sent
from tests.harness.requests import post
from tests.harness.servers import completion, scripted, tool_call

KEY = "events at rest are sealed too"
SESSION = "sess-Plaintext-7781"
PATTERN = "PATTERN-Zq81xy"
AUTH = {"authorization": "Bearer sk-events-owner"}


def search_then_answer(rec):
    ref = refs_sent(rec)[0]
    return JSONResponse(
        completion(None, tool_calls=[tool_call("context_search", {"pattern": PATTERN, "ref": ref}, id="call_s")])
    )


def events_of(url: str, headers: dict, session: str | None = SESSION) -> list[dict]:
    params = {"session": session} if session else {}
    r = httpx2.get(f"{url}/v1/offload/events", params=params, headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["data"]


def run_session(url: str, upstream) -> list[dict]:
    upstream.handler = scripted(search_then_answer, lambda rec: JSONResponse(completion("done")))
    r = post(
        url,
        json={"model": "gpt-4o", "messages": agent_history(steps=4)},
        headers={
            **AUTH,
            "X-Offload-Max-Total-Tokens": "1000",
            "X-Offload-Mode": "compact",
            "X-Offload-Session": SESSION,
        },
        timeout=20,
    )
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "done", r.text
    deadline = time.monotonic() + 5
    while len(found := events_of(url, AUTH)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)  # events are written after the response
    return found


def assert_events_readable(url: str, found: list[dict]) -> None:
    assert [e["type"] for e in found] == ["compaction", "reload"]
    assert found[1]["tool"] == "context_search" and PATTERN in found[1]["arguments"]
    assert events_of(url, {"authorization": "Bearer sk-someone-else"}) == []
    assert events_of(url, AUTH, session=None) == []


def assert_nothing_in_clear(dump: bytes) -> None:
    assert dump
    for secret in (PATTERN, SESSION, "step0 line"):
        assert secret.encode() not in dump, secret


def test_sqlite_events_and_session_ids_are_sealed(make_proxy, upstream, tmp_path):
    with make_proxy(data_dir=tmp_path, encryption_key=KEY) as url:
        found = run_session(url, upstream)
        assert_events_readable(url, found)
    dump = b"".join(path.read_bytes() for path in tmp_path.glob("offload.sqlite3*"))
    with sqlite3.connect(tmp_path / "offload.sqlite3") as db:
        names = [row[0] for table in ("kv", "members", "lists") for row in db.execute(f"SELECT key FROM {table}")]
    assert any(":events:" in name for name in names) and any(":session:" in name for name in names)
    assert_nothing_in_clear(dump + "\n".join(names).encode())
    with make_proxy(data_dir=tmp_path, encryption_key=KEY) as url:  # a restart maps the session the same way
        assert events_of(url, AUTH) == found


def test_redis_events_and_session_ids_are_sealed(make_proxy, upstream, private_redis_url):
    client = redis.Redis.from_url(private_redis_url)
    with make_proxy(redis_url=private_redis_url, encryption_key=KEY) as url:
        found = run_session(url, upstream)
        assert_events_readable(url, found)
    keys = list(client.scan_iter("off:*"))
    assert any(b":events:" in k for k in keys) and any(b":session:" in k for k in keys)
    assert_nothing_in_clear(b"\n".join(k + b"=" + (client.dump(k) or b"") for k in keys))


@pytest.mark.parametrize("encryption_key", [None, "another key"])
def test_sealed_events_do_not_open_without_their_key(make_proxy, upstream, tmp_path, encryption_key):
    with make_proxy(data_dir=tmp_path, encryption_key=KEY) as url:
        assert len(run_session(url, upstream)) == 2
    with make_proxy(data_dir=tmp_path, encryption_key=encryption_key) as url:
        assert events_of(url, AUTH) == []
