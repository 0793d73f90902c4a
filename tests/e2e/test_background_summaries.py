"""Summaries made in the background: no turn waits for one below the hard limit, the turn after
finds it, and it is the summary an inline one would have been (byte for byte)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx2
import openai
import pytest
from starlette.responses import JSONResponse

from proxy.core import compression as cp
from proxy.core.settings import OffloadSettings
from proxy.core.tokens import counter_for_model
from proxy.formats.chat import VIEW
from proxy.offload import records as summary_memo
from proxy.offload import summaries
from tests.e2e.test_compression_e2e import chat_history, forwarded, is_summary_call
from tests.harness.history import agent_history
from tests.harness.servers import ProxyProcess, completion

SESSION = "bg-1"
# A hard limit far above these histories (however tokens are counted: tiktoken, or the estimate
# without its files): no turn waits unless a test sets a lower one.
BACKGROUND = {
    "X-Offload-Mode": "compress",
    "X-Offload-Max-Total-Tokens": "1500",
    "X-Offload-Session": SESSION,
    "X-Offload-Precompress-Ratio": "0",
    "X-Offload-Hard-Max-Tokens": "100000",
}
SNAPSHOT = "<state_snapshot><task_overview>the plan so far</task_overview></state_snapshot>"


pytestmark = pytest.mark.usefixtures("fresh_summary_memory")


@pytest.fixture
def client(proxy_url, upstream, key) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy_url}/v1", api_key=key, max_retries=0, timeout=20)


def gated_summaries(gate: threading.Event | None = None, *, fail: bool = False):
    """A summariser that answers once `gate` is set (at once without one); the same text every time."""
    calls = []

    async def handler(request, rec):
        if is_summary_call(rec):
            calls.append(rec)
            if gate is not None:
                await asyncio.to_thread(gate.wait, 20)
            if fail:
                return JSONResponse({"error": {"message": "down", "type": "server_error"}}, status_code=500)
            return JSONResponse(completion(SNAPSHOT, usage=(300, 40)))
        return JSONResponse(completion("Final answer"))

    return handler, calls


def session_events(proxy_url: str, key: str) -> list[dict]:
    return httpx2.get(
        f"{proxy_url}/v1/offload/events", params={"session": SESSION}, headers={"authorization": f"Bearer {key}"}
    ).json()["data"]


def wait_for_event(proxy_url: str, kind: str, key: str, timeout: float = 20) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [e for e in session_events(proxy_url, key) if e["type"] == kind]
        if found:
            return found[-1]
        time.sleep(0.05)
    raise AssertionError(f"no {kind} event: {[e['type'] for e in session_events(proxy_url, key)]}")


def wait_until(condition, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def metric(proxy_url: str, name: str) -> float:
    for line in httpx2.get(f"{proxy_url}/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exposed")


def test_the_crossing_turn_goes_out_before_its_summary_and_the_next_one_uses_it(client, upstream, proxy_url, key):
    gate = threading.Event()
    upstream.handler, calls = gated_summaries(gate)
    history = chat_history(12)
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history, extra_headers=BACKGROUND)
    # answered while the summariser is still held: nothing waited for it
    assert raw.headers["x-offload-action"] == "compress-pending"
    assert "x-offload-summary-tokens" not in raw.headers
    assert raw.parse().usage.prompt_tokens == 10  # the answer's own: the summary is not paid yet
    assert forwarded(upstream)[0] == history  # compress mode, nothing compacted: the history as it came
    wait_until(lambda: len(calls) == 1)  # the summary call, made after the answer went out
    assert metric(proxy_url, "offload_summaries_in_flight") == 1
    assert metric(proxy_url, "offload_summaries_oldest_seconds") > 0
    started = wait_for_event(proxy_url, "summary_started", key)
    assert started["messages"] == len(history) - 4  # not the system message, the task, the kept tail

    gate.set()
    ready = wait_for_event(proxy_url, "summary_ready", key)
    assert ready["summary_tokens_in"] == 300 and ready["summary_tokens_out"] == 40 and ready["duration_ms"] >= 0
    assert metric(proxy_url, "offload_summaries_in_flight") == 0

    history2 = history + [{"role": "assistant", "content": "Final answer"}, {"role": "user", "content": "More?"}]
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history2, extra_headers=BACKGROUND)
    assert raw.headers["x-offload-action"] == "compress"
    assert raw.headers["x-offload-summary-tokens"] == "340"  # paid by the first response that uses it
    usage = raw.parse().usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (310, 45)
    sent = forwarded(upstream)[-1]
    assert sent[:2] == history[:2] and SNAPSHOT in sent[2]["content"] and sent[-4:] == history2[-4:]
    assert sent[3:-4] == [m for m in history2[2:-4] if m["role"] == "user"]  # later questions kept verbatim
    assert len(calls) == 1

    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history2, extra_headers=BACKGROUND)
    assert raw.headers["x-offload-action"] == "compress" and "x-offload-summary-tokens" not in raw.headers
    assert raw.parse().usage.prompt_tokens == 10  # paid once
    assert forwarded(upstream)[-1] == sent  # byte-stable
    # the summarised originals are stored under the summary's ref, reloadable
    ref = sent[2]["content"].split("ref=")[1].split(".")[0]
    content = httpx2.get(f"{proxy_url}/v1/offload/{ref}", headers={"authorization": f"Bearer {key}"}).json()
    assert [json.loads(line) for line in content["content"].splitlines()] == history[2:-2]


def test_a_background_summary_forwards_the_bytes_an_inline_one_would(make_proxy, upstream):
    upstream.handler, calls = gated_summaries()
    history = chat_history(12)
    inline = {**BACKGROUND, "X-Offload-Hard-Max-Tokens": "1"}  # above the hard limit: the turn waits
    sent = {}
    for name, headers in (("inline", inline), ("background", BACKGROUND)):
        summary_memo._records.clear()  # as if each proxy ran in a process of its own
        with make_proxy() as url:  # a store of its own each
            c = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-same", max_retries=0, timeout=20)
            raw = c.chat.completions.with_raw_response.create(model="gpt-4o", messages=history, extra_headers=headers)
            if name == "background":
                assert raw.headers["x-offload-action"] == "compress-pending"
                wait_for_event(url, "summary_ready", "sk-same")
                raw = c.chat.completions.with_raw_response.create(
                    model="gpt-4o", messages=history, extra_headers=headers
                )
            assert raw.headers["x-offload-action"] == "compress"
            sent[name] = forwarded(upstream)[-1]
    assert sent["inline"] == sent["background"] and SNAPSHOT in sent["inline"][2]["content"]
    assert len(calls) == 2


def test_above_the_hard_limit_the_turn_waits_for_its_summary(client, upstream):
    upstream.handler, calls = gated_summaries()
    history = chat_history(12)
    tokens = counter_for_model("gpt-4o").messages(history)
    headers = {**BACKGROUND, "X-Offload-Hard-Max-Tokens": str(tokens - 1)}
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history, extra_headers=headers)
    assert raw.headers["x-offload-action"] == "compress" and raw.headers["x-offload-summary-tokens"] == "340"
    assert len(calls) == 1 and SNAPSHOT in forwarded(upstream)[0][2]["content"]
    # just under it: the turn goes out without waiting
    headers["X-Offload-Hard-Max-Tokens"] = str(tokens)
    headers["X-Offload-Session"] = "bg-other"
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=chat_history(13), extra_headers=headers
    )
    assert raw.headers["x-offload-action"] == "compress"  # the summary of turn 12's prefix, reused


def test_a_summary_made_ahead_of_time_is_ready_when_the_trigger_is_crossed(client, upstream, proxy_url, key):
    upstream.handler, calls = gated_summaries()
    counter = counter_for_model("gpt-4o")
    before, after = chat_history(10), chat_history(12)
    # the trigger between the two: turn 10 folds 80-100 % of it (ahead of time), turn 12 crosses it
    foldable = lambda h: sum(map(counter.message, h[2:-2]))  # noqa: E731 - between the task and the kept tail
    limit = int(foldable(before) / 0.9)  # what the part after the task may hold: the trigger less the task
    assert 0.8 * limit <= foldable(before) <= limit < foldable(after)
    trigger = limit + counter.message(before[1])
    headers = {**BACKGROUND, "X-Offload-Max-Total-Tokens": str(trigger), "X-Offload-Precompress-Ratio": "0.8"}
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=before, extra_headers=headers)
    assert raw.headers["x-offload-action"] == "none"  # below the trigger: forwarded as it came
    assert forwarded(upstream)[0] == before
    wait_for_event(proxy_url, "summary_ready", key)
    assert len(calls) == 1

    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=after, extra_headers=headers)
    assert raw.headers["x-offload-action"] == "compress"  # ready: nobody waits, nothing is pending
    sent = forwarded(upstream)[-1]
    kept = [m for m in after[2 : len(before) - 2] if m["role"] == "user"]  # later questions, verbatim
    assert SNAPSHOT in sent[2]["content"] and sent[3:] == kept + after[len(before) - 2 :]
    assert len(calls) == 1


def test_concurrent_turns_on_two_replicas_make_one_summary(make_proxy, upstream, redis_url):
    gate = threading.Event()
    upstream.handler, calls = gated_summaries(gate)
    history = chat_history(14)
    headers = {**BACKGROUND, "X-Offload-Session": "bg-replicas"}
    with make_proxy(redis_url=redis_url) as one, make_proxy(redis_url=redis_url) as two:
        clients = [
            openai.OpenAI(base_url=f"{url}/v1", api_key="sk-replicas", max_retries=0, timeout=20) for url in (one, two)
        ]

        def turn(i: int) -> str:
            return (
                clients[i % 2]
                .chat.completions.with_raw_response.create(model="gpt-4o", messages=history, extra_headers=headers)
                .headers["x-offload-action"]
            )

        with ThreadPoolExecutor(6) as pool:
            actions = list(pool.map(turn, range(6)))
        assert set(actions) == {"compress-pending"}
        wait_until(lambda: len(calls) >= 1)
        time.sleep(0.3)  # any second job would have called the summariser by now
        assert len(calls) == 1
        gate.set()
        deadline = time.monotonic() + 20
        while turn(0) != "compress":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert turn(1) == "compress" and len(calls) == 1


def test_a_failed_background_summary_is_an_event_and_the_next_turn_tries_again(client, upstream, proxy_url, key):
    upstream.handler, calls = gated_summaries(fail=True)
    history = chat_history(12)
    headers = {**BACKGROUND, "X-Offload-Session": SESSION}
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history, extra_headers=headers)
    assert raw.headers["x-offload-action"] == "compress-pending" and raw.parse().choices[0].message.content
    failed = wait_for_event(proxy_url, "summary_failed", key)
    assert "500" in failed["reason"] and failed["duration_ms"] >= 0
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history, extra_headers=headers)
    assert raw.headers["x-offload-action"] == "compress-pending"
    wait_until(lambda: len(calls) == 2)


def test_shutdown_with_a_summary_in_flight_cancels_it_within_the_grace(upstream, tmp_path):
    gate = threading.Event()  # never set: the summariser hangs until the test ends
    upstream.handler, calls = gated_summaries(gate)
    args = ("--upstream", f"{upstream.url}/v1", "--shutdown-grace", "0.5", "--log-format", "text")
    proxy = ProxyProcess(*args, data_dir=tmp_path, capture=True)
    try:
        proxy.start()
        c = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="sk-shutdown", max_retries=0, timeout=20)
        raw = c.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=chat_history(12), extra_headers=BACKGROUND
        )
        assert raw.headers["x-offload-action"] == "compress-pending"
        wait_until(lambda: len(calls) == 1)
        err = proxy.stop()  # (its wait gives up at 15 s; the summariser would hold it until the test ends)
        assert "Traceback" not in err, err

        # its lock went with it: the same turn on a restarted proxy starts the summary again
        with ProxyProcess(*args, data_dir=tmp_path) as again:
            c = openai.OpenAI(base_url=f"{again.url}/v1", api_key="sk-shutdown", max_retries=0, timeout=20)
            raw = c.chat.completions.with_raw_response.create(
                model="gpt-4o", messages=chat_history(12), extra_headers=BACKGROUND
            )
            assert raw.headers["x-offload-action"] == "compress-pending"
            wait_until(lambda: len(calls) == 2)
    finally:
        gate.set()
        if proxy.proc is not None and proxy.proc.poll() is None:
            proxy.proc.kill()  # a failed assertion must not leave it running


def test_the_direct_api_reuses_a_summary_near_the_trigger_without_a_scheduler(proxy_url, upstream, key):
    """POST /v1/offload makes what it needs inline (no background): reusing a summary whose
    following part nears the trigger must not try to make the next one ahead of time."""
    upstream.handler, calls = gated_summaries()
    counter = counter_for_model("gpt-4o")
    headers = {**BACKGROUND, "authorization": f"Bearer {key}", "X-Offload-Precompress-Ratio": "0.8"}

    def offload(history):
        r = httpx2.post(f"{proxy_url}/v1/offload", json={"messages": history, "model": "gpt-4o"}, headers=headers)
        assert r.status_code == 200, r.text
        return r.json()

    settings = OffloadSettings(max_total_tokens=1500, precompress_ratio=0.8)
    keep = settings.keep_recent_for(cp.COMPRESS_KEEP_RECENT)
    head, cut = cp.split(chat_history(12), VIEW, keep)  # the first summary covers history[head:cut]
    first = offload(chat_history(12))
    assert first["action"] == "compress" and len(calls) == 1
    assert f"{cut - head} earlier messages" in first["messages"][2]["content"]

    def after_cut(history: list[dict]) -> tuple[int, int]:
        """The tokens after the first summary's cut (up to the kept tail), and the trigger: both
        by the counter in use, tiktoken or the estimate, as the proxy counts them."""
        tail = cp.split(history, VIEW, keep)[1]
        return (
            cp.tokens_between(history, VIEW, cut, end=tail, counter=counter),
            cp.trigger(history, VIEW, head, settings=settings, counter=counter),
        )

    longer = next(
        h
        for h in (chat_history(n) for n in range(13, 30))
        if after_cut(h)[0] >= settings.precompress_ratio * after_cut(h)[1]
    )
    tokens, trigger = after_cut(longer)
    assert tokens <= trigger  # reused, not made again: the part after it is under the trigger
    second = offload(longer)
    assert second["action"] == "compress" and second["messages"][2] == first["messages"][2]
    time.sleep(0.2)
    assert len(calls) == 1  # nothing made ahead of time either


def test_the_summary_message_carries_an_index_of_what_it_summarised(client, upstream, key):
    upstream.handler, calls = gated_summaries()
    history = agent_history(steps=6, lines=40)
    history.append({"role": "user", "content": "Now fix it."})
    headers = {**BACKGROUND, "X-Offload-Max-Total-Tokens": "1000", "X-Offload-Hard-Max-Tokens": "1"}
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history, extra_headers=headers)
    assert raw.headers["x-offload-action"] == "compress"
    summary = forwarded(upstream)[-1][2]["content"]  # after the system message and the task
    index = summary[summary.index("<index>") : summary.index("</index>")]
    assert "commands run: cat f0; cat f1" in index  # the commands the summarised calls ran, verbatim
    assert summary.index("</index>") < summary.index(SNAPSHOT)  # beside the snapshot, before it


def test_one_credential_cannot_take_every_background_slot_through_sub_tenants(make_proxy, upstream):
    gate = threading.Event()
    upstream.handler, calls = gated_summaries(gate)
    try:
        with make_proxy(summary_concurrency=2, summary_queue=0) as url:

            def turn(key: str, tenant: str) -> str:
                c = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=20)
                return c.chat.completions.with_raw_response.create(
                    model="gpt-4o", messages=chat_history(12), extra_headers={**BACKGROUND, "X-Offload-Tenant": tenant}
                ).headers["x-offload-action"]

            for sub in ("t1", "t2", "t3"):  # three namespaces of one credential
                assert turn("sk-greedy", sub) == "compress-pending"
            wait_until(lambda: len(calls) == 1)
            assert turn("sk-other", "t1") == "compress-pending"
            wait_until(lambda: len(calls) == 2)  # another credential still gets its slot
            assert [c.headers["authorization"] for c in calls] == ["Bearer sk-greedy", "Bearer sk-other"]
    finally:
        gate.set()
