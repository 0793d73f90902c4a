"""The reload loop over canned upstream responses: several choices, and streams that fail midway."""

from __future__ import annotations

import json

import httpx2
import pytest

from proxy.core.compaction import Offload
from proxy.core.texts import RELOAD_TOOL_SCHEMAS
from proxy.core.tokens import counter_for_model
from proxy.formats.chat import CHAT
from proxy.formats.chat._rounds import ChatRounds
from proxy.http import telemetry as http_telemetry
from proxy.offload.records import RefStore
from proxy.reload import loop as reload_loop
from proxy.reload.tools import ReloadTools
from proxy.store.sqlite import SQLiteStore
from proxy.telemetry import RequestRecord

pytestmark = pytest.mark.anyio
BASE = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def chunk(index: int, delta: dict, finish: str | None = None) -> dict:
    return {**BASE, "choices": [{"index": index, "delta": delta, "finish_reason": finish}]}


def call_delta(name: str, arguments: str, id: str) -> dict:
    return {
        "tool_calls": [{"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": arguments}}]
    }


def sse_response(*events: dict | str) -> httpx2.Response:
    body = b"".join(b"data: " + (e if isinstance(e, str) else json.dumps(e)).encode() + b"\n\n" for e in events)
    return httpx2.Response(200, content=body + b"data: [DONE]\n\n", headers={"content-type": "text/event-stream"})


@pytest.fixture
async def tools(tmp_path):
    store = SQLiteStore(tmp_path)
    refs = RefStore(store, "n" * 32, ttl=60)
    await refs.save([Offload("item01", "tool_result", "the original\n", 3)], [])
    yield ReloadTools(refs, counter_for_model("gpt-4o"), max_tokens=500, request_refs=["item01"], session=None)
    await store.close()


def scripted(*responses: httpx2.Response):
    """send() answering with `responses` in turn (a stream's first response is not asked for by the loop)."""
    sent: list[tuple[list, bool]] = []

    async def send(body):
        sent.append((list(body["messages"]), "tools" in body))
        return responses[len(sent) - 1]

    return send, sent


async def collect(first: httpx2.Response, send, tools) -> list:
    budget = reload_loop.Budget(max_rounds=4, seconds=60)
    rounds = ChatRounds({}, [{"role": "user", "content": "q"}], RELOAD_TOOL_SCHEMAS)
    rounds.request(True)  # what `first` answers
    out = [e async for e in reload_loop.stream(first, rounds, send, tools=tools, budget=budget)]
    assert out[-2].startswith(b": x-offload-reload-rounds: ")  # the rounds run, in a comment before [DONE]
    events = [e.decode().removeprefix("data: ").strip() for e in out if not e.startswith(b":")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


async def test_streamed_choices_all_hide_injected_calls(tools):
    first = sse_response(
        chunk(0, {"role": "assistant", "content": "A looks. "}),
        chunk(1, {"role": "assistant", "content": "B looks. "}),
        chunk(0, call_delta("context_reload", '{"ref": "item01"}', "r0")),
        chunk(1, call_delta("context_search", '{"pattern": "orig"}', "s1")),
        chunk(1, {}, "tool_calls"),
        chunk(0, {}, "tool_calls"),
    )
    second = sse_response(
        chunk(0, {"role": "assistant", "content": "A answers."}),
        chunk(1, {"content": "B again"}),
        chunk(1, {}, "stop"),
        chunk(0, {}, "stop"),
    )
    send, sent = scripted(second)
    chunks = await collect(first, send, tools)
    choices = [c for ch in chunks for c in ch["choices"]]
    assert not [c for c in choices if c["delta"].get("tool_calls")]
    finishes = [(c["index"], c["finish_reason"]) for c in choices if c["finish_reason"]]
    assert sorted(finishes) == [(0, "stop"), (1, "stop")]  # one each: choice 1 ended in the first round
    text = {i: "".join(c["delta"].get("content") or "" for c in choices if c["index"] == i) for i in (0, 1)}
    assert text == {0: "A looks. A answers.", 1: "B looks. "}
    assert len(sent) == 1 and sent[0][0][-1] == {"role": "tool", "tool_call_id": "r0", "content": "the original\n"}


async def test_a_choice_other_than_0_never_starts_a_round(tools):
    first = sse_response(
        chunk(0, {"role": "assistant", "content": "done"}),
        chunk(1, call_delta("context_reload", '{"ref": "item01"}', "r1")),
        chunk(0, {}, "stop"),
        chunk(1, {}, "tool_calls"),
    )
    send, sent = scripted(first)
    chunks = await collect(first, send, tools)
    assert [(c["index"], c["finish_reason"]) for ch in chunks for c in ch["choices"] if c["finish_reason"]] == [
        (0, "stop"),
        (1, "stop"),
    ]
    assert len(sent) == 0


async def test_non_streamed_choices_all_hide_injected_calls(tools):
    def completion(*messages: dict) -> httpx2.Response:
        choices = [
            {"index": i, "message": m, "finish_reason": "tool_calls" if m.get("tool_calls") else "stop"}
            for i, m in enumerate(messages)
        ]
        return httpx2.Response(200, json={"id": "x", "object": "chat.completion", "choices": choices})

    def calls(name: str, id: str) -> dict:
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": id, "type": "function", "function": {"name": name, "arguments": '{"ref": "item01"}'}}
            ],
        }

    send, sent = scripted(
        completion(calls("context_reload", "r0"), calls("context_reload", "r1")),
        completion({"role": "assistant", "content": "final"}, calls("context_search", "s1")),
    )
    rounds = ChatRounds({}, [{"role": "user", "content": "q"}], RELOAD_TOOL_SCHEMAS)
    result = await reload_loop.complete(rounds, send, tools=tools, budget=reload_loop.Budget(max_rounds=4, seconds=60))
    choices = json.loads(result.body)["choices"]
    assert [c["message"].get("tool_calls") for c in choices] == [None, None]
    assert [c["finish_reason"] for c in choices] == ["stop", "stop"]
    assert choices[0]["message"]["content"] == "final" and len(sent) == 2


