"""A summary call whose answer breaks off mid-body (the upstream closes, resets or stalls after
its headers) is a failed summary: the turn goes out without it, with a warning, never a 5xx.

`summarizer._call` reads the body (`response.aread()`) outside the ProxyError mapping of
`Upstream.send`: an httpx2 transport error raised while reading it is not a SummaryFailed."""

from __future__ import annotations

import asyncio

from starlette.responses import JSONResponse, StreamingResponse

from tests.e2e.test_summary_requests import chat_turns, turn
from tests.harness.servers import completion, is_summary_call


async def broken_body():
    yield b'{"choices": [{"message": {"content": "<state_snapshot>half'
    await asyncio.sleep(0.05)
    raise ConnectionResetError("the upstream went away mid-body")


async def handler(request, rec):
    if is_summary_call(rec):
        return StreamingResponse(broken_body(), media_type="application/json")
    return JSONResponse(completion("Final answer"))


def test_a_summary_answer_cut_mid_body_does_not_fail_the_turn(make_proxy, upstream):
    upstream.handler = handler
    first, second = chat_turns()
    with make_proxy() as url:
        turn(url, "chat", first, "sk-cut-body")
        r = turn(url, "chat", second, "sk-cut-body")  # inline summary (hard limit 1): asserts 200 inside
        assert "compress" not in r.headers["x-offload-action"]
