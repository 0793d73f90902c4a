"""End to end with the OpenAI SDK: compaction, proxy-run reload tools, tenants, sharing, restart."""

from __future__ import annotations

import json
import logging
import re
import time

import httpx2
import openai
import pytest
from starlette.responses import JSONResponse, StreamingResponse

from tests.harness.history import agent_history, refs_sent
from tests.harness.servers import completion, stream_chunks, tool_call

HEADERS = {"X-Offload-Max-Total-Tokens": "1000", "X-Offload-Max-Tool-Message-Tokens": "500"}


def reload_then_answer(*, stream: bool, tool: str = "context_reload", args=None, usage=(100, 10)):
    """Upstream: 1st call → a call to an injected tool on the first ref; 2nd call → a final answer."""

    async def handler(request, rec):
        body = rec.json()
        last = body["messages"][-1]
        if last["role"] != "tool" or not last["tool_call_id"].startswith("call_reload"):
            ref = refs_sent(rec)[0]
            call = tool_call(tool, args or {"ref": ref}, id="call_reload_1")
            if stream:
                return StreamingResponse(
                    iter(stream_chunks("Let me look.", tool_calls=[call], usage=usage)), media_type="text/event-stream"
                )
            return JSONResponse(completion("Let me look.", tool_calls=[call], usage=usage))
        answer = f"Got {len(last['content'])} chars"
        if stream:
            return StreamingResponse(
                iter(stream_chunks(answer, usage=usage, id="chatcmpl-second")), media_type="text/event-stream"
            )
        return JSONResponse(completion(answer, usage=usage, id="chatcmpl-second"))

    return handler


def test_long_history_is_compacted_and_reload_is_byte_exact(client, upstream):
    history = agent_history(steps=4)
    upstream.handler = reload_then_answer(stream=False)
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history, extra_headers=HEADERS)
    result = raw.parse()
    first, second = upstream.chat_requests()
    # what went upstream: compacted tool results, the injected tools, no X-Offload headers
    sent = first.json()
    assert [t["function"]["name"] for t in sent["tools"]] == ["context_reload", "context_search"]
    assert not [h for h in first.headers if h.startswith("x-offload")]
    assert len(refs_sent(first)) == 3
    assert int(raw.headers["x-offload-tokens-after"]) < int(raw.headers["x-offload-tokens-before"]) / 3
    assert raw.headers["x-offload-refs"] == "3"
    # the proxy ran the reload: the tool result is the original, byte for byte, nothing added
    reload_result = second.json()["messages"][-1]
    assert reload_result["content"] == history[3]["content"]
    # the client sees one normal completion, no trace of the injected tools, usage summed
    assert result.choices[0].message.content == f"Got {len(history[3]['content'])} chars"
    assert result.choices[0].message.tool_calls is None
    assert result.usage.prompt_tokens == 200 and result.usage.total_tokens == 220


def test_refs_headers_agree_with_the_log_on_a_repeated_request(client, upstream, caplog):
    history = agent_history(steps=4)
    headers = {**HEADERS, "X-Offload-Tenant": "refs-count", "X-Offload-Reload-Tools": "off"}
    counts = []
    with caplog.at_level(logging.INFO, logger="proxy.access"):
        for _ in range(2):
            raw = client.chat.completions.with_raw_response.create(
                model="gpt-4o", messages=history, extra_headers=headers
            )
            counts.append((raw.headers["x-offload-refs"], raw.headers["x-offload-refs-created"]))
        deadline = time.monotonic() + 5
        while len([r for r in caplog.records if r.name == "proxy.access"]) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    logged = [json.loads(r.getMessage()) for r in caplog.records if r.name == "proxy.access"][-2:]
    assert counts == [("3", "3"), ("3", "0")]  # the second stored nothing but still carries 3 references
    assert [(str(line["refs"]), str(line["refs_created"])) for line in logged] == counts


