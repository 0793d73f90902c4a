"""Issue 41: the request's record is handed down explicitly (no ContextVar below http/): two
tenants' turns at once, streamed and not, through the reload rounds, each tenant's bill holds its
own usage only."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor

import openai
from starlette.responses import JSONResponse, StreamingResponse

from tests.e2e.test_bill import ADMIN, chat_usage, openai_stream, totals
from tests.harness.history import agent_history
from tests.harness.servers import completion, is_summary_call, snapshot_answer


def test_two_tenants_at_once_are_billed_their_own_usage(make_proxy, upstream):
    a, b = f"sk-{uuid.uuid4().hex}", f"sk-{uuid.uuid4().hex}"
    usage = {a: chat_usage(5000, 0, 50), b: chat_usage(7, 0, 1)}

    async def handler(request, rec):
        if is_summary_call(rec):
            return snapshot_answer(rec)
        if not rec.path.endswith("completions"):
            return JSONResponse({"object": "list", "data": []})
        await asyncio.sleep(0.05)  # the two tenants' rounds interleave
        key = rec.headers["authorization"].removeprefix("Bearer ")
        body = rec.json()
        if body.get("stream"):
            return StreamingResponse(iter(openai_stream(body, usage[key])), media_type="text/event-stream")
        return JSONResponse({**completion("Hello there"), "usage": usage[key]})

    upstream.handler = handler
    turns = [(key, steps, stream) for steps, stream in ((4, False), (5, True), (6, False), (7, True)) for key in (a, b)]
    with make_proxy(admin_token=ADMIN, mode="compact", max_total_tokens=1000, max_tool_message_tokens=500) as url:

        def turn(key: str, steps: int, stream: bool) -> None:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)
            answer = client.chat.completions.create(model="gpt-4o", messages=agent_history(steps=steps), stream=stream)
            if stream:
                list(answer)

        with ThreadPoolExecutor(8) as pool:
            for done in [pool.submit(turn, *t) for t in turns]:
                done.result()
        bills = {key: totals(url, key, 4)["bill"]["calls"]["turn"] for key in (a, b)}
    assert bills[a]["answers"] == bills[b]["answers"] == 4
    assert bills[a]["tokens"]["output"] == 4 * 50 and bills[b]["tokens"]["output"] == 4
    assert bills[a]["tokens"]["uncached"] == 4 * 5000 and bills[b]["tokens"]["uncached"] == 4 * 7
