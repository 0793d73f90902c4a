"""How many reload rounds the proxy ran is visible: `X-Offload-Reload-Rounds` on an answer that
is not streamed, an SSE comment before a stream's end otherwise, which the openai and anthropic
SDKs skip (their streams parse as before)."""

from __future__ import annotations

import uuid

import httpx2
import openai

from tests.e2e import test_anthropic_clients as claude
from tests.e2e import test_responses_clients as responses
from tests.e2e.test_reload_e2e import HEADERS, call_then_echo
from tests.harness.history import agent_history

COMMENT = ": x-offload-reload-rounds: {}\n\n"

KEY = f"sk-rounds-{uuid.uuid4().hex}"  # a namespace of its own: other tests store the same histories


def chat_client(proxy_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{proxy_url}/v1", api_key=KEY, max_retries=0, timeout=20, default_headers=HEADERS)


def test_chat_answer_carries_the_reload_rounds_header(proxy_url, upstream):
    upstream.handler = call_then_echo(lambda ref: f'{{"ref": "{ref}"}}')
    raw = chat_client(proxy_url).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=agent_history(steps=3)
    )
    assert raw.headers["x-offload-reload-rounds"] == "1"
    assert raw.parse().choices[0].message.content.startswith("Told: ")
    upstream.reset()  # no call of an injected tool: no round, said as 0
    raw = chat_client(proxy_url).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=agent_history(steps=3)
    )
    assert raw.headers["x-offload-reload-rounds"] == "0"


def test_chat_stream_ends_with_the_rounds_comment_the_sdk_skips(proxy_url, upstream):
    upstream.handler = call_then_echo(lambda ref: f'{{"ref": "{ref}"}}', stream=True)
    stream = chat_client(proxy_url).chat.completions.create(
        model="gpt-4o", messages=agent_history(steps=3), stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text.startswith("Looking. Told: ")  # the hidden round's text streams as it comes
    with httpx2.stream(
        "POST",
        f"{proxy_url}/v1/chat/completions",
        timeout=20,
        headers={"authorization": f"Bearer {KEY}", **HEADERS},
        json={"model": "gpt-4o", "messages": agent_history(steps=3), "stream": True},
    ) as r:
        body = r.read().decode()
    assert "x-offload-reload-rounds" not in r.headers  # not known when the headers go out
    assert body.endswith(COMMENT.format(1) + "data: [DONE]\n\n"), body[-300:]


def test_responses_stream_ends_with_the_rounds_comment_the_sdk_skips(proxy_url, upstream):
    upstream.handler = responses.reload_then_answer()
    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key=KEY, max_retries=0, timeout=20)
    raw = client.responses.with_raw_response.create(
        model="gpt-5", input=responses.history(), tools=responses.TOOLS, extra_headers=responses.HEADERS
    )
    assert raw.headers["x-offload-reload-rounds"] == "1"
    upstream.handler = responses.reload_then_answer()
    with client.responses.stream(
        model="gpt-5", input=responses.history(), tools=responses.TOOLS, extra_headers=responses.HEADERS
    ) as stream:
        responses.assert_one_stream(list(stream))
    upstream.handler = responses.reload_then_answer()
    with httpx2.stream(
        "POST",
        f"{proxy_url}/v1/responses",
        timeout=20,
        headers={"authorization": f"Bearer {KEY}", **responses.HEADERS},
        json={"model": "gpt-5", "input": responses.history(), "tools": responses.TOOLS, "stream": True},
    ) as r:
        body = r.read().decode()
    assert body.endswith(COMMENT.format(1)) and body.count("x-offload-reload-rounds") == 1


def test_messages_stream_ends_with_the_rounds_comment_the_sdk_skips(proxy_url, upstream):
    upstream.handler = claude.reload_then_answer()
    raw = claude.client(proxy_url).messages.with_raw_response.create(
        model=claude.MODEL, max_tokens=1024, messages=claude.history(), tools=claude.TOOLS
    )
    assert raw.headers["x-offload-reload-rounds"] == "1"
    upstream.handler = claude.reload_then_answer()
    with claude.client(proxy_url).messages.stream(
        model=claude.MODEL, max_tokens=1024, messages=claude.history(), tools=claude.TOOLS
    ) as stream:
        assert "".join(stream.text_stream) == claude.ANSWER
        assert stream.get_final_message().usage.output_tokens == 50
    upstream.handler = claude.reload_then_answer()
    body = {
        "model": claude.MODEL,
        "max_tokens": 1024,
        "messages": claude.history(),
        "tools": claude.TOOLS,
        "stream": True,
    }
    r = httpx2.post(
        f"{proxy_url}/v1/messages",
        json=body,
        timeout=20,
        headers={**claude.HEADERS, "x-api-key": "sk-ant-test-key", "anthropic-version": "2023-06-01"},
    )
    assert r.text.endswith(COMMENT.format(1)), r.text[-300:]