def test_streaming_reload_is_one_seamless_stream(client, upstream):
    history = agent_history(steps=4)
    upstream.handler = reload_then_answer(stream=True)
    stream = client.chat.completions.create(
        model="gpt-4o", messages=history, stream=True, extra_headers=HEADERS, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == f"Let me look. Got {len(history[3]['content'])} chars "
    assert {c.id for c in chunks} == {"chatcmpl-fake"}
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    usage_chunks = [c for c in chunks if c.usage]
    assert len(usage_chunks) == 1 and usage_chunks[0].usage.total_tokens == 220
    assert upstream.chat_requests()[1].json()["messages"][-1]["content"] == history[3]["content"]


def test_mixed_calls_return_client_calls_only(client, upstream):
    history = agent_history(steps=4)

    async def handler(request, rec):
        ref = refs_sent(rec)[0]
        calls = [tool_call("context_reload", {"ref": ref}, id="c1"), tool_call("bash", {"cmd": "ls"}, id="c2")]
        if rec.json().get("stream"):
            return StreamingResponse(iter(stream_chunks(None, tool_calls=calls)), media_type="text/event-stream")
        return JSONResponse(completion(None, tool_calls=calls))

    upstream.handler = handler
    result = client.chat.completions.create(model="gpt-4o", messages=history, extra_headers=HEADERS)
    assert [c.function.name for c in result.choices[0].message.tool_calls] == ["bash"]
    assert len(upstream.chat_requests()) == 1
    chunks = list(client.chat.completions.create(model="gpt-4o", messages=history, stream=True, extra_headers=HEADERS))
    deltas = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert {d.function.name for d in deltas if d.function and d.function.name} == {"bash"}
    assert {d.index for d in deltas} == {0}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_rounds_are_bounded_and_last_round_has_no_injected_tools(client, upstream):
    history = agent_history(steps=4)

    async def always_reload(request, rec):
        refs = refs_sent(rec)
        return JSONResponse(
            completion(
                None, tool_calls=[tool_call("context_reload", {"ref": refs[0]}, id=f"r{len(upstream.requests)}")]
            )
        )

    upstream.handler = always_reload
    result = client.chat.completions.create(
        model="gpt-4o", messages=history, extra_headers={**HEADERS, "X-Offload-Max-Reload-Rounds": "2"}
    )
    requests = upstream.chat_requests()
    assert len(requests) == 3
    assert ["context_reload" in json.dumps(r.json().get("tools", [])) for r in requests] == [True, True, False]
    assert result.choices[0].message.tool_calls is None


def test_pagination_and_search(client, upstream):
    history = agent_history(steps=4, lines=2000)
    pages = []

    async def handler(request, rec):
        messages = rec.json()["messages"]
        last = messages[-1]
        ref = refs_sent(rec)[0]
        if last["role"] == "tool" and last["tool_call_id"].startswith("p"):
            pages.append(last["content"])
            nxt = re.search(r"offset=(\d+)\)", last["content"])
            if nxt:
                return JSONResponse(
                    completion(
                        None,
                        tool_calls=[
                            tool_call("context_reload", {"ref": ref, "offset": int(nxt.group(1))}, id=f"p{len(pages)}")
                        ],
                    )
                )
            return JSONResponse(
                completion(None, tool_calls=[tool_call("context_search", {"pattern": r"STEP0 LINE 17\b"}, id="s1")])
            )
        if last["role"] == "tool" and last["tool_call_id"] == "s1":
            return JSONResponse(completion(last["content"]))
        return JSONResponse(completion(None, tool_calls=[tool_call("context_reload", {"ref": ref}, id="p0")]))

    upstream.handler = handler
    result = client.chat.completions.create(
        model="gpt-4o",
        messages=history,
        extra_headers={**HEADERS, "X-Offload-Max-Reload-Tokens": "8000", "X-Offload-Max-Reload-Rounds": "20"},
    )
    assert len(pages) > 1
    body = "".join(p.rsplit("\n", 1)[0] for p in pages)
    assert body == history[3]["content"]
    assert "line 17:" in result.choices[0].message.content and "step0" in result.choices[0].message.content


def test_unknown_ref_answers_the_model_not_the_client(client, upstream):
    upstream.handler = reload_then_answer(stream=False, args={"ref": "doesNotExist123"})
    history = agent_history(steps=4)
    client.chat.completions.create(model="gpt-4o", messages=history, extra_headers=HEADERS)
    assert "not available" in upstream.chat_requests()[1].json()["messages"][-1]["content"]


def test_two_credentials_cannot_read_each_others_refs(proxy_url, upstream):
    history = agent_history(steps=4)
    alice = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key="sk-alice", max_retries=0)
    bob = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key="sk-bob", max_retries=0)
    upstream.handler = reload_then_answer(stream=False)
    alice.chat.completions.create(model="gpt-4o", messages=history, extra_headers=HEADERS)
    alice_ref = refs_sent(upstream.chat_requests()[0])[0]
    upstream.reset()
    # bob's model asks for alice's ref
    upstream.handler = reload_then_answer(stream=False, args={"ref": alice_ref})
    bob.chat.completions.create(model="gpt-4o", messages=agent_history(steps=4, lines=250), extra_headers=HEADERS)
    assert "not available" in upstream.chat_requests()[1].json()["messages"][-1]["content"]
    # and through the direct API
    assert (
        httpx2.get(f"{proxy_url}/v1/offload/{alice_ref}", headers={"authorization": "Bearer sk-bob"}).status_code == 404
    )
    ok = httpx2.get(f"{proxy_url}/v1/offload/{alice_ref}", headers={"authorization": "Bearer sk-alice"})
    assert ok.status_code == 200 and ok.json()["content"] == history[3]["content"]
    # the tenant header is part of the namespace too
    other = httpx2.get(
        f"{proxy_url}/v1/offload/{alice_ref}",
        headers={"authorization": "Bearer sk-alice", "x-offload-tenant": "team-b"},
    )
    assert other.status_code == 404


