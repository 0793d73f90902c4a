"""The openai SDK's Responses API (`client.responses.*`), unchanged, through the proxy.

A large `function_call_output` is offloaded (a marker with `ref=` goes upstream instead), the
model gets `context_reload` / `context_search` beside the client's tools, and a reload round
the proxy runs itself stays invisible: the client gets one response (or one stream) with usage
summed over the rounds. Every other Responses endpoint is relayed.
"""

from __future__ import annotations

import json

import httpx2
import openai
import pytest

from tests.harness.responses import (
    answering,
    events,
    function_call,
    function_call_output,
    input_items,
    message,
    parse_sse,
    reasoning,
    refs_in_input,
    response,
    sse_stream,
    tool_names,
    usage,
)
from tests.harness.servers import scripted

HEADERS = {
    "X-Offload-Max-Total-Tokens": "1000",
    "X-Offload-Max-Tool-Message-Tokens": "500",
    "X-Offload-Max-Reload-Tokens": "50000",
}
# An ordinary-looking line in the middle: no error word, no path, so no preview keeps it in view; only a reload finds it.
NEEDLE = "2024-05-01T12:06:17Z NOTICE deploy-7 rollout paused at 512 MiB by the quota"
LOG = "\n".join(
    NEEDLE
    if i == 377
    else f"2024-05-01T12:{i // 60:02d}:{i % 60:02d}Z INFO worker-{i % 7} GET /api/items/{i} 200 {i % 97} ms"
    for i in range(480)
)
CALL_ID = "call_read_logs_1"
TOOLS = [
    {
        "type": "function",
        "name": "read_logs",
        "description": "Read a log file.",
        "strict": False,
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
    {"type": "web_search"},
]
ANSWER = "The deploy failed: disk quota exceeded on /var/lib/app."


def history() -> list[dict]:
    """user, the model's call of the client's tool, its 30 KB output, a new user message."""
    return [
        {"role": "user", "content": "Why did the deploy fail? Read the logs."},
        function_call("read_logs", {"path": "/var/log/deploy.log"}, call_id=CALL_ID, id="fc_read_logs_1"),
        function_call_output(CALL_ID, LOG),
        {"role": "user", "content": "Summarise the failure in one sentence."},
    ]


def the_output(items: list[dict]) -> str:
    [out] = [i for i in items if i.get("type") == "function_call_output" and i["call_id"] == CALL_ID]
    return out["output"]


def assert_offloaded(rec) -> str:
    """The upstream got the history with the big output replaced by a marker; its ref."""
    sent = history()
    got = input_items(rec)
    assert len(LOG) > 30_000
    assert [(i.get("type"), i.get("role"), i.get("call_id")) for i in got[: len(sent)]] == [
        (i.get("type"), i.get("role"), i.get("call_id")) for i in sent
    ]
    assert got[1] == sent[1] and got[0] == sent[0] and got[3] == sent[3]
    marker = the_output(got[: len(sent)])
    assert marker.startswith("[offloaded tool result: ") and len(marker) < 2_000, marker[:200]
    assert NEEDLE not in json.dumps(rec.json())
    [ref] = refs_in_input(rec)
    assert f"ref={ref}" in marker
    return ref


def assert_tools(rec) -> None:
    """The client's tools (a hosted one included) untouched and first, then the two injected ones."""
    tools = rec.json()["tools"]
    assert tools[:2] == TOOLS
    assert tool_names(rec) == ["read_logs", "web_search", "context_reload", "context_search"]
    for tool in tools[2:]:
        assert tool["type"] == "function" and isinstance(tool["parameters"], dict) and "function" not in tool


# ---------------------------------------------------------------- compaction


def test_a_large_output_goes_upstream_as_a_marker(client, upstream):
    raw = client.responses.with_raw_response.create(model="gpt-5", input=history(), tools=TOOLS, extra_headers=HEADERS)
    result = raw.parse()
    assert result.output_text == "Hello there"
    [rec] = upstream.responses_requests()
    ref = assert_offloaded(rec)
    assert len(input_items(rec)) == len(history())
    assert_tools(rec)
    assert raw.headers["x-offload-action"] == "compact"
    assert (raw.headers["x-offload-refs"], raw.headers["x-offload-refs-created"]) == ("1", "1")
    assert int(raw.headers["x-offload-tokens-after"]) < int(raw.headers["x-offload-tokens-before"]) // 5
    # the response echoes the tools it was given: the client sees only its own
    assert [t.get("name") or t["type"] for t in raw.http_response.json()["tools"]] == ["read_logs", "web_search"]

    again = client.responses.with_raw_response.create(
        model="gpt-5", input=history(), tools=TOOLS, extra_headers=HEADERS
    )
    assert again.headers["x-offload-refs-created"] == "0"
    second = upstream.responses_requests()[1]
    assert second.body == rec.body  # same ref, same marker: the provider's prompt cache keeps hitting
    assert refs_in_input(second) == [ref]


def test_a_small_request_is_relayed_byte_for_byte(proxy_url, upstream):
    body = json.dumps(
        {
            "model": "gpt-5",
            "input": [{"role": "user", "content": "hi"}],
            "tools": TOOLS,
            "previous_response_id": "resp_prev_1",
            "store": True,
        },
        indent=1,
    ).encode()
    r = httpx2.post(
        f"{proxy_url}/v1/responses",
        content=body,
        timeout=20,
        headers={"authorization": "Bearer sk-test-key", "content-type": "application/json", **HEADERS},
    )
    assert r.status_code == 200 and r.json()["output"][0]["content"][0]["text"] == "Hello there"
    [rec] = upstream.responses_requests()
    assert rec.body == body
    assert r.json()["previous_response_id"] == "resp_prev_1"


def test_previous_response_id_with_a_new_output_is_relayed(client, upstream):
    """A client chaining on the server's state sends only the new items: they reach the upstream."""
    result = client.responses.create(
        model="gpt-5",
        previous_response_id="resp_prev_2",
        tools=TOOLS,
        input=[function_call_output(CALL_ID, "exit code 0")],
        extra_headers=HEADERS,
    )
    assert result.output_text == "Hello there" and result.previous_response_id == "resp_prev_2"
    [rec] = upstream.responses_requests()
    assert rec.json()["previous_response_id"] == "resp_prev_2"
    assert input_items(rec) == [function_call_output(CALL_ID, "exit code 0")]
    assert rec.json()["tools"][:2] == TOOLS


# ---------------------------------------------------------------- a reload round


def reload_then_answer():
    """Round 1: reasoning + context_reload(the ref in the input); round 2: the answer."""

    def first(rec):
        if not refs_in_input(rec):  # nothing offloaded: say so, the test's assertions show it
            return answering(message("no ref in the input"))(rec)
        return answering(
            reasoning("**Need the full log**", encrypted_content="gAAAAB-round-1"),
            function_call("context_reload", {"ref": refs_in_input(rec)[0]}, call_id="call_reload_1", id="fc_reload_1"),
            usage=usage(1_000, 20, cached=100, reasoning_tokens=10),
            id="resp_round_1",
        )(rec)

    return scripted(
        first,
        answering(
            message(ANSWER, id="msg_answer"), usage=usage(3_000, 30, cached=800, reasoning_tokens=5), id="resp_round_2"
        ),
    )


def assert_second_round(upstream) -> None:
    first, second = upstream.responses_requests()
    ref = assert_offloaded(first)
    sent, again = input_items(first), input_items(second)
    assert again[: len(sent)] == sent  # the history as forwarded, byte-stable
    added = again[len(sent) :]
    assert [i.get("type") for i in added] == ["reasoning", "function_call", "function_call_output"]
    assert added[0]["id"] and added[0]["encrypted_content"] == "gAAAAB-round-1"
    assert (added[1]["name"], added[1]["call_id"], json.loads(added[1]["arguments"])) == (
        "context_reload",
        "call_reload_1",
        {"ref": ref},
    )
    assert added[2]["call_id"] == "call_reload_1" and added[2]["output"] == LOG
    assert_tools(second)


def assert_usage(u) -> None:
    assert (u.input_tokens, u.output_tokens, u.total_tokens) == (4_000, 50, 4_050)
    assert (u.input_tokens_details.cached_tokens, u.output_tokens_details.reasoning_tokens) == (900, 15)


def assert_one_response(result) -> None:
    assert [(o.type, o.id) for o in result.output] == [("message", "msg_answer")]
    assert result.output_text == ANSWER
    assert result.id == "resp_round_1"  # the identity the stream announced first
    assert "context_reload" not in result.model_dump_json(warnings=False)
    assert_usage(result.usage)


def test_reload_round_is_invisible(client, upstream):
    upstream.handler = reload_then_answer()
    raw = client.responses.with_raw_response.create(model="gpt-5", input=history(), tools=TOOLS, extra_headers=HEADERS)
    assert_one_response(raw.parse())
    assert_second_round(upstream)
    assert raw.headers["x-offload-refs"] == "1"


@pytest.mark.anyio
async def test_reload_round_is_invisible_async(upstream, proxy_url):
    upstream.handler = reload_then_answer()
    async with openai.AsyncOpenAI(
        base_url=f"{proxy_url}/v1", api_key="sk-test-key", max_retries=0, timeout=20
    ) as aclient:
        result = await aclient.responses.create(model="gpt-5", input=history(), tools=TOOLS, extra_headers=HEADERS)
    assert_one_response(result)
    assert_second_round(upstream)


def assert_one_stream(events_seen: list) -> None:
    """One created, one completed, increasing sequence numbers, contiguous output indexes."""
    types = [e.type for e in events_seen]
    assert types.count("response.created") == 1 and types[0] == "response.created"
    assert types.count("response.completed") == 1 and types[-1] == "response.completed"
    assert "response.in_progress" in types[:2]
    numbers = [e.sequence_number for e in events_seen]
    assert all(a < b for a, b in zip(numbers, numbers[1:])), numbers
    added = [e.output_index for e in events_seen if e.type == "response.output_item.added"]
    assert added == list(range(len(added))) and added, added
    for e in events_seen:
        if getattr(e, "output_index", None) is not None:
            assert e.output_index < len(added)
    assert "context_reload" not in json.dumps([e.model_dump(warnings=False) for e in events_seen])
    assert "".join(e.delta for e in events_seen if e.type == "response.output_text.delta") == ANSWER
    assert events_seen[0].response.id == events_seen[-1].response.id == "resp_round_1"
    for announced in (events_seen[0].response, events_seen[-1].response):  # the echoed tools: the client's own
        assert [getattr(t, "name", None) or t.type for t in announced.tools] == ["read_logs", "web_search"]
    assert_one_response(events_seen[-1].response)


def test_reload_round_is_invisible_in_a_stream(client, upstream):
    upstream.handler = reload_then_answer()
    stream = client.responses.create(model="gpt-5", input=history(), tools=TOOLS, stream=True, extra_headers=HEADERS)
    assert_one_stream(list(stream))
    assert_second_round(upstream)


def test_reload_round_is_invisible_to_the_stream_helper(client, upstream):
    upstream.handler = reload_then_answer()
    with client.responses.stream(model="gpt-5", input=history(), tools=TOOLS, extra_headers=HEADERS) as stream:
        seen = list(stream)
        final = stream.get_final_response()
    assert_one_stream(seen)
    assert_one_response(final)
    assert_second_round(upstream)


def test_reload_round_in_a_raw_stream_keeps_the_sse_framing(proxy_url, upstream):
    """Each event as `event: <type>` + `data: <json>`, and no `[DONE]` (the API sends none)."""
    upstream.handler = reload_then_answer()
    with httpx2.stream(
        "POST",
        f"{proxy_url}/v1/responses",
        timeout=20,
        headers={"authorization": "Bearer sk-test-key", **HEADERS},
        json={"model": "gpt-5", "input": history(), "tools": TOOLS, "stream": True},
    ) as r:
        text = r.read().decode()
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert "[DONE]" not in text
    got = parse_sse(text)  # checks every `event:` line names its data's type
    assert [e["type"] for e in got].count("response.completed") == 1
    assert got[-1]["response"]["usage"]["total_tokens"] == 4_050


def test_a_call_of_the_clients_tool_reaches_the_client(client, upstream):
    """The model calling the client's own tool ends the round: the client gets the call as sent."""
    call = function_call("read_logs", {"path": "/var/log/other.log"}, call_id="call_client_2", id="fc_client_2")
    upstream.handler = scripted(answering(call))
    stream = client.responses.create(model="gpt-5", input=history(), tools=TOOLS, stream=True, extra_headers=HEADERS)
    done = [e for e in stream if e.type == "response.completed"]
    [rec] = upstream.responses_requests()
    assert_offloaded(rec)
    [completed] = done
    assert [o.model_dump(exclude_none=True) for o in completed.response.output] == [call]


# ---------------------------------------------------------------- the other endpoints, relayed


def test_retrieve_delete_input_items_and_cancel_are_relayed(client, upstream):
    got = client.responses.retrieve("resp_abc123", include=["reasoning.encrypted_content"])
    assert got.id == "resp_abc123" and got.output_text == "Hello there"
    assert client.responses.delete("resp_abc123") is None
    items = client.responses.input_items.list("resp_abc123", limit=5)
    assert [i.id for i in items.data] == ["msg_input_1"]
    cancelled = client.responses.cancel("resp_abc123")
    assert cancelled.status == "cancelled"
    seen = [(r.method, r.path, r.query) for r in upstream.requests]
    assert seen == [
        ("GET", "/v1/responses/resp_abc123", "include%5B%5D=reasoning.encrypted_content"),
        ("DELETE", "/v1/responses/resp_abc123", ""),
        ("GET", "/v1/responses/resp_abc123/input_items", "limit=5"),
        ("POST", "/v1/responses/resp_abc123/cancel", ""),
    ]
    assert all(r.headers["authorization"] == "Bearer sk-test-key" for r in upstream.requests)


# ---------------------------------------------------------------- the harness itself


def test_the_fake_upstreams_events_are_what_the_sdk_parses():
    """Guards the builders: the SDK's own models accept every event and the Response."""
    from openai.types.responses import Response, ResponseStreamEvent
    from pydantic import TypeAdapter

    resp = response(
        reasoning(),
        function_call("f", {"a": 1}),
        message("hello world"),
        usage=usage(100, 20, cached=50, reasoning_tokens=7),
        request={"model": "gpt-5", "tools": TOOLS},
    )
    Response.model_validate(resp)
    adapter = TypeAdapter(ResponseStreamEvent)
    seen = [adapter.validate_python(e) for e in events(resp)]
    assert [e.sequence_number for e in seen] == list(range(len(seen)))
    assert parse_sse(b"".join(sse_stream(resp))) == events(resp)
    assert seen[-1].response.output_text == "hello world"
