"""The reload tools end to end against model behaviour that is hostile or unusual: catastrophic
search patterns, non-finite numbers, several choices, and clients with tools of the same name."""

from __future__ import annotations

import gc
import json
import threading
import time

import httpx2
import pytest
from starlette.responses import JSONResponse, StreamingResponse

from proxy.reload import search as search_pool
from tests.harness.history import agent_history, refs_sent
from tests.harness.inflight import answered_while
from tests.harness.requests import post
from tests.harness.servers import completion, sse, stream_chunks, tool_call
from tests.unit.reload.test_search import COMPILE_BOMBS, MB, compiled_here, rss, search_workers

HEADERS = {"X-Offload-Max-Total-Tokens": "1000", "X-Offload-Max-Tool-Message-Tokens": "500"}
RAW_HEADERS = {"authorization": "Bearer sk-test-key", **HEADERS}


def raw_call(name: str, arguments: str, id: str = "proxy_1") -> dict:
    return {"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}


def run_by_proxy(rec) -> dict | None:
    """The last message when it answers a call the upstream made to an injected tool (ids proxy_…)."""
    last = rec.json()["messages"][-1]
    return last if last["role"] == "tool" and last["tool_call_id"].startswith("proxy_") else None


def call_then_echo(arguments, *, name: str = "context_reload", stream: bool = False):
    """Upstream: 1st call → `name`(arguments(ref)); then a final answer quoting the tool result."""

    async def handler(request, rec):
        last = run_by_proxy(rec)
        if last is None:
            call = raw_call(name, arguments(refs_sent(rec)[0]))
            if stream:
                return StreamingResponse(
                    iter(stream_chunks("Looking.", tool_calls=[call])), media_type="text/event-stream"
                )
            return JSONResponse(completion("Looking.", tool_calls=[call]))
        if stream:
            return StreamingResponse(
                iter(stream_chunks("Told: " + last["content"][:60], id="chatcmpl-2")), media_type="text/event-stream"
            )
        return JSONResponse(completion("Told: " + last["content"]))

    return handler


def sse_events(text: str) -> list[str]:
    return [line[6:] for line in text.splitlines() if line.startswith("data: ")]


# ---------------------------------------------------------------- 1. search off the event loop


def search_through_the_proxy(url: str, upstream, history: list[dict], pattern: str) -> tuple[str, int]:
    """One chat request whose model calls context_search(pattern) on the first offloaded item.

    Returns (the search's result as the model got it, how many /healthz were answered while it
    ran: between the upstream's first call and its second, that the proxy makes once the search
    is done).
    """
    calls: list[str] = []

    async def handler(request, rec):
        if not rec.path.endswith("/chat/completions"):  # the proxy checking the client's key on /models
            return JSONResponse({"object": "list", "data": []})
        last = run_by_proxy(rec)
        calls.append("search" if last is None else "answer")
        if last is None:
            args = json.dumps({"pattern": pattern, "ref": refs_sent(rec)[0]})
            return JSONResponse(completion(None, tool_calls=[raw_call("context_search", args)]))
        return JSONResponse(completion(last["content"]))

    upstream.handler = handler
    with httpx2.Client(base_url=url, timeout=30) as probe:
        probe.get("/healthz")  # a warm connection: what is probed is the worker, not a handshake
        result: dict = {}
        chat = threading.Thread(
            target=lambda: result.update(
                r=post(
                    url, json={"model": "gpt-4o", "messages": history}, key="sk-search", headers=HEADERS, timeout=120
                )
            )
        )
        chat.start()
        while not calls and chat.is_alive():
            time.sleep(0.01)
        answered = answered_while(
            lambda: calls == ["search"], lambda: probe.get("/healthz").raise_for_status(), pause=0.05
        )
        chat.join(120)
    assert calls == ["search", "answer"], calls
    return result["r"].json()["choices"][0]["message"]["content"], answered


def test_catastrophic_search_leaves_the_worker_free_and_stops_at_its_deadline(make_proxy, upstream):
    history = agent_history(steps=2)
    history[3]["content"] = "".join("a" * 40 + "!\n" for _ in range(2000))  # (a|a)+$ backtracks on every line
    with make_proxy(search_timeout=1.5) as url:
        answer, answered = search_through_the_proxy(url, upstream, history, "(a|a)+$")
    # the match runs its whole deadline: a worker held by it would answer nothing meanwhile (and
    # at most one /healthz between the match's end and the next upstream call)
    assert answered >= 3, answered
    assert answer.startswith("No match for '(a|a)+$' so far.")
    assert "Search stopped early" in answer and "time limit of 1.5 s" in answer


def test_compile_bombs_leave_the_worker_free_and_no_process_behind(make_proxy, upstream, monkeypatch):
    """Patterns that fool a check before compiling, or that regex's timeout cannot stop, are
    compiled and matched in a worker process: never in the proxy's (whose event loop and
    memory they would hold), the search ends at its deadline, and no worker outlives the app."""
    history = agent_history(steps=2)
    gc.collect()
    others = set(search_workers())  # other proxies of this test session (the shared one) keep theirs
    with make_proxy(search_timeout=1.5) as url:
        search_through_the_proxy(url, upstream, history, "step0 line 3:")  # a worker is running: measure from here
        before = rss()
        here = compiled_here(monkeypatch)
        for pattern in COMPILE_BOMBS[:3]:  # in this order: a proxy compiling in-process fails before the last
            answer, _ = search_through_the_proxy(url, upstream, history, pattern)
            assert pattern not in here, pattern
            assert rss() - before < 100 * MB, (pattern, (rss() - before) // MB)
            assert answer.startswith((f"The pattern {pattern!r} is too expensive", f"No match for {pattern!r}")), (
                pattern,
                answer,
            )
        assert "Search stopped early" in answer  # ((?1)|a): out of memory, or killed at its deadline
        answer, _ = search_through_the_proxy(url, upstream, history, "step0 line 7:")  # on a new worker
        assert answer.startswith("ref=") and "step0 line 7: value=49" in answer
        # the killed ones are gone (each request offered the tools warms the pool: up to WORKERS)
        assert 1 <= len(set(search_workers(zombies=False)) - others) <= search_pool.WORKERS
    assert set(search_workers()) - others == set()


# ---------------------------------------------------------------- 2. arguments the model gets wrong

BAD_OFFSETS = ["Infinity", "-Infinity", "NaN", "1e999", "1" + "0" * 40, '"12"', "true", "[3]"]


@pytest.mark.parametrize("offset", BAD_OFFSETS)
def test_bad_offset_is_answered_to_the_model(client, upstream, offset):
    upstream.handler = call_then_echo(lambda ref: f'{{"ref": "{ref}", "offset": {offset}}}')
    result = client.chat.completions.create(model="gpt-4o", messages=agent_history(steps=4), extra_headers=HEADERS)
    told = upstream.chat_requests()[1].json()["messages"][-1]["content"]
    assert told.startswith("Invalid arguments for context_reload: offset must be")
    assert result.choices[0].message.content == "Told: " + told


@pytest.mark.parametrize("offset", ["Infinity", "1e999", '"12"'])
def test_bad_offset_in_a_stream_is_answered_to_the_model(proxy_url, upstream, offset):
    upstream.handler = call_then_echo(lambda ref: f'{{"ref": "{ref}", "offset": {offset}}}', stream=True)
    with httpx2.stream(
        "POST",
        f"{proxy_url}/v1/chat/completions",
        headers=RAW_HEADERS,
        timeout=20,
        json={"model": "gpt-4o", "messages": agent_history(steps=4), "stream": True},
    ) as r:
        events = sse_events(r.read().decode())
    assert r.status_code == 200 and events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert not [c for c in chunks if "error" in c]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    assert "Told: Invalid arguments for context_reload" in text


def test_a_round_failing_midway_ends_the_stream_with_error_then_done(proxy_url, upstream):
    async def handler(request, rec):
        if run_by_proxy(rec) is None:
            call = raw_call("context_reload", json.dumps({"ref": refs_sent(rec)[0]}))
            return StreamingResponse(iter(stream_chunks("Looking.", tool_calls=[call])), media_type="text/event-stream")
        return StreamingResponse(
            iter([sse({"choices": [{"index": 0, "delta": 5}]}), sse("[DONE]")]), media_type="text/event-stream"
        )

    upstream.handler = handler
    with httpx2.stream(
        "POST",
        f"{proxy_url}/v1/chat/completions",
        headers=RAW_HEADERS,
        timeout=20,
        json={"model": "gpt-4o", "messages": agent_history(steps=4), "stream": True},
    ) as r:
        events = sse_events(r.read().decode())
    assert events[-1] == "[DONE]" and json.loads(events[-2])["error"]["type"] == "server_error"


# ---------------------------------------------------------------- 3. several choices


def multi_choice_stream(*steps: tuple[int, dict, str | None]) -> list[bytes]:
    base = {"id": "chatcmpl-n", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-4o"}
    out = [
        sse({**base, "choices": [{"index": i, "delta": d, "logprobs": None, "finish_reason": f}]}) for i, d, f in steps
    ]
    return out + [sse("[DONE]")]


def test_streamed_choices_never_show_injected_calls(client, upstream):
    def calls(name: str, arguments: str, id: str) -> dict:
        return {
            "tool_calls": [
                {"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": arguments}}
            ]
        }

    async def handler(request, rec):
        if run_by_proxy(rec) is None:
            ref = refs_sent(rec)[0]
            steps = [
                (0, {"role": "assistant", "content": "A looks. "}, None),
                (1, {"role": "assistant", "content": "B looks. "}, None),
                (0, calls("context_reload", json.dumps({"ref": ref}), "proxy_r0"), None),
                (1, calls("context_search", json.dumps({"pattern": "step1"}), "s1"), None),
                (1, {}, "tool_calls"),
                (0, {}, "tool_calls"),
            ]
        else:
            steps = [
                (0, {"role": "assistant", "content": "A answers."}, None),
                (1, {"content": "B twice"}, None),
                (0, {}, "stop"),
                (1, {}, "stop"),
            ]
        return StreamingResponse(iter(multi_choice_stream(*steps)), media_type="text/event-stream")

    upstream.handler = handler
    chunks = list(
        client.chat.completions.create(
            model="gpt-4o", messages=agent_history(steps=4), n=2, stream=True, extra_headers=HEADERS
        )
    )
    choices = [c for chunk in chunks for c in chunk.choices]
    assert not [c for c in choices if c.delta.tool_calls]
    assert sorted((c.index, c.finish_reason) for c in choices if c.finish_reason) == [(0, "stop"), (1, "stop")]
    assert "".join(c.delta.content or "" for c in choices if c.index == 0) == "A looks. A answers."
    assert "".join(c.delta.content or "" for c in choices if c.index == 1) == "B looks. "
    assert len(upstream.chat_requests()) == 2


def test_non_streamed_choices_never_show_injected_calls(client, upstream):
    async def handler(request, rec):
        body = completion("final")
        if run_by_proxy(rec) is None:
            ref = refs_sent(rec)[0]
            body = completion(None, tool_calls=[tool_call("context_reload", {"ref": ref}, id="proxy_r0")])
        other = completion("B", tool_calls=[tool_call("context_search", {"pattern": "x"}, id="s1")])["choices"][0]
        body["choices"].append({**other, "index": 1})
        return JSONResponse(body)

    upstream.handler = handler
    result = client.chat.completions.create(model="gpt-4o", messages=agent_history(steps=4), n=2, extra_headers=HEADERS)
    assert [c.message.tool_calls for c in result.choices] == [None, None]
    assert [c.finish_reason for c in result.choices] == ["stop", "stop"]
    assert [c.message.content for c in result.choices] == ["final", "B"]


# ---------------------------------------------------------------- 4. the client's own tool of the same name

CLIENT_SEARCH = {
    "type": "function",
    "function": {
        "name": "context_search",
        "description": "the client's own",
        "parameters": {"type": "object", "properties": {}},
    },
}


@pytest.mark.parametrize("stream", [False, True])
def test_client_tool_named_like_an_injected_one_is_left_alone(client, upstream, stream):
    history = agent_history(steps=4)
    call = tool_call("context_search", {"query": "mine"}, id="client_call")
    if stream:
        upstream.handler = lambda request, rec: _async(
            StreamingResponse(iter(stream_chunks(None, tool_calls=[call])), media_type="text/event-stream")
        )
    else:
        upstream.handler = lambda request, rec: _async(JSONResponse(completion(None, tool_calls=[call])))
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=history, tools=[CLIENT_SEARCH], stream=stream, extra_headers=HEADERS
    )
    if stream:
        deltas = [tc for chunk in raw.parse() for c in chunk.choices for tc in (c.delta.tool_calls or [])]
        assert [d.function.name for d in deltas if d.function and d.function.name] == ["context_search"]
    else:
        assert [c.function.name for c in raw.parse().choices[0].message.tool_calls] == ["context_search"]
    (sent,) = upstream.chat_requests()
    names = [t["function"]["name"] for t in sent.json()["tools"]]
    assert names == ["context_search"]
    assert sent.json()["messages"] == history and not refs_sent(sent)  # nothing offloaded for this request
    assert "context_search" in raw.headers["x-offload-warning"]


async def _async(value):
    return value
