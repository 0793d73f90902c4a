"""One tenant's large request must not stall the others: its CPU-heavy planning runs off the
event loop, and a loop held up by CPU work never makes the store look down."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import threading
import time
from pathlib import Path

import httpx2
import pytest

from proxy.core.settings import OffloadSettings
from proxy.core.tokens import counter_for_model
from proxy.formats.chat import VIEW
from proxy.formats.responses import items_from_chat
from proxy.offload import cpu_pool, pipeline
from proxy.offload.records import RefStore
from proxy.store.base import StoreUnavailable
from proxy.store.guarded import GuardedStore
from proxy.store.sqlite import SQLiteStore
from tests.e2e.test_event_loop_stalls_compaction import probed
from tests.harness.history import agent_history, drawn_results, tool_history
from tests.harness.inflight import answered_while
from tests.harness.requests import post

pytestmark = pytest.mark.anyio


def burn(seconds: float) -> None:
    """CPU work on the calling thread (the event loop's, in these tests)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        hashlib.sha256(b"x" * 4096).digest()


# ---------------------------------------------------------------- the store's health


class _Inner(SQLiteStore):
    """SQLite, with a ping and a get that can be made to fail or hang."""

    def __init__(self, path: Path, ping: str = "ok", get: str = "ok") -> None:
        super().__init__(path)
        self.ping_mode, self.get_mode, self.pings = ping, get, 0

    async def ping(self) -> bool:
        self.pings += 1
        if self.ping_mode == "down":
            return False
        if self.ping_mode == "hung":
            await asyncio.sleep(60)
        return await super().ping()

    async def get(self, key: str, ttl: int | None = None) -> bytes | None:
        if self.get_mode == "fails":
            await asyncio.sleep(0.01)  # it would have failed at once, were the loop not held up
            raise StoreUnavailable("redis: Timeout reading from socket")
        return await super().get(key, ttl)


async def test_a_ping_held_up_by_a_busy_loop_does_not_mark_the_store_down(tmp_path):
    store = GuardedStore(_Inner(tmp_path), ping_timeout=0.3)
    assert await store.ping()
    ping = asyncio.ensure_future(store.ping())
    await asyncio.sleep(0)  # the ping is under way...
    burn(1.0)  # ...when the loop is held up for more than the ping timeout
    assert await ping
    assert store.available
    await store.close()


async def test_a_store_that_is_down_is_still_found_down_through_a_busy_loop(tmp_path):
    store = GuardedStore(_Inner(tmp_path, ping="down"), ping_timeout=0.3)
    ping = asyncio.ensure_future(store.ping())
    await asyncio.sleep(0)
    burn(1.0)
    assert not await ping  # the first answer came late; the second, on time, decides
    assert not store.available and store.inner.pings == 2
    await store.close()


async def test_a_hung_store_is_found_down_by_the_ping_timeout(tmp_path):
    store = GuardedStore(_Inner(tmp_path, ping="hung"), ping_timeout=0.3)
    assert not await asyncio.wait_for(store.ping(), 30)  # the ping hangs for 60 s: its timeout answered
    assert not store.available
    await store.close()


async def test_a_call_failing_only_after_a_busy_loop_leaves_the_decision_to_a_ping(tmp_path):
    store = GuardedStore(_Inner(tmp_path, get="fails"), ping_timeout=0.3)
    call = asyncio.ensure_future(store.get("k"))
    await asyncio.sleep(0)
    burn(1.0)
    with pytest.raises(StoreUnavailable):
        await call  # this request goes without the store...
    assert store.available  # ...but the store is not marked down for everyone
    await asyncio.sleep(0.5)
    assert store.available and store.inner.pings == 1  # a ping confirmed it
    with pytest.raises(StoreUnavailable):
        await store.get("k")  # a failure in time still marks it down at once
    assert not store.available
    await store.close()


# ---------------------------------------------------------------- planning off the loop


def test_large_means_much_text_or_many_messages():
    small = [{"role": "user", "content": "x" * 1000}] * 10
    assert not cpu_pool.CPU.for_messages(small).large
    assert cpu_pool.CPU.for_messages([{"role": "tool", "content": "x" * (cpu_pool.LARGE_CHARS + 1)}]).large
    assert cpu_pool.CPU.for_messages(
        [
            {"role": "user", "content": [{"type": "text", "text": "x" * 200_000}]},
            {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "y" * 100_000}}]},
        ]
    ).large
    many = cpu_pool.CPU.for_messages([{"role": "user", "content": "x"}] * (cpu_pool.LARGE_MESSAGES + 1))
    assert many.large and many.many
    assert not cpu_pool.CPU.for_messages([{"role": "tool", "content": "x" * 300_000}]).many
    # any shape: a Responses API item keeps its text elsewhere
    assert cpu_pool.CPU.for_messages([{"type": "function_call_output", "call_id": "c", "output": "x" * 300_000}]).large
    # a step over a small part of a large request stays inline
    large = cpu_pool.CPU.for_messages([{"role": "system", "content": "s"}, {"role": "tool", "content": "x" * 300_000}])
    assert large.large and not large.for_part([{"role": "system", "content": "s"}]).large
    assert not cpu_pool.INLINE.for_part([{"role": "tool", "content": "x" * 300_000}]).large  # small stays small
    # few messages holding many values but little text (a tool input of deep objects, an array of
    # numbers or empty strings): every value costs a visit of the token counter, as a character does
    deep: object = 1
    for _ in range(60):
        deep = {"a": [deep]}
    for value in ([deep] * 5_000, list(range(cpu_pool.LARGE_CHARS + 1)), [""] * (cpu_pool.LARGE_CHARS + 1)):
        tool_use = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"x": value}}]},
        ]
        assert cpu_pool.CPU.for_messages(tool_use).large
    # and it is measured only as far as the bound: the walk stops past it, at any depth (it runs on the loop)
    nested = [
        {"role": "user", "content": [{"type": "text", "text": "x" * (cpu_pool.LARGE_CHARS + 1)}, *[{"a": 1}] * 100_000]}
    ]
    assert cpu_pool.LARGE_CHARS < cpu_pool.text_size(nested, cpu_pool.LARGE_CHARS) < cpu_pool.LARGE_CHARS + 100