def test_bad_header_is_a_400_naming_it(client, upstream):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "x"}],
            extra_headers={"X-Offload-Max-Total-Tokens": "lots"},
        )
    assert "X-Offload-Max-Total-Tokens" in info.value.body["message"]
    assert info.value.body["param"] == "X-Offload-Max-Total-Tokens"
    assert not upstream.requests


def test_direct_offload_api(proxy_url, upstream):
    history = agent_history(steps=4)
    r = httpx2.post(
        f"{proxy_url}/v1/offload",
        json={"messages": history, "model": "gpt-4o"},
        headers={"authorization": "Bearer sk-direct", **HEADERS, "X-Offload-Mode": "compact"},
    )
    data = r.json()
    assert r.status_code == 200 and len(data["refs"]) == 3 and data["tokens_after"] < data["tokens_before"]
    assert len(data["messages"]) == len(history)
    ref = data["refs"][0]["ref"]
    back = httpx2.get(f"{proxy_url}/v1/offload/{ref}", headers={"authorization": "Bearer sk-direct"}).json()
    assert back["content"] == history[3]["content"]
    # no completion asked; the client's own key was checked once with the upstream before storing
    assert [(r.method, r.path, r.headers["authorization"]) for r in upstream.requests] == [
        ("GET", "/v1/models", "Bearer sk-direct")
    ]


@pytest.mark.parametrize("backend", ["embedded", "redis", "cluster"])
def test_refs_shared_between_processes_and_survive_restart(make_proxy, upstream, tmp_path, backend, request):
    store = {
        "embedded": lambda: {"data_dir": tmp_path},
        "redis": lambda: {"redis_url": request.getfixturevalue("redis_url")},
        "cluster": lambda: {"redis_url": request.getfixturevalue("redis_cluster_url")},
    }[backend]()
    history = agent_history(steps=4)
    with make_proxy(**store) as first:
        httpx2.post(
            f"{first}/v1/chat/completions",
            json={"model": "gpt-4o", "messages": history},
            headers={"authorization": "Bearer sk-shared", **HEADERS},
        )
        ref = refs_sent(upstream.chat_requests()[0])[0]
        with make_proxy(**store) as second:  # another process on the same store
            r = httpx2.get(f"{second}/v1/offload/{ref}", headers={"authorization": "Bearer sk-shared"})
            assert r.json()["content"] == history[3]["content"]
    with make_proxy(**store) as restarted:
        r = httpx2.get(f"{restarted}/v1/offload/{ref}", headers={"authorization": "Bearer sk-shared"})
        assert r.json()["content"] == history[3]["content"]
