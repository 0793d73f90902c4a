"""Content that vanished from the store without an outage (Redis eviction, FLUSHDB, a wiped
file) is stored again by the very next request that carries it."""

from __future__ import annotations

import sqlite3

import httpx2
import pytest
import redis
from starlette.responses import JSONResponse

from tests.harness.history import agent_history, refs_sent
from tests.harness.requests import post
from tests.harness.servers import completion, scripted, tool_call

SESSION = "lost-content-session"
HEADERS = {
    "authorization": "Bearer sk-lost",
    "X-Offload-Max-Total-Tokens": "1000",
    "X-Offload-Mode": "compact",
    "X-Offload-Session": SESSION,
}


class Backend:
    def __init__(self, name: str, request: pytest.FixtureRequest, tmp_path) -> None:
        self.name, self.tmp_path = name, tmp_path
        self.url = request.getfixturevalue("private_redis_url") if name == "redis" else None

    def options(self) -> dict:
        return {"redis_url": self.url} if self.url else {"data_dir": self.tmp_path}

    def lose_everything(self) -> None:
        if self.url:
            redis.Redis.from_url(self.url).flushdb()
            return
        with sqlite3.connect(self.tmp_path / "offload.sqlite3") as db:
            for table in ("kv", "members", "lists"):
                db.execute(f"DELETE FROM {table}")

    def session_members(self) -> set[str]:
        if self.url:
            client = redis.Redis.from_url(self.url)
            keys = [k for k in client.scan_iter("off:*}:session:*") if k.decode().endswith(f"}}:session:{SESSION}")]
            return {m.decode() for k in keys for m in client.smembers(k)}
        with sqlite3.connect(self.tmp_path / "offload.sqlite3") as db:
            rows = db.execute("SELECT member FROM members WHERE key LIKE ?", (f"%:session:{SESSION}",))
            return {row[0] for row in rows}


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
def test_content_lost_between_two_requests_is_stored_again_by_the_next(
    make_proxy, upstream, backend, request, tmp_path
):
    store = Backend(backend, request, tmp_path)
    history = agent_history(steps=4)
    with make_proxy(**store.options()) as url:
        assert (
            post(url, body={"model": "gpt-4o", "messages": history}, headers=HEADERS).headers["x-offload-refs"] == "3"
        )
        refs = refs_sent(upstream.chat_requests()[-1])
        assert len(refs) == 3 and store.session_members() == set(refs)

        store.lose_everything()
        assert store.session_members() == set()

        def reload_first(rec):
            return JSONResponse(
                completion(None, tool_calls=[tool_call("context_reload", {"ref": refs[1]}, id="call_r")])
            )

        upstream.handler = scripted(reload_first, lambda rec: JSONResponse(completion("done")))
        again = post(
            url, body={"model": "gpt-4o", "messages": history}, headers=HEADERS
        )  # within a second of the first: no memo may hide the loss
        assert again.json()["choices"][0]["message"]["content"] == "done"
        reload_result = upstream.chat_requests()[-1].json()["messages"][-1]
        originals = [m["content"] for m in history if m["role"] == "tool"]
        assert reload_result["tool_call_id"] == "call_r" and reload_result["content"] in originals
        for ref in refs:
            got = httpx2.get(f"{url}/v1/offload/{ref}", headers=HEADERS, timeout=20)
            assert got.status_code == 200 and got.json()["content"] in originals
        assert store.session_members() == set(refs)
