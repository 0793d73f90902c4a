"""Limits (413, message count, header size), upstream streams breaking off, the reload time budget."""

from __future__ import annotations

import asyncio
import json

import httpx2
import openai
import pytest
from starlette.responses import JSONResponse, StreamingResponse

from tests.harness.history import agent_history, refs_sent
from tests.harness.servers import completion, default_handler, stream_chunks, tool_call

MESSAGES = [{"role": "user", "content": "hi"}]


def test_declared_body_too_large_is_413(make_proxy, upstream):
    with make_proxy(max_body_bytes=2048) as url:
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.APIStatusError) as info:
            c.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x" * 5000}])
        assert info.value.status_code == 413 and info.value.body["code"] == "request_too_large"
        assert "--max-body-bytes" in info.value.body["message"]  # what to raise
        small = c.chat.completions.create(model="gpt-4o", messages=MESSAGES)
        assert small.choices[0].message.content == "Hello there"

        def chunked():
            for _ in range(10):
                yield b"x" * 1000

        r = httpx2.post(
            f"{url}/v1/files", content=chunked(), headers={"authorization": "Bearer sk-test-key"}
        )  # no Content-Length: counted as it comes
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


def test_message_count_and_header_size_limits(make_proxy, upstream):
    with make_proxy(max_messages=3) as url:
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.BadRequestError) as info:
            c.chat.completions.create(model="gpt-4o", messages=MESSAGES * 4)
        assert info.value.body["code"] == "too_many_messages" and "--max-messages" in info.value.body["message"]
        r = httpx2.post(
            f"{url}/v1/offload",
            json={"model": "gpt-4o", "messages": MESSAGES * 4},
            headers={"authorization": "Bearer k"},
        )
        assert r.status_code == 400 and r.json()["error"]["code"] == "too_many_messages"  # the direct API too
        with pytest.raises(openai.BadRequestError) as info:
            c.chat.completions.create(model="gpt-4o", messages=MESSAGES, extra_headers={"X-Offload-Session": "s" * 300})
        assert "X-Offload-Session" in info.value.body["message"]
    assert not upstream.chat_requests()


def test_a_session_of_40000_messages_and_2m_tokens_is_served(proxy_url, upstream):
    """The longest sessions a managed client produces (its raw history grows without bound:
    the usage it reads is the reduced request's) go through at the default limits."""
    messages: list[dict] = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(19_999):
        messages += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"call_{i}", "type": "function", "function": {"name": "sh", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": f"call_{i}", "content": f"step {i}: " + "output word " * 40},
        ]
    messages.append({"role": "user", "content": "go on"})
    body = json.dumps({"model": "gpt-4o", "messages": messages}).encode()
    assert len(messages) == 40_000 and len(body) > 9_000_000
    r = httpx2.post(
        f"{proxy_url}/v1/chat/completions",
        content=body,
        timeout=300,
        headers={"authorization": "Bearer sk-long-session", "content-type": "application/json"},
    )
    assert r.status_code == 200, r.text[:300]
    assert int(r.headers["x-offload-tokens-before"]) > 1_800_000
    forwarded = upstream.chat_requests()[-1].json()["messages"]  # (this fake makes no summary: as it came)
    assert forwarded[0] == messages[0] and forwarded[-1] == messages[-1]


def _breaking_stream(after: int, how: str):
    chunks = stream_chunks("one two three four five six")

    async def body():
        for chunk in chunks[:after]:
            yield chunk
        if how == "close":
            raise RuntimeError("upstream dies mid-stream")  # uvicorn drops the connection
        await asyncio.sleep(60)  # "slow": silent past the proxy's read timeout

    async def handler(request, rec):
        return StreamingResponse(body(), media_type="text/event-stream")

    return handler


@pytest.mark.parametrize("how", ["close", "slow"])
def test_upstream_breaking_off_mid_stream_ends_with_an_error_event(make_proxy, upstream, how):
    upstream.handler = _breaking_stream(3, how)
    # a read timeout far above what a loaded machine takes between two chunks, far below the silence
    with make_proxy(read_timeout=2) as url:
        with httpx2.stream(
            "POST",
            f"{url}/v1/chat/completions",
            json={"model": "gpt-4o", "stream": True, "messages": MESSAGES},
            headers={"authorization": "Bearer sk-test-key"},
            timeout=30,
        ) as r:
            text = b"".join(r.iter_bytes()).decode()
        events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        error = json.loads(events[-2])["error"]
        assert error["code"] == ("upstream_error" if how == "close" else "upstream_timeout")
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.APIError):
            for _ in c.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True):
                pass


def test_upstream_breaking_off_during_a_reload_round(client, upstream):
    history = agent_history(steps=4)
    calls = {"n": 0}

    async def handler(request, rec):
        if not rec.path.endswith("/chat/completions"):  # the proxy checking a new key on /models
            return await default_handler(request, rec)
        calls["n"] += 1
        if calls["n"] == 1:
            call = tool_call("context_reload", {"ref": refs_sent(rec)[0]}, id="call_r")
            return StreamingResponse(iter(stream_chunks(None, tool_calls=[call])), media_type="text/event-stream")
        return await _breaking_stream(2, "close")(request, rec)

    upstream.handler = handler
    with pytest.raises(openai.APIError):
        for _ in client.chat.completions.create(
            model="gpt-4o", messages=history, stream=True, extra_headers={"X-Offload-Max-Total-Tokens": "1000"}
        ):
            pass
    assert calls["n"] == 2


def test_reload_rounds_are_bounded_by_time(make_proxy, upstream):
    history = agent_history(steps=4)

    async def always_reload(request, rec):
        await asyncio.sleep(0.3)
        return JSONResponse(
            completion(
                None,
                tool_calls=[tool_call("context_reload", {"ref": refs_sent(rec)[0]}, id=f"r{len(upstream.requests)}")],
            )
        )

    upstream.handler = always_reload
    with make_proxy(reload_budget=0.5) as url:
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        result = c.chat.completions.create(
            model="gpt-4o",
            messages=history,
            extra_headers={"X-Offload-Max-Total-Tokens": "1000", "X-Offload-Max-Reload-Rounds": "50"},
        )
    requests = upstream.chat_requests()
    # rounds of 0.3 s each in a budget of 0.5 s: at most two begun in it, then the last without tools
    # (a loaded machine only makes rounds slower: fewer); without the budget, 50 rounds
    assert 2 <= len(requests) <= 4
    assert "context_reload" not in json.dumps(requests[-1].json().get("tools", []))
    assert result.choices[0].message.tool_calls is None
