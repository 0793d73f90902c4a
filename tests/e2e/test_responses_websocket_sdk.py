"""The OpenAI Python SDK's own Responses WebSocket client (`client.responses.connect()`, the
`openai[realtime]` extra), unchanged, against the proxy: responses in sequence on one
connection, a `store: false` continuation, the managed turn (offloaded tool output, the hidden
reload round), typed events; and the async client."""

from __future__ import annotations

import asyncio

import openai
import pytest

from tests.e2e.test_responses_websocket import LINES, SEQ, SETTINGS, shell_handler
from tests.harness.responses import REF, input_items


@pytest.fixture(scope="module")
def sdk_proxy(make_proxy):
    with make_proxy(**SETTINGS) as url:
        yield url


def until_done(connection) -> tuple[list[str], object]:
    kinds = []
    for event in connection:
        kinds.append(event.type)
        if event.type in ("response.completed", "error"):
            return kinds, event
    raise AssertionError("the connection closed before the response finished")


def test_the_sdk_connection_runs_a_managed_session(sdk_proxy, upstream):
    upstream.handler = shell_handler
    client = openai.OpenAI(base_url=f"{sdk_proxy}/v1", api_key="sk-sdk-key", max_retries=0)
    tools = [{"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {}}}]
    with client.responses.connect() as connection:
        connection.response.create(
            model="gpt-5", store=False, tools=tools, input=[{"type": "message", "role": "user", "content": "run it"}]
        )
        kinds, done = until_done(connection)
        assert kinds[0] == "response.created" and done.type == "response.completed"
        [call] = done.response.output
        assert call.type == "function_call" and call.name == "shell"
        connection.response.create(
            model="gpt-5",
            store=False,
            tools=tools,
            previous_response_id=done.response.id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": SEQ}],
        )
        kinds, done = until_done(connection)
        assert done.type == "response.completed", done
        assert done.response.output_text == f"RELOADED {LINES} lines"
        assert "response.output_text.delta" in kinds
    offloaded = input_items(upstream.responses_requests()[1])[-1]["output"]
    assert offloaded.startswith("[offloaded tool result: ") and len(REF.findall(offloaded)) == 1


def test_the_async_sdk_connection(sdk_proxy, upstream):
    async def run() -> list[str]:
        client = openai.AsyncOpenAI(base_url=f"{sdk_proxy}/v1", api_key="sk-sdk-key", max_retries=0)
        texts = []
        async with client.responses.connect() as connection:
            previous = None
            for text in ("one", "two"):
                await connection.response.create(
                    model="gpt-5", store=False, input=text, **({"previous_response_id": previous} if previous else {})
                )
                async for event in connection:
                    if event.type == "response.completed":
                        previous = event.response.id
                        texts.append(event.response.output_text)
                        break
                    assert event.type != "error", event
        return texts

    assert asyncio.run(run()) == ["Hello there", "Hello there"]
    last = upstream.responses_requests()[-1].json()
    assert [i["role"] for i in last["input"]] == ["user", "assistant", "user"]


def test_the_sdk_reads_a_refusal_as_an_error_event(sdk_proxy, upstream):
    client = openai.OpenAI(base_url=f"{sdk_proxy}/v1", api_key="sk-sdk-key", max_retries=0)
    with client.responses.connect() as connection:
        connection.response.create(model="gpt-5", store=False, input="x", previous_response_id="resp_gone")
        _, error = until_done(connection)
        assert error.type == "error" and error.error.code == "previous_response_not_found"
        assert error.status == 400
