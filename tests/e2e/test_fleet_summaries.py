"""A fleet makes one summary per conversation, as one replica does: the same summary calls, the
same forwarded bytes and the same billing, whatever the summariser's latency; on Redis and on a
3-master Redis Cluster. A replica killed with a summary under way holds it no longer than its lease.

The summariser's latency is counted in turns, not seconds, so that the runs compare exactly: a
summary call is answered only once `HOLD` more turns have gone out after the turn that started
it (the summariser is slower than the gap between turns), then the next turn goes out once
every replica is idle again.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import uuid

import httpx2
import pytest

from proxy.offload.tenant import tenant_namespace
from tests.harness.fleet import background_jobs, idle, replicas, wait_until
from tests.harness.history import agent_history
from tests.harness.servers import default_handler, is_summary_call, snapshot_answer

pytestmark = pytest.mark.usefixtures("fresh_summary_memory")

HOLD = 3  # turns a summary takes
# Background summaries only (a hard limit far above these histories), started early (0.8 of the
# trigger), compaction first: the setting of a long conversation with large tool results.
HEADERS = {"X-Offload-Max-Total-Tokens": "3000", "X-Offload-Hard-Max-Tokens": "1000000", "X-Offload-Session": "fleet"}
HISTORY = agent_history(steps=22, lines=120)


def turns(history: list[dict]) -> list[list[dict]]:
    """What the agent sends turn by turn: the history up to each assistant message."""
    return [history[:k] for k in range(2, len(history)) if history[k]["role"] == "assistant"]


class Summariser:
    """The fake upstream's summary calls answer when `gate` is open, each with a text of its own
    (so two different summaries never look alike); every other call answers at once."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    async def __call__(self, request, rec):
        if is_summary_call(rec):
            await asyncio.to_thread(self.gate.wait, 30)
            digest = hashlib.sha256(rec.body).hexdigest()[:16]
            return snapshot_answer(
                rec, f"<state_snapshot><task_overview>summary {digest}</task_overview></state_snapshot>"
            )
        return await default_handler(request, rec)


def converse(urls: list[str], credential: str, summariser: Summariser, hold: int = HOLD) -> list[tuple[str, str]]:
    """The conversation, turn k on replica k mod len(urls); (X-Offload-Action,
    X-Offload-Summary-Tokens) per turn."""
    seen, started = [], None
    with httpx2.Client(timeout=30, headers={"authorization": f"Bearer {credential}", **HEADERS}) as client:
        for k, messages in enumerate(turns(HISTORY)):
            reply = client.post(
                f"{urls[k % len(urls)]}/v1/chat/completions", json={"model": "gpt-4o", "messages": messages}
            )
            assert reply.status_code == 200, reply.text
            seen.append((reply.headers.get("x-offload-action", ""), reply.headers.get("x-offload-summary-tokens", "")))
            if started is None and not idle(urls):
                started = k
            if started is not None and k - started >= hold:  # the summary is ready before the next turn
                summariser.gate.set()
                wait_until(lambda: idle(urls), what="the summary")
                summariser.gate.clear()
                started = None
    summariser.gate.set()
    wait_until(lambda: idle(urls), what="the last summary")
    return seen


def run(urls: list[str], upstream, credential: str) -> dict:
    upstream.reset()
    upstream.handler = Summariser()
    headers = converse(urls, credential, upstream.handler)
    return {
        "headers": headers,
        "summaries": [r.body for r in upstream.summary_requests()],
        "forwarded": [r.body for r in upstream.chat_requests()],
    }


@pytest.fixture
def one_replica(make_proxy, upstream) -> dict:
    """The conversation through one replica, on a store of its own, for a credential of this
    test's own (refs name their namespace): what the fleet must reproduce."""
    credential = f"sk-fleet-{uuid.uuid4().hex}"
    with make_proxy() as url:
        return {**run([url], upstream, credential), "credential": credential}


def check_same_as_one_replica(fleet: dict, one: dict) -> None:
    assert len(one["summaries"]) >= 2, one["headers"]  # the conversation makes several summaries
    assert any(action.endswith("compress-pending") for action, _ in one["headers"])  # turns went out while one was made
    assert fleet["headers"] == one["headers"]  # the same actions, each summary billed once, on the same turn
    assert len(fleet["summaries"]) == len(one["summaries"])
    assert fleet["summaries"] == one["summaries"]
    assert len(fleet["forwarded"]) == len(one["forwarded"])
    assert [i for i, (a, b) in enumerate(zip(fleet["forwarded"], one["forwarded"])) if a != b] == []


def test_two_replicas_on_one_redis_make_the_summaries_one_replica_makes(upstream, redis_url, one_replica):
    with replicas(2, "--upstream", f"{upstream.url}/v1", "--redis-url", redis_url) as fleet:
        made = run([p.url for p in fleet], upstream, one_replica["credential"])
    check_same_as_one_replica(made, one_replica)


def test_three_replicas_on_a_redis_cluster_make_the_summaries_one_replica_makes(
    upstream, redis_cluster_url, one_replica
):
    with replicas(3, "--upstream", f"{upstream.url}/v1", "--redis-url", redis_cluster_url) as fleet:
        made = run([p.url for p in fleet], upstream, one_replica["credential"])
    check_same_as_one_replica(made, one_replica)


