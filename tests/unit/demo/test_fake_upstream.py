"""The fake upstream's --reload-once model: each offloaded tool result reloaded once per endpoint."""

from __future__ import annotations

import json

import pytest

from proxy.core.texts import tool_result_marker
from proxy.demo import fake_upstream


@pytest.fixture
def reloading(monkeypatch):
    monkeypatch.setattr(fake_upstream, "RELOADED", set())


def body(*texts: str, tools: bool = True, stream: bool = False) -> bytes:
    return json.dumps(
        {
            "model": "m",
            "stream": stream,
            "messages": [{"role": "tool", "content": t} for t in texts],
            "tools": [{"type": "function", "function": {"name": "context_reload"}}] if tools else [],
        },
        separators=(",", ":"),
    ).encode()


def test_the_newest_unseen_ref_once_per_endpoint(reloading):
    a, b = tool_result_marker("x\n" * 500, "refAAAAAA", 900), tool_result_marker("y\n" * 500, "refBBBBBB", 900)
    assert fake_upstream.ref_to_reload("/v1/chat/completions", body(a, b)) == "refBBBBBB"
    assert fake_upstream.ref_to_reload("/v1/chat/completions", body(a, b)) == "refAAAAAA"
    assert fake_upstream.ref_to_reload("/v1/chat/completions", body(a, b)) is None
    assert fake_upstream.ref_to_reload("/v1/messages", body(a, b)) == "refBBBBBB"  # another endpoint: its own


def test_no_reload_without_the_tool_in_a_reload_round_or_streamed(reloading):
    a = tool_result_marker("x\n" * 500, "refAAAAAA", 900)
    assert fake_upstream.ref_to_reload("/v1/chat/completions", body(a, tools=False)) is None
    assert fake_upstream.ref_to_reload("/v1/chat/completions", body(a, "call_demo_reload_1")) is None
    assert fake_upstream.ref_to_reload("/v1/chat/completions", body(a, stream=True)) is None


def test_off_by_default():
    assert fake_upstream.RELOADED is None


@pytest.mark.parametrize(
    "path, find",
    [
        ("/v1/chat/completions", lambda a: a["choices"][0]["message"]["tool_calls"][0]["function"]),
        ("/v1/responses", lambda a: a["output"][0]),
        ("/v1/messages", lambda a: {**a["content"][0], "arguments": json.dumps(a["content"][0]["input"])}),
    ],
)
def test_the_call_in_each_format(path, find):
    call = find(json.loads(fake_upstream.reload_call(path, "refAAAAAA", 3)))
    assert call["name"] == "context_reload" and json.loads(call["arguments"]) == {"ref": "refAAAAAA"}


