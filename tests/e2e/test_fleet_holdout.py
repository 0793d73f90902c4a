"""The holdout on a fleet: two replicas on one Redis put every session in the same arm (decided
from the session id, nothing stored to agree on), and so does a replica after a restart; each
session's turns, whichever replica served them, add up in the shared store, and both replicas'
statistics compare the same sessions."""

from __future__ import annotations

import json
import time
import uuid

import httpx2

from tests.e2e.test_holdout import ROUTES, SMALL, auth, body_of
from tests.harness.fleet import replicas
from tests.harness.requests import post

SESSIONS = 16
SALT = "fleet-salt"


def arm_seen(url: str, key: str, session: str, raw: bytes, upstream) -> str:
    """The arm a replica put `session` in: control when the request went up byte for byte and the
    answer carries none of the proxy's headers."""
    upstream.requests.clear()
    r = post(
        url,
        ROUTES["chat"],
        body=raw,
        headers={**auth("chat", key), **SMALL, "X-Offload-Session": session},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    sent = upstream.chat_requests()
    if "x-offload-action" not in r.headers:
        assert [s.body for s in sent] == [raw]
        return "control"
    assert b"ref=" in sent[0].body
    return "managed"


def holdout_of(url: str, key: str, *, turns: int, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        r = httpx2.get(f"{url}/v1/offload/stats", headers={"authorization": f"Bearer {key}"}, timeout=30)
        assert r.status_code == 200, r.text
        section = r.json()["holdout"]
        if sum(a["turns"] for a in section["arms"].values()) >= turns or time.monotonic() > deadline:
            return section
        time.sleep(1)


def test_two_replicas_and_a_restart_put_each_session_in_the_same_arm(upstream, private_redis):
    key = f"sk-{uuid.uuid4().hex}"
    raw = json.dumps(body_of("chat", stream=False, steps=4)).encode()
    sessions = [f"fleet-{i}" for i in range(SESSIONS)]
    args = (
        "--redis-url",
        private_redis.url,
        "--upstream",
        f"{upstream.url}/v1",
        "--holdout",
        "0.5",
        "--holdout-salt",
        SALT,
    )
    with replicas(2, *args) as procs:
        first, second = procs
        on_first = {s: arm_seen(first.url, key, s, raw, upstream) for s in sessions}
        on_second = {s: arm_seen(second.url, key, s, raw, upstream) for s in sessions}
        assert on_first == on_second
        assert set(on_first.values()) == {"control", "managed"}  # 16 sessions at 0.5: both arms (p = 1 - 2^-15)
        first.stop()
        first.start()  # the same options, a new process: nothing of the split was kept in it
        assert {s: arm_seen(first.url, key, s, raw, upstream) for s in sessions} == on_first
        expected = {
            a: {"sessions": list(on_first.values()).count(a), "turns": 3 * list(on_first.values()).count(a)}
            for a in ("control", "managed")
        }
        assert holdout_of(second.url, key, turns=3 * SESSIONS)["arms"] == expected
        assert holdout_of(first.url, key, turns=3 * SESSIONS)["arms"] == expected  # the same shared sessions