@pytest.mark.parametrize("second", ["[1, 2]", "5", '{"choices": [7]}', '{"choices": [{"delta": 3}]}'])
async def test_anything_failing_in_a_streamed_round_ends_with_error_then_done(tools, second):
    first = sse_response(
        chunk(0, {"role": "assistant", "content": "Looking. "}),
        chunk(0, call_delta("context_reload", '{"ref": "item01"}', "r0")),
        chunk(0, {}, "tool_calls"),
    )
    send, _ = scripted(sse_response(second))
    chunks = await collect(first, send, tools)
    assert chunks[0]["choices"][0]["delta"]["content"] == "Looking. "
    assert chunks[-1]["error"]["type"] == "server_error"


async def test_a_failing_tool_ends_the_stream_properly(tools):
    class Broken(ReloadTools):
        async def run(self, name: str, arguments: str, deadline: float | None = None) -> str:
            raise RuntimeError("a bug")

    broken = Broken(tools.refs, tools.counter, max_tokens=500, request_refs=[], session=None)
    first = sse_response(chunk(0, call_delta("context_reload", '{"ref": "item01"}', "r0")), chunk(0, {}, "tool_calls"))
    send, _ = scripted(first)
    chunks = await collect(first, send, broken)
    assert chunks[-1]["error"]["code"] == "proxy_error"


async def test_rounds_calls_and_bills_go_to_the_record_passed_in(tools):
    """No context variable: the loop and the tools report to the sink they are handed."""
    record = RequestRecord("chat", "POST")
    tools.record = record
    answer = {
        "id": "x",
        "object": "chat.completion",
        "usage": {"prompt_tokens": 7, "completion_tokens": 2},
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "r0",
                            "type": "function",
                            "function": {"name": "context_reload", "arguments": '{"ref": "item01"}'},
                        }
                    ],
                },
            }
        ],
    }
    final = {
        "id": "y",
        "object": "chat.completion",
        "usage": {"prompt_tokens": 9, "completion_tokens": 1},
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "done"}}],
    }
    send, sent = scripted(httpx2.Response(200, json=answer), httpx2.Response(200, json=final))
    rounds = ChatRounds({}, [{"role": "user", "content": "q"}], RELOAD_TOOL_SCHEMAS)
    result = await reload_loop.complete(
        rounds, send, tools=tools, budget=reload_loop.Budget(max_rounds=4, seconds=60), usage=CHAT.usage, record=record
    )
    assert result.status == 200 and len(sent) == 2
    assert record.reload_rounds == 1 and record.reload_calls == 1 and record.searches == 0
    assert record.bill.total.answers == 2 and record.bill.first is not record.bill.last
    assert http_telemetry.current.get() is None  # nothing was looked up, nor set, in the context