def test_a_killed_replicas_lease_lapses_and_a_later_turn_makes_the_summary(upstream, private_redis_url):
    import redis

    credential = f"sk-fleet-kill-{uuid.uuid4().hex}"
    summariser = upstream.handler = Summariser()
    leases = f"off:{{{tenant_namespace(credential, None)}:*}}:lease:*"  # in any of the tenant's shards
    history = turns(HISTORY)
    db = redis.Redis.from_url(private_redis_url)
    # a summary timeout of 2 s: a lease of 2 s, renewed every 0.7 s while its summary is made
    args = ("--upstream", f"{upstream.url}/v1", "--redis-url", private_redis_url, "--summary-timeout", "2")
    with (
        replicas(2, *args) as (doomed, survivor),
        httpx2.Client(timeout=30, headers={"authorization": f"Bearer {credential}", **HEADERS}) as client,
    ):

        def turn(proxy, k: int) -> str:
            reply = client.post(f"{proxy.url}/v1/chat/completions", json={"model": "gpt-4o", "messages": history[k]})
            assert reply.status_code == 200, reply.text
            return reply.headers["x-offload-action"]

        k = 0
        while background_jobs(doomed.url) == 0:  # the turns on the doomed replica, until one starts a summary
            turn(doomed, k)
            k += 1
        wait_until(lambda: len(upstream.summary_requests()) == 1, what="the summary call")
        assert db.keys(leases) != []
        doomed.proc.kill()  # kill -9, its summary under way: nothing releases its lease
        doomed.proc.wait(timeout=10)

        turn(survivor, k)  # the lease is held: this replica starts no summary of its own
        assert background_jobs(survivor.url) == 0 and len(upstream.summary_requests()) == 1
        wait_until(lambda: db.keys(leases) == [], timeout=10, what="the dead replica's lease to lapse")
        summariser.gate.set()
        turn(survivor, k + 1)  # lapsed: the summary is made here
        wait_until(lambda: len(upstream.summary_requests()) == 2, what="the survivor's summary call")
        wait_until(lambda: idle([survivor.url]), what="the survivor's summary")
        assert db.keys(leases) == []  # released as it ended
        events = client.get(f"{survivor.url}/v1/offload/events", params={"session": "fleet"}).json()["data"]
        assert [e["type"] for e in events].count("summary_ready") == 1


def other_attempt(history: list[dict]) -> list[dict]:
    """Another run of the same agent on the same task: the same system message, task and first
    call, then tool results of its own (a deterministic agent, a parallel attempt)."""
    return [
        {**m, "content": m["content"].replace("step", "attempt-b-step")} if m["role"] == "tool" else m for m in history
    ]


def test_conversations_sharing_their_opening_do_not_hold_each_others_summaries(upstream, redis_url):
    """Two attempts of one tenant share their system message, task and first call: one's summary
    under way on a replica does not keep the other's from being made on another replica, while the
    same conversation's next turn, on the other replica, still waits for its own."""
    credential = f"sk-fleet-attempts-{uuid.uuid4().hex}"
    summariser = upstream.handler = Summariser()
    first, second = turns(HISTORY), turns(other_attempt(HISTORY))
    assert first[-1][:3] == second[-1][:3] and first[-1][3] != second[-1][3]
    headers = {k: v for k, v in HEADERS.items() if k != "X-Offload-Session"}  # sessions derived: alike too
    with (
        replicas(2, "--upstream", f"{upstream.url}/v1", "--redis-url", redis_url) as (one, two),
        httpx2.Client(timeout=30, headers={"authorization": f"Bearer {credential}", **headers}) as client,
    ):

        def turn(proxy, messages: list[dict]) -> str:
            reply = client.post(f"{proxy.url}/v1/chat/completions", json={"model": "gpt-4o", "messages": messages})
            assert reply.status_code == 200, reply.text
            return reply.headers["x-offload-action"]

        k = 0
        while background_jobs(one.url) == 0:  # attempt A on replica one, until it starts a summary
            turn(one, first[k])
            k += 1
        wait_until(lambda: len(upstream.summary_requests()) == 1, what="A's summary call")
        turn(two, first[k])  # A's next turn elsewhere: A's summary is under way, none of its own
        assert background_jobs(two.url) == 0 and len(upstream.summary_requests()) == 1

        actions = []
        for messages in second:  # attempt B on replica two, A's summary still held, until B starts one
            actions.append(turn(two, messages))
            if background_jobs(two.url):
                break
        wait_until(lambda: len(upstream.summary_requests()) == 2, what=f"B's own summary call (B's turns: {actions})")
        assert background_jobs(one.url) == 1  # A's still under way
        a_call, b_call = (r.body.decode() for r in upstream.summary_requests())
        assert "attempt-b-step" in b_call and "attempt-b-step" not in a_call

        summariser.gate.set()
        wait_until(lambda: idle([one.url, two.url]), what="both summaries")

        def after_idle(proxy, messages: list[dict]) -> str:
            # a summary started ahead of time by the turn before (0.8 of the trigger) is made before
            # this one goes out: on a loaded machine it could still be under way, its turn pending
            wait_until(lambda: idle([one.url, two.url]), what="the replicas' summaries")
            return turn(proxy, messages)

        for history, at, proxy in ((second, len(actions), one), (first, k + 1, two)):  # each on the other replica
            later = [after_idle(proxy, messages) for messages in history[at:]]
            compressed = [action for action in later if "compress" in action]
            assert compressed and compressed[0] == "compact+compress", later  # its own summary, ready: not pending