async def answer(path: str, body: dict, headers: dict[str, str] | None = None) -> tuple[dict, bytes]:
    """The fake's answer to one request, called as an ASGI app: its start message and its body."""
    request = [{"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}]
    sent: list[dict] = []

    async def receive():
        return request.pop(0)

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": [(k.encode(), v.encode()) for k, v in (headers or {}).items()],
    }
    await fake_upstream.app(scope, receive, send)
    return sent[0], b"".join(m.get("body", b"") for m in sent[1:])


def events(stream: bytes) -> list[tuple[str, dict]]:
    found = []
    for block in stream.decode().split("\n\n"):
        if block.strip():
            kind, data = block.split("\n")
            found.append((kind.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return found


MESSAGE_EVENTS = [
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
]


@pytest.mark.anyio
@pytest.mark.parametrize("headers, text", [({}, "ok"), ({"x-bench-chunks": "2"}, "ok word0 word1")])
async def test_a_streamed_messages_request_gets_messages_events(headers, text):
    body = {
        "model": "claude-sonnet-4",
        "max_tokens": 10,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    start, stream = await answer("/v1/messages", body, headers)
    assert start["status"] == 200 and (b"content-type", b"text/event-stream") in start["headers"]
    found = events(stream)
    assert all(kind == data["type"] for kind, data in found)
    assert list(dict.fromkeys(kind for kind, _ in found)) == MESSAGE_EVENTS
    assert "".join(data["delta"]["text"] for kind, data in found if kind == "content_block_delta") == text
    assert found[-2][1]["delta"]["stop_reason"] == "end_turn"


@pytest.mark.anyio
async def test_a_streamed_chat_request_still_gets_chat_chunks():
    body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    _, stream = await answer("/v1/chat/completions", body)
    assert stream.startswith(b"data: {") and b"chat.completion.chunk" in stream and stream.endswith(b"data: [DONE]\n\n")


def test_a_streamed_responses_request_gets_responses_events_the_sdk_reads():
    """The openai SDK's `responses.stream` reads the fake's events to the final text."""
    import openai

    from proxy.demo import fake_upstream
    from tests.harness.servers import ServerThread

    with ServerThread(fake_upstream.app) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-fake", max_retries=0, timeout=10)
        with client.responses.stream(model="gpt-4o", input="hi", extra_headers={"x-bench-chunks": "2"}) as stream:
            kinds = [event.type for event in stream]
            final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert final.output_text == "ok word0 word1"


# ------------------------------------------------------------------ --bill (the demo's)


@pytest.fixture
def billing(monkeypatch):
    monkeypatch.setattr(fake_upstream, "BILLING", True)
    monkeypatch.setattr(fake_upstream, "CACHES", {})


HISTORY = [{"role": "user", "content": "word " * 3000}]


@pytest.mark.anyio
async def test_billed_chat_answers_read_the_prefix_the_last_request_wrote(billing):
    request = {"model": "gpt-4o", "messages": HISTORY}
    first = json.loads((await answer("/v1/chat/completions", request, {"authorization": "Bearer a"}))[1])["usage"]
    assert first["prompt_tokens"] > 3000 and first["prompt_tokens_details"]["cached_tokens"] == 0
    longer = {
        **request,
        "messages": [*HISTORY, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}],
    }
    second = json.loads((await answer("/v1/chat/completions", longer, {"authorization": "Bearer a"}))[1])["usage"]
    assert 0 < second["prompt_tokens_details"]["cached_tokens"] <= first["prompt_tokens"] < second["prompt_tokens"]
    other = json.loads((await answer("/v1/chat/completions", longer, {"authorization": "Bearer b"}))[1])["usage"]
    assert other["prompt_tokens_details"]["cached_tokens"] == 0  # another credential: a cache of its own


@pytest.mark.anyio
async def test_billed_messages_answers_cache_only_what_is_asked(billing):
    plain = {"model": "claude-sonnet-4", "max_tokens": 10, "messages": HISTORY}
    for _ in range(2):
        usage = json.loads((await answer("/v1/messages", plain, {"x-api-key": "k"}))[1])["usage"]
        assert usage["cache_read_input_tokens"] == usage["cache_creation_input_tokens"] == 0 < usage["input_tokens"]
    asked = {**plain, "cache_control": {"type": "ephemeral"}}
    wrote = json.loads((await answer("/v1/messages", asked, {"x-api-key": "k"}))[1])["usage"]
    read = json.loads((await answer("/v1/messages", asked, {"x-api-key": "k"}))[1])["usage"]
    assert (
        wrote["cache_creation_input_tokens"] > 0
        and read["cache_read_input_tokens"] == wrote["cache_creation_input_tokens"]
    )


@pytest.mark.anyio
async def test_unbilled_by_default_and_odd_bodies_keep_the_fixed_usage(monkeypatch):
    assert fake_upstream.BILLING is False
    monkeypatch.setattr(fake_upstream, "BILLING", True)
    for odd in ({"model": 5, "messages": "not a list"}, {"model": "m", "messages": [{"role": "user", "content": 7}]}):
        start, raw = await answer("/v1/chat/completions", odd)
        assert start["status"] == 200 and "usage" in json.loads(raw)


@pytest.mark.anyio
async def test_a_compact_request_gets_a_compaction():
    request = {
        "model": "gpt-5",
        "input": [{"role": "user", "content": "fix it"}, {"role": "assistant", "content": "ok"}],
    }
    reply = json.loads((await answer("/v1/responses/compact", request))[1])
    assert reply["object"] == "response.compaction"
    assert reply["output"][0] == {"role": "user", "content": "fix it"} and reply["output"][-1]["type"] == "compaction"
    assert len(reply["output"]) == 2