async def test_a_large_request_is_planned_and_encoded_off_the_loop(tmp_path, monkeypatch):
    threads: dict[str, set[str]] = {"plan": set(), "encode": set()}
    plan, encode = pipeline.plan_compaction, RefStore._encode

    def spy_plan(*args, **kwargs):
        threads["plan"].add(threading.current_thread().name)
        return plan(*args, **kwargs)

    def spy_encode(self, offloads):
        threads["encode"].add(threading.current_thread().name)
        return encode(self, offloads)

    monkeypatch.setattr(pipeline, "plan_compaction", spy_plan)
    monkeypatch.setattr(RefStore, "_encode", spy_encode)
    store = GuardedStore(SQLiteStore(tmp_path))
    settings = OffloadSettings(mode="compact", max_total_tokens=100, max_tool_message_tokens=100)

    async def prepare(size: int) -> pipeline.Prepared:
        messages = [
            {"role": "user", "content": "go"},
            {"role": "tool", "tool_call_id": "c", "content": "line\n" * size},
            {"role": "user", "content": "next"},
        ]
        return await pipeline.prepare(
            messages,
            settings,
            counter=counter_for_model("gpt-4o"),
            namespace="n" * 32,
            refs=RefStore(store, "n" * 32, 60),
            compressor=None,
            view=VIEW,
        )

    assert (await prepare(1000)).written  # 5 KB: inline
    assert threads == {"plan": {threading.current_thread().name}, "encode": {threading.current_thread().name}}
    threads["plan"].clear(), threads["encode"].clear()
    assert (await prepare(100_000)).written  # 500 KB: in the pool
    assert {name.split("_")[0] for name in threads["plan"] | threads["encode"]} == {"offload-cpu"}
    await store.close()


def _unique_words(chars: int, seed: int) -> str:
    rnd = random.Random(seed)  # never counted before: tiktoken has to do the work
    return " ".join(f"w{rnd.getrandbits(40):x}" for _ in range(chars // 12))


def test_a_large_request_does_not_stall_other_tenants(make_proxy, upstream):
    messages = [{"role": "user", "content": "go"}]
    for i in range(16):
        messages += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": f"c{i}", "content": _unique_words(500_000, time.time_ns() + i)},
        ]
    messages.append({"role": "user", "content": "next"})
    big = json.dumps({"model": "gpt-4o", "messages": messages}).encode()  # 8 MB, seconds of tiktoken
    small = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}

    def large_forwarded() -> bool:
        return any(r.headers.get("authorization") == "Bearer sk-large" for r in upstream.requests)

    def other_tenant() -> None:
        r = client.post(f"{url}/v1/chat/completions", json=small, headers={"authorization": "Bearer sk-other"})
        assert r.status_code == 200

    with make_proxy() as url, httpx2.Client(timeout=60) as client:
        other_tenant()
        result: dict = {}

        def large() -> None:
            result["response"] = httpx2.post(
                f"{url}/v1/chat/completions",
                content=big,
                timeout=300,
                headers={
                    "authorization": "Bearer sk-large",
                    "content-type": "application/json",
                    "X-Offload-Mode": "compact",
                },
            )

        thread = threading.Thread(target=large)
        thread.start()
        time.sleep(0.3)  # the body is in; its tokens are being counted
        # the other tenant's requests answered before the large one was planned and forwarded: a
        # loop held by its planning (seconds of tiktoken) would answer at most one in that time
        answered = answered_while(lambda: thread.is_alive() and not large_forwarded(), other_tenant, most=5, pause=0.02)
        thread.join()
    if counter_for_model("gpt-4o").encoder.name != "estimate":  # offline, counting is cheap: less to show
        assert answered >= 3, answered
    # and the store was not taken for down meanwhile: the large request itself was offloaded
    assert result["response"].status_code == 200 and result["response"].headers["x-offload-action"] == "compact"


