"""Chat completions with nothing to offload: byte-exact both ways, streaming unbuffered, errors."""

from __future__ import annotations

import asyncio
import threading

import httpx2
import openai
import pytest
from starlette.responses import JSONResponse, Response, StreamingResponse

from tests.harness.servers import completion, free_port, stream_chunks, wait_for

MESSAGES = [{"role": "user", "content": "Say hello"}]


def test_sdk_non_streaming(client, upstream):
    result = client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert result.choices[0].message.content == "Hello there"
    assert result.usage.total_tokens == 15


def test_sdk_streaming(client):
    stream = client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "Hello there "


@pytest.mark.anyio
async def test_async_sdk_both_ways(aclient):
    result = await aclient.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert result.choices[0].message.content == "Hello there"
    stream = await aclient.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    assert "".join(parts) == "Hello there "


def test_request_and_response_bodies_are_byte_exact(proxy_url, upstream):
    sent = b'{ "model":"gpt-4o",\n "messages": [{"role":"user","content":"caf\\u00e9 \xe2\x98\x95"}], "temperature" : 0.70 }'
    answer = b'{"id":"x",  "object":"chat.completion","choices":[] ,"weird": 1.0e0}'

    async def handler(request, rec):
        return Response(answer, media_type="application/json")

    upstream.handler = handler
    r = httpx2.post(
        f"{proxy_url}/v1/chat/completions",
        content=sent,
        headers={"content-type": "application/json", "authorization": "Bearer k"},
    )
    assert upstream.requests[-1].body == sent
    assert r.content == answer


def test_stream_is_relayed_without_buffering(client, upstream):
    first_seen = threading.Event()
    chunks = stream_chunks("one two three")

    async def body():
        yield chunks[0] + chunks[1]
        assert await wait_for(first_seen), "client never saw the first chunk while upstream held the rest"
        for chunk in chunks[2:]:
            yield chunk

    async def handler(request, rec):
        return StreamingResponse(body(), media_type="text/event-stream")

    upstream.handler = handler
    stream = client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    received = []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            received.append(chunk.choices[0].delta.content)
            first_seen.set()  # the upstream is still holding back everything after "one"
    assert "".join(received) == "one two three "


@pytest.mark.parametrize(
    "status,exc",
    [
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_upstream_errors_relayed(client, upstream, status, exc, stream):
    body = {"error": {"message": f"boom {status}", "type": "x", "param": None, "code": f"c{status}"}}

    async def handler(request, rec):
        return JSONResponse(body, status_code=status, headers={"x-request-id": "req_err", "retry-after": "7"})

    upstream.handler = handler
    with pytest.raises(exc) as info:
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=stream)
    err = info.value
    assert err.status_code == status
    assert err.body["message"] == f"boom {status}" and err.body["code"] == f"c{status}"
    assert err.response.headers["x-request-id"] == "req_err"
    assert err.response.headers["retry-after"] == "7"


def test_malformed_json_is_400(proxy_url, upstream):
    r = httpx2.post(
        f"{proxy_url}/v1/chat/completions",
        content=b"{not json",
        headers={"content-type": "application/json", "authorization": "Bearer sk-test-key"},
    )
    assert r.status_code == 400
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert not upstream.requests


def test_upstream_down_is_502(make_proxy):
    with make_proxy(upstream=f"http://127.0.0.1:{free_port()}/v1") as url:
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.InternalServerError) as info:
            c.chat.completions.create(model="gpt-4o", messages=MESSAGES)
        assert info.value.status_code == 502
        assert info.value.body["code"] == "upstream_unreachable"
        with pytest.raises(openai.InternalServerError):
            c.models.list()


def test_upstream_timeout_is_504(make_proxy, upstream):
    async def handler(request, rec):
        await asyncio.sleep(3)
        return JSONResponse(completion())

    upstream.handler = handler
    with make_proxy(read_timeout=0.3) as url:
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        with pytest.raises(openai.APIStatusError) as info:
            c.chat.completions.create(model="gpt-4o", messages=MESSAGES)
        assert info.value.status_code == 504
        assert info.value.body["code"] == "upstream_timeout"


def test_long_silences_within_read_timeout_do_not_cut_a_stream(make_proxy, upstream):
    chunks = stream_chunks("slow but steady")

    async def body():
        for chunk in chunks:
            await asyncio.sleep(0.4)
            yield chunk

    async def handler(request, rec):
        return StreamingResponse(body(), media_type="text/event-stream")

    upstream.handler = handler
    # each silence 0.4 s, far below the read timeout (a loaded machine delays a chunk by less than
    # the 1.6 s left); the whole stream ≈ 2.4 s, past it
    with make_proxy(read_timeout=2) as url:
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        stream = c.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
        text = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
    assert text == "slow but steady "


def _watching_handler(saw_disconnect: threading.Event, streaming: bool):
    async def wait_for_disconnect(request):
        for _ in range(200):
            if await request.is_disconnected():
                saw_disconnect.set()
                return
            await asyncio.sleep(0.05)

    async def handler(request, rec):
        if not streaming:
            await wait_for_disconnect(request)
            return JSONResponse(completion())

        async def body():
            yield stream_chunks("first")[0]
            for _ in range(200):
                await asyncio.sleep(0.05)
                yield b": keep-alive\n\n"

        async def on_close():
            saw_disconnect.set()

        async def guarded():
            try:
                async for part in body():
                    yield part
            finally:
                await on_close()

        return StreamingResponse(guarded(), media_type="text/event-stream")

    return handler


@pytest.mark.parametrize("streaming", [False, True])
def test_client_disconnect_cancels_upstream(proxy_url, upstream, streaming):
    saw_disconnect = threading.Event()
    upstream.handler = _watching_handler(saw_disconnect, streaming)
    body = {"model": "gpt-4o", "messages": MESSAGES, "stream": streaming}
    with httpx2.Client(timeout=httpx2.Timeout(5, read=0.5), headers={"authorization": "Bearer sk-test-key"}) as c:
        try:
            with c.stream("POST", f"{proxy_url}/v1/chat/completions", json=body) as r:
                for _ in r.iter_raw():
                    break  # got the first bytes, now hang up
        except httpx2.ReadTimeout:
            pass
    assert saw_disconnect.wait(30), "upstream request was not cancelled"
