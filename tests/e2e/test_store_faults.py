"""Redis failing under the proxy: requests never fail, offloading resumes by itself."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx2
import openai
import pytest
from starlette.responses import JSONResponse

from tests.harness.history import agent_history, refs_sent
from tests.harness.requests import post
from tests.harness.servers import RedisProcess, completion, tool_call

# Compaction only: these tests are about the store (the previews alone leave this history above the trigger).
HEADERS = {"X-Offload-Max-Total-Tokens": "1000", "X-Offload-Mode": "compact", "authorization": "Bearer sk-faults"}


@pytest.fixture
def redis_server():
    server = RedisProcess().start()
    yield server
    if server.proc and server.proc.poll() is None:
        os.kill(server.proc.pid, signal.SIGCONT)
    server.stop()


def chat(messages: list) -> dict:
    return {"model": "gpt-4o", "messages": messages}


def test_redis_killed_under_load_then_back(make_proxy, upstream, redis_server):
    history = agent_history(steps=4)
    # a store timeout no healthy Redis reaches on a loaded machine (a dead one refuses at once)
    with make_proxy(redis_url=redis_server.url, store_timeout=2.0) as url:
        statuses: list[int] = []
        warnings: list[str] = []
        stop = threading.Event()

        def load():
            n = 0
            while not stop.is_set():
                n += 1
                again = [*history, {"role": "user", "content": f"again {threading.get_ident()} {n}"}]
                r = post(url, body=chat(again), headers=HEADERS)
                statuses.append(r.status_code)
                warnings.append(r.headers.get("x-offload-warning", ""))

        workers = [threading.Thread(target=load) for _ in range(4)]
        for w in workers:
            w.start()
        time.sleep(0.5)
        redis_server.proc.kill()
        redis_server.proc.wait()
        deadline = time.monotonic() + 30  # the next store call finds it gone (refused at once)
        while (ready := httpx2.get(f"{url}/readyz", timeout=30)).json()["store"] != "unavailable":
            assert time.monotonic() < deadline, ready.json()
            time.sleep(0.1)
        # still serving: every replica would be down at once otherwise
        assert ready.status_code == 200 and ready.json() == {
            "status": "ready",
            "store": "unavailable",
            "degraded": True,
        }
        down = post(url, body=chat(history), headers=HEADERS)
        assert down.status_code == 200 and "store unavailable" in down.headers["x-offload-warning"]
        assert refs_sent(upstream.chat_requests()[-1]) == []  # the original payload went through
        redis_server.start()  # same port, empty
        time.sleep(0.5)
        stop.set()
        for w in workers:
            w.join()
        assert set(statuses) == {200}, statuses
        assert any("store unavailable" in w for w in warnings)
        deadline = time.monotonic() + 30
        while httpx2.get(f"{url}/readyz").json()["degraded"]:
            assert time.monotonic() < deadline, "the store never came back"
            time.sleep(0.2)
        back = post(url, body=chat(history), headers=HEADERS)
        assert back.status_code == 200 and "x-offload-warning" not in back.headers
        assert back.headers["x-offload-action"] == "compact"
        ref = refs_sent(upstream.chat_requests()[-1])[0]
        stored = httpx2.get(f"{url}/v1/offload/{ref}", headers={"authorization": HEADERS["authorization"]})
        assert stored.json()["content"] == history[3]["content"]


def test_hung_redis_cannot_stall_requests_and_reload_says_unavailable(make_proxy, upstream, redis_server):
    history = agent_history(steps=4)

    async def handler(request, rec):
        last = rec.json()["messages"][-1]
        if (last["role"] == "tool" and last["tool_call_id"] == "call_x") or not refs_sent(rec):
            return JSONResponse(completion("ok"))
        os.kill(redis_server.proc.pid, signal.SIGSTOP)  # Redis hangs after the refs were stored
        return JSONResponse(
            completion(None, tool_calls=[tool_call("context_reload", {"ref": refs_sent(rec)[0]}, id="call_x")])
        )

    upstream.handler = handler
    with make_proxy(redis_url=redis_server.url, store_timeout=2.0) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-faults", max_retries=0, timeout=60)
        result = client.chat.completions.create(
            model="gpt-4o",
            messages=history,
            extra_headers={"X-Offload-Max-Total-Tokens": "1000", "X-Offload-Mode": "compact"},
        )
        assert result.choices[0].message.content == "ok"
        answer = upstream.chat_requests()[-1].json()["messages"][-1]["content"]
        assert "temporarily unavailable" in answer
        # Redis is still stopped: answered all the same
        hung = post(url, body=chat(agent_history(steps=5)), headers=HEADERS)
        assert hung.status_code == 200 and "store unavailable" in hung.headers["x-offload-warning"]
        assert httpx2.get(f"{url}/readyz", timeout=5).json()["store"] == "unavailable"
        os.kill(redis_server.proc.pid, signal.SIGCONT)
        deadline = time.monotonic() + 30
        while "x-offload-warning" in post(url, body=chat(history), headers=HEADERS).headers:
            assert time.monotonic() < deadline, "offloading did not resume"
            time.sleep(0.2)


@pytest.mark.parametrize("scheme", ["redis", "redis+cluster"])
def test_unreachable_store_is_degraded_on_readyz_and_chat_still_answers(make_proxy, upstream, scheme):
    from tests.harness.servers import free_port

    with make_proxy(redis_url=f"{scheme}://127.0.0.1:{free_port()}/0", store_timeout=0.3) as url:
        ready = httpx2.get(f"{url}/readyz", timeout=10)
        assert ready.status_code == 200 and ready.json()["store"] == "unavailable" and ready.json()["degraded"]
        r = post(url, body=chat(agent_history(steps=4)), headers=HEADERS)
        assert r.status_code == 200 and "store unavailable" in r.headers["x-offload-warning"]