def test_a_large_request_under_thresholds_the_client_raised_is_counted_off_the_loop(make_proxy, upstream, monkeypatch):
    """With its thresholds raised (`X-Offload-Max-Total-Tokens`, `-Max-Tool-Message-Tokens`: up
    to 10 million, the client's own choice) a request of megabytes is "too small to offload":
    its tokens were counted on the loop (5 MB held /healthz 3 s). Counted in the CPU pool."""
    from proxy.core.tokens import TokenCounter

    threads: list[str] = []
    count = TokenCounter.messages

    def spy(self, messages):
        messages = list(messages)
        if cpu_pool.text_size(messages) > cpu_pool.LARGE_CHARS:
            threads.append(threading.current_thread().name)
        return count(self, messages)

    monkeypatch.setattr(TokenCounter, "messages", spy)
    text = _unique_words(300_000, 38)
    with make_proxy() as url:
        r = httpx2.post(
            f"{url}/v1/chat/completions",
            timeout=120,
            json={"model": "gpt-4o", "messages": [{"role": "user", "content": text}]},
            headers={
                "authorization": "Bearer sk-raised",
                "X-Offload-Max-Total-Tokens": "10000000",
                "X-Offload-Max-Tool-Message-Tokens": "10000000",
            },
        )
    assert r.status_code == 200, r.text[:200]
    assert r.headers["x-offload-action"] == "none"  # too small to offload, by the thresholds it set
    assert upstream.chat_requests()[-1].json()["messages"][0]["content"] == text
    assert threads and {name.split("_")[0] for name in threads} == {"offload-cpu"}, threads


def test_the_split_of_a_large_request_of_few_messages_runs_off_the_loop(make_proxy, upstream, monkeypatch):
    """The compressor's split scans every block of every message for a provider compaction
    block: for few messages of many blocks (tens of MB) that is seconds on the loop."""
    from proxy.core import compression

    threads: set[str] = set()
    split = compression.split

    def spy(*args):
        threads.add(threading.current_thread().name)
        return split(*args)

    monkeypatch.setattr(compression, "split", spy)
    part = {"type": "text", "text": ""}
    messages = [{"role": ("user", "assistant")[i % 2], "content": [part] * 5_000} for i in range(41)]
    with make_proxy() as url:
        r = httpx2.post(
            f"{url}/v1/messages",
            json={"model": "claude-sonnet-4", "max_tokens": 5, "messages": messages},
            headers={"x-api-key": "sk-ant-own-0001", "anthropic-version": "2023-06-01"},
            timeout=60,
        )
    assert r.status_code == 200, r.text[:200]
    assert threads and {name.split("_")[0] for name in threads} == {"offload-cpu"}, threads


# ---------------------------------------------------------------- folding's diffs (issue 38)


@pytest.fixture
def planned_on(monkeypatch) -> set[str]:
    """The names of the threads the pipeline's plans ran on."""
    threads: set[str] = set()
    plan = pipeline.plan_compaction

    def spy(*args, **kwargs):
        threads.add(threading.current_thread().name)
        return plan(*args, **kwargs)

    monkeypatch.setattr(pipeline, "plan_compaction", spy)
    return threads


