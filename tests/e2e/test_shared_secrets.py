"""Replicas sharing a store share its secrets: `offload-proxy serve` with another
--encryption-key than the store's exits at once, saying so; a rotation (--encryption-key new,
--encryption-key-previous old, --namespace-key old) keeps what was stored before readable:
refs, and emulated compaction tokens."""

from __future__ import annotations

import subprocess
import sys

import httpx2

from tests.harness import responses as fake
from tests.harness.compaction import BUILD_HISTORY, continued
from tests.harness.history import agent_history, refs_sent
from tests.harness.servers import ProxyProcess, free_port, scripted

OLD, NEW = "the old encryption key of the fleet", "the new encryption key of the fleet"
CLIENT = "sk-a-client-of-the-fleet"
AUTH = {"authorization": f"Bearer {CLIENT}"}


def serve(*args: str) -> list[str]:
    return [sys.executable, "-m", "proxy", "serve", "--port", str(free_port()), *args]


def test_a_replica_with_another_key_refuses_to_start_and_a_rotation_reads_what_was_stored(
    upstream, private_redis_url, tmp_path
):
    common = ("--redis-url", private_redis_url, "--upstream", f"{upstream.url}/v1", "--log-level", "warning")
    history = agent_history(steps=4)
    with ProxyProcess(*common, "--encryption-key", OLD, data_dir=tmp_path) as proxy:
        r = httpx2.post(
            f"{proxy.url}/v1/chat/completions",
            json={"model": "gpt-4o", "messages": history},
            headers={**AUTH, "X-Offload-Max-Total-Tokens": "1000"},
            timeout=60,
        )
        assert r.status_code == 200 and r.headers["x-offload-refs"] == "3"
        ref = refs_sent(upstream.chat_requests()[-1])[0]
        upstream.handler = scripted(lambda rec: fake.answer(rec, fake.message("Hello there")))  # summaries: snapshots
        r = httpx2.post(
            f"{proxy.url}/v1/responses/compact",
            json={"model": "gpt-5", "input": BUILD_HISTORY},
            headers=AUTH,
            timeout=60,
        )
        assert r.status_code == 200, r.text
        token = r.json()["output"][-1]["encrypted_content"]

    done = subprocess.run(
        serve(*common, "--encryption-key", NEW, "--data-dir", str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode != 0
    [line] = done.stderr.strip().splitlines()
    assert "--encryption-key does not open the store's canary" in line and "same --encryption-key" in line

    rotating = ("--encryption-key", NEW, "--encryption-key-previous", OLD, "--namespace-key", OLD)
    with ProxyProcess(*common, *rotating, data_dir=tmp_path) as proxy:
        r = httpx2.get(f"{proxy.url}/v1/offload/{ref}", headers=AUTH, timeout=30)
        assert r.status_code == 200 and r.json()["content"] == history[3]["content"]
        r = httpx2.post(f"{proxy.url}/v1/responses", json=continued(token), headers=AUTH, timeout=60)
        assert r.status_code == 200, r.text  # the token made under the old key still stands for its record

    # once the fleet runs the new key, a replica started with the old one alone is refused
    done = subprocess.run(
        serve(*common, "--encryption-key", OLD, "--data-dir", str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode != 0 and "does not open the store's canary" in done.stderr


def test_a_store_down_at_startup_does_not_hold_the_replica_back(upstream, tmp_path):
    dead = f"redis://127.0.0.1:{free_port()}/0"
    proxy = ProxyProcess(
        "--redis-url",
        dead,
        "--upstream",
        f"{upstream.url}/v1",
        "--encryption-key",
        OLD,
        "--log-format",
        "text",
        data_dir=tmp_path,
        capture=True,
        ready_path="/healthz",
    )
    with proxy:
        assert httpx2.get(f"{proxy.url}/healthz").status_code == 200
    assert "offload-proxy: warning: the store's secrets canary was not checked" in proxy.stderr


def test_a_replica_that_started_unchecked_stops_once_the_store_answers_with_another_key(
    upstream, private_redis_url, tmp_path
):
    """The fleet's canary is there, but the store's writes are paused while the replica starts
    (its startup check times out); once they resume, its workers check and stop it."""
    import asyncio

    import redis

    from proxy.offload.canary import check
    from proxy.store.redis import RedisStore
    from proxy.store.sealing import Sealer

    async def fleet() -> None:
        store = RedisStore(private_redis_url)
        await check(store, Sealer(OLD), OLD)
        await store.close()

    asyncio.run(fleet())
    admin = redis.Redis.from_url(private_redis_url)
    admin.execute_command("CLIENT", "PAUSE", "120000", "WRITE")
    proxy = ProxyProcess(
        "--redis-url",
        private_redis_url,
        "--upstream",
        f"{upstream.url}/v1",
        "--workers",
        "2",
        "--encryption-key",
        NEW,
        "--log-format",
        "text",
        data_dir=tmp_path,
        capture=True,
        ready_path="/healthz",
        ready_within=60,
    )
    try:
        with proxy:
            assert httpx2.get(f"{proxy.url}/healthz").status_code == 200  # it started
            admin.execute_command("CLIENT", "UNPAUSE")
            # stopped by its workers' check: a failure for its supervisor (status 1), not a normal stop
            assert proxy.proc.wait(timeout=120) == 1
            proxy.stop()
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
        admin.close()
    assert "canary was not checked" in proxy.stderr
    assert "--encryption-key does not open the store's canary" in proxy.stderr and "stopping" in proxy.stderr
    last = proxy.stderr.strip().splitlines()[-1]  # the supervisor's last word: the reason
    assert last.startswith("offload-proxy: --encryption-key does not open the store's canary"), last


def test_the_unchecked_warning_is_a_json_line_with_json_logs(upstream, tmp_path):
    import json

    dead = f"redis://127.0.0.1:{free_port()}/0"
    proxy = ProxyProcess(
        "--redis-url",
        dead,
        "--upstream",
        f"{upstream.url}/v1",
        "--log-format",
        "json",
        data_dir=tmp_path,
        capture=True,
        ready_path="/healthz",
    )
    with proxy:
        pass
    records = [json.loads(line) for line in proxy.stderr.splitlines() if line.strip()]
    assert any(r["level"] == "warning" and "canary was not checked" in r["message"] for r in records)


# ---- the running replicas keep the canary: a Redis restarted without persistence loses it


def canary_of(url: str) -> bytes | None:
    import redis

    from proxy.offload.canary import CANARY_KEY

    with redis.Redis.from_url(url) as db:
        return db.get(CANARY_KEY)


def test_after_a_redis_restart_the_running_replicas_write_the_canary_again(upstream, tmp_path):
    from tests.harness.fleet import replicas, wait_until
    from tests.harness.servers import RedisProcess

    server = RedisProcess().start()
    try:
        with replicas(2, "--redis-url", server.url, "--upstream", f"{upstream.url}/v1", "--encryption-key", OLD):
            assert canary_of(server.url) is not None
            server.restart()  # no persistence: the store is empty
            wait_until(lambda: canary_of(server.url) is not None, timeout=60, what="the canary written again")
            done = subprocess.run(
                serve(
                    "--redis-url",
                    server.url,
                    "--upstream",
                    f"{upstream.url}/v1",
                    "--encryption-key",
                    NEW,
                    "--data-dir",
                    str(tmp_path),
                ),
                capture_output=True,
                text=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
            )
            assert done.returncode != 0 and "--encryption-key does not open the store's canary" in done.stderr
    finally:
        server.stop()


def test_a_replica_that_wrote_the_canary_while_the_fleet_ran_stops_and_the_fleet_is_never_locked_out(
    upstream, tmp_path
):
    """The fleet's replicas are frozen (SIGSTOP) while Redis restarts and a replica with another key
    starts on the empty store, writing its canary; once they run again, they write theirs again
    (the older lineage is the fleet's) and the other replica stops at its next check."""
    import os
    import signal

    from tests.harness.fleet import replicas
    from tests.harness.servers import RedisProcess

    server = RedisProcess().start()
    common = ("--redis-url", server.url, "--upstream", f"{upstream.url}/v1", "--log-format", "text")
    try:
        with replicas(2, *common, "--encryption-key", OLD, capture=True) as fleet:
            for proxy in fleet:
                os.kill(proxy.proc.pid, signal.SIGSTOP)
            try:
                server.restart()
                wrong = ProxyProcess(
                    *common,
                    "--encryption-key",
                    NEW,
                    "--workers",
                    "2",
                    data_dir=tmp_path / "wrong",
                    capture=True,
                    ready_within=90,
                )
                wrong.start()  # the store is empty: nothing to refuse it
            finally:
                for proxy in fleet:
                    os.kill(proxy.proc.pid, signal.SIGCONT)
            assert wrong.proc.wait(timeout=120) == 1  # stopped by its workers' check: a failure for its supervisor
            wrong.stop()
            assert "--encryption-key does not open the store's canary" in wrong.stderr and "stopping" in wrong.stderr
            assert wrong.stderr.strip().splitlines()[-1].startswith("offload-proxy: --encryption-key does not open")
            with ProxyProcess(*common, "--encryption-key", OLD, data_dir=tmp_path / "later", ready_within=60) as later:
                assert httpx2.get(f"{later.url}/readyz").json()["store"] == "ok"  # the fleet's key: let in
            done = subprocess.run(
                serve(*common, "--encryption-key", NEW, "--data-dir", str(tmp_path / "again")),
                capture_output=True,
                text=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
            )
            assert done.returncode != 0 and "does not open the store's canary" in done.stderr
            assert all(httpx2.get(f"{proxy.url}/healthz").status_code == 200 for proxy in fleet)  # serving on
        from proxy.offload.canary import RESTORED

        assert any(RESTORED in proxy.stderr for proxy in fleet)  # said loudly, by the replica that wrote it again
    finally:
        server.stop()