@pytest.mark.parametrize("fmt", ["chat", "responses"])
def test_a_request_whose_folds_may_diff_long_is_planned_off_the_loop(make_proxy, upstream, planned_on, fmt):
    """Issue 38's request: 25 results of 1,950 lines drawn from 120 short ones (297 KB, under
    the size that sends a request to the pool). Its diffs are bounded and its plan runs off the
    loop: it is answered, and /healthz answers all along."""
    messages = tool_history(drawn_results())
    assert cpu_pool.text_size(messages) < cpu_pool.LARGE_CHARS  # small by its size alone
    if fmt == "chat":
        path, body = "chat/completions", {"model": "gpt-4o", "messages": messages}
    else:
        path, body = "responses", {"model": "gpt-4o", "input": items_from_chat(messages)}
    raw = json.dumps(body).encode()
    assert 290_000 < len(raw) < 310_000
    answers: dict[str, httpx2.Response] = {}
    with make_proxy() as url:

        def large() -> None:
            answers["large"] = post(url, f"/v1/{path}", body=raw, key="sk-fold-stall", timeout=120)

        answered = probed(url, large)
    assert answers["large"].status_code == 200, answers["large"].text[:300]
    assert answered  # /healthz answered (each a 200) while the request was planned
    assert {name.split("_")[0] for name in planned_on} == {"offload-cpu"}, planned_on
    sent = (upstream.chat_requests() if fmt == "chat" else upstream.responses_requests())[-1].json()
    tool_results = (
        [m["content"] for m in sent["messages"] if m["role"] == "tool"]
        if fmt == "chat"
        else [i["output"] for i in sent["input"] if i.get("type") == "function_call_output"]
    )
    assert tool_results[-1] == messages[-2]["content"]  # the newest result whole; none was foldable


def test_many_small_results_whose_folds_each_cost_little_are_planned_off_the_loop(make_proxy, upstream, planned_on):
    """500 results of the same 20 short lines, each in another order (243 KB, 1,002 messages:
    small by its size and count): no pair aligns many lines, but each of the 7,864 pairs is
    read, counted and compared, about 0.9 s of Python that ran on the loop. Planned off it."""
    rnd = random.Random(38)
    lines = [f"line-{k:02d}-abcdefghijklm" for k in range(20)]
    results = ["\n".join(rnd.sample(lines, len(lines))) for _ in range(500)]
    messages = tool_history(results)
    assert cpu_pool.text_size(messages) < cpu_pool.LARGE_CHARS and len(messages) < cpu_pool.LARGE_MESSAGES
    with make_proxy() as url:
        r = httpx2.post(
            f"{url}/v1/chat/completions",
            json={"model": "gpt-4o", "messages": messages},
            timeout=120,
            headers={"authorization": "Bearer sk-fold-many"},
        )
    assert r.status_code == 200, r.text[:300]
    assert {name.split("_")[0] for name in planned_on} == {"offload-cpu"}, planned_on
    sent = upstream.chat_requests()[-1].json()["messages"]
    assert [m["content"] for m in sent if m["role"] == "tool"] == results  # none folded: every order differs


def test_an_ordinary_small_request_is_still_planned_inline(tmp_path, planned_on):
    store = GuardedStore(SQLiteStore(tmp_path))

    async def prepare() -> pipeline.Prepared:
        return await pipeline.prepare(
            agent_history(steps=12, lines=40),
            OffloadSettings(),
            counter=counter_for_model("gpt-4o"),
            namespace="n" * 32,
            refs=RefStore(store, "n" * 32, 60),
            compressor=None,
            view=VIEW,
        )

    asyncio.run(prepare())
    assert planned_on == {threading.current_thread().name}
    asyncio.run(store.close())


def test_a_large_body_is_searched_for_compaction_tokens_off_the_loop(make_proxy, upstream, monkeypatch):
    """Whether a body may hold a compaction token is a search of all its bytes: for a body of
    20 MB of screenshots, tens of ms on the loop each turn. Every search of a large body runs in
    the pool, in slices."""
    from proxy.core import jsonio
    from proxy.formats.json_body import LARGE_BODY
    from tests.harness.screens import data_url, screenshot

    threads: set[str] = set()
    contains = jsonio.contains

    def spy(raw: bytes, needle: bytes) -> bool:
        if len(raw) > LARGE_BODY:
            threads.add(threading.current_thread().name)
        return contains(raw, needle)

    monkeypatch.setattr(jsonio, "contains", spy)
    shots = [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(screenshot(step))}}]}
        for step in range(6)
    ]
    body = {"model": "gpt-4o", "messages": [*shots, {"role": "user", "content": "What changed?"}]}
    with make_proxy() as url:
        r = httpx2.post(
            f"{url}/v1/chat/completions", json=body, headers={"authorization": "Bearer sk-large"}, timeout=60
        )
    assert r.status_code == 200, r.text[:200]
    assert threads and {name.split("_")[0] for name in threads} == {"offload-cpu"}, threads
