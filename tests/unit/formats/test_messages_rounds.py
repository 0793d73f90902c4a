"""MessagesRounds (the Messages format's side of the reload loop), non-streamed and streamed.

Answers and event sequences follow what the API sends (message_start with the input usage,
blocks with their deltas, a ping, message_delta with the output usage, message_stop); the
client's side of a stream is checked with the anthropic SDK's own accumulator.
"""

from __future__ import annotations

import copy
import json

import httpx2
import pytest
from anthropic.lib.streaming._messages import accumulate_event

from proxy.core.compaction import Offload
from proxy.core.rounds import ToolCall
from proxy.core.texts import RELOAD_TOOL_SCHEMAS
from proxy.core.tokens import counter_for_model
from proxy.errors import anthropic_error_event, error_body
from proxy.formats.messages import MESSAGES
from proxy.formats.messages._rounds import MessagesRounds
from proxy.offload.records import RefStore
from proxy.reload import loop as reload_loop
from proxy.reload.tools import ReloadTools
from proxy.store.sqlite import SQLiteStore
from proxy.upstream.transport import stream_broke

SIG = "EqQBCkgIBhABGAIiQJ7l0uJ4PbQ1Fh8zfake=="
BODY = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 8000,
    "system": "You are a coding agent.",
    "tools": [
        {
            "name": "Bash",
            "description": "Run a command.",
            "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
        }
    ],
    "messages": [{"role": "user", "content": "Why does the build fail? The log is ref=abc123."}],
}
THINK = {"type": "thinking", "thinking": "The log was offloaded; reload it.", "signature": SIG}
SAY = {"type": "text", "text": "Let me reload the log."}
RELOAD = {"type": "tool_use", "id": "toolu_r1", "name": "context_reload", "input": {"ref": "abc123"}}
SEARCH = {"type": "tool_use", "id": "toolu_s1", "name": "context_search", "input": {"pattern": "error"}}
BASH = {"type": "tool_use", "id": "toolu_b1", "name": "Bash", "input": {"command": "make"}}
FINAL = {"type": "text", "text": "The build fails because `libfoo` is missing."}
ORIGINAL = copy.deepcopy(BODY)


def usage(inp: int, out: int, read: int = 0, created: int = 0) -> dict:
    return {
        "input_tokens": inp,
        "cache_creation_input_tokens": created,
        "cache_read_input_tokens": read,
        "output_tokens": out,
        "service_tier": "standard",
    }


def message(id_: str, *content: dict, stop: str, use: dict) -> dict:
    return {
        "id": id_,
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": list(content),
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": use,
    }


def events(msg: dict, *, ping: bool = True, end: bool = True) -> list[dict]:
    """The events streaming `msg` (tool input in two fragments, thinking then its signature)."""
    use = msg["usage"]
    out = [
        {
            "type": "message_start",
            "message": {**msg, "content": [], "stop_reason": None, "usage": {**use, "output_tokens": 1}},
        }
    ]
    for index, block in enumerate(msg["content"]):
        kind = block["type"]
        if kind == "text":
            start, deltas = (
                {"type": "text", "text": ""},
                [{"type": "text_delta", "text": block["text"][:5]}, {"type": "text_delta", "text": block["text"][5:]}],
            )
        elif kind == "tool_use":
            raw = json.dumps(block["input"])
            start = {**block, "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": ""},
                {"type": "input_json_delta", "partial_json": raw[:4]},
                {"type": "input_json_delta", "partial_json": raw[4:]},
            ]
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": block["signature"]},
            ]
        else:
            start, deltas = block, []
        out.append({"type": "content_block_start", "index": index, "content_block": start})
        out += [{"type": "content_block_delta", "index": index, "delta": d} for d in deltas]
        out.append({"type": "content_block_stop", "index": index})
        if ping and index == 0:
            out.append({"type": "ping"})
    if end:
        out.append(
            {
                "type": "message_delta",
                "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": use["output_tokens"]},
            }
        )
        out.append({"type": "message_stop"})
    return out


def rounds_for(body: dict = BODY, extra: dict | None = None) -> MessagesRounds:
    return MESSAGES.rounds(body, MESSAGES.history(body), RELOAD_TOOL_SCHEMAS, extra_usage=extra)


ROUND1 = message("msg_01", THINK, SAY, RELOAD, stop="tool_use", use=usage(1200, 80, read=1000, created=50))
ROUND2 = message("msg_02", FINAL, stop="end_turn", use=usage(300, 40, read=2250))


# ---- non-streamed ------------------------------------------------------------------------------


def test_injected_only_round_then_an_answer():
    rounds = rounds_for(extra={"prompt_tokens": 500, "completion_tokens": 60, "total_tokens": 560})
    first = rounds.request(True)
    assert [t["name"] for t in first["tools"]] == ["Bash", "context_reload", "context_search"]
    assert first["messages"] == BODY["messages"] and first["system"] == BODY["system"]
    assert rounds.take(ROUND1) == [ToolCall("context_reload", '{"ref": "abc123"}', "toolu_r1")]
    rounds.answer(["[the log]\nerror: libfoo not found"])
    second = rounds.request(True)
    assert second["messages"][1:] == [
        {"role": "assistant", "content": [THINK, SAY, RELOAD]},  # verbatim: thinking and its signature
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_r1", "content": "[the log]\nerror: libfoo not found"}
            ],
        },
    ]
    assert rounds.take(ROUND2) == [] and rounds.unanswered == []
    final = rounds.result()
    assert final["id"] == "msg_01" and final["stop_reason"] == "end_turn"
    assert final["content"] == [THINK, SAY, FINAL]
    assert final["usage"] == {
        "input_tokens": 1200 + 300 + 500,
        "cache_creation_input_tokens": 50,
        "cache_read_input_tokens": 3250,
        "output_tokens": 80 + 40 + 60,
        "service_tier": "standard",
    }
    assert (rounds.first_id, rounds.last_id, rounds.what, rounds.closing) == (None, None, "message", b"")
    assert BODY == ORIGINAL  # the client's body is never changed


def test_a_round_mixing_injected_and_client_calls_ends_the_loop():
    rounds = rounds_for()
    rounds.request(True)
    mixed = message("msg_01", SAY, RELOAD, BASH, stop="tool_use", use=usage(10, 5))
    assert rounds.take(mixed) == []
    assert rounds.unanswered == [ToolCall("context_reload", '{"ref": "abc123"}', "toolu_r1")]
    final = rounds.result()
    assert final["content"] == [SAY, BASH] and final["stop_reason"] == "tool_use"
    assert rounds.carried(["r"]) == [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_r1", "content": "r"}]}
    ]


def test_not_offered_the_injected_calls_are_hidden_and_the_turn_ends():
    rounds = rounds_for()
    assert "tools" in rounds.request(False) and len(rounds.request(False)["tools"]) == 1  # the client's only
    rounds.take(ROUND1)
    final = rounds.result()
    assert final["content"] == [THINK, SAY] and final["stop_reason"] == "end_turn"


def test_later_rounds_list_the_injected_tools_even_when_not_offered():
    rounds = rounds_for({**BODY, "tools": None})
    assert "tools" in rounds.request(True)
    rounds.take(ROUND1)
    rounds.answer(["x"])
    assert [t["name"] for t in rounds.request(False)["tools"]] == ["context_reload", "context_search"]


def test_parallel_injected_calls_get_one_user_message_of_results_in_order():
    rounds = rounds_for()
    rounds.request(True)
    both = message("msg_01", RELOAD, SEARCH, stop="tool_use", use=usage(10, 5))
    assert [c.call_id for c in rounds.take(both)] == ["toolu_r1", "toolu_s1"]
    rounds.answer(["one", "two"])
    assert rounds.request(True)["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_r1", "content": "one"},
        {"type": "tool_result", "tool_use_id": "toolu_s1", "content": "two"},
    ]
    with pytest.raises(ValueError):
        rounds.answer(["late"])


def test_usage_missing_everywhere_stays_missing():
    rounds = rounds_for()
    rounds.request(True)
    rounds.take({k: v for k, v in ROUND2.items() if k != "usage"})
    assert "usage" not in rounds.result()


# ---- streamed ----------------------------------------------------------------------------------


def stream_two_rounds(second: list[dict], extra: dict | None = None) -> tuple[MessagesRounds, list[dict], list]:
    rounds = rounds_for(extra=extra)
    rounds.request(True)
    out = [e for event in events(ROUND1) for e in rounds.feed(event)]
    calls = rounds.calls()
    assert calls == [ToolCall("context_reload", '{"ref": "abc123"}', "toolu_r1")]
    rounds.answer(["[the log]"])
    sent = rounds.request(True)
    out += [e for event in second for e in rounds.feed(event)]
    return rounds, out, sent


def accumulate(client_events: list[dict]):
    snapshot, bufs = None, {}
    for event in client_events:
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=bufs)
    return snapshot


def test_two_streamed_rounds_are_one_message_for_the_client():
    rounds, out, sent = stream_two_rounds(events(ROUND2), extra={"prompt_tokens": 7, "completion_tokens": 3})
    assert sent["messages"][1] == {"role": "assistant", "content": [THINK, SAY, RELOAD]}  # rebuilt from the stream
    assert rounds.calls() == []
    out += rounds.finish()
    kinds = [e["type"] for e in out]
    assert kinds.count("message_start") == 1 and out[0]["message"]["id"] == "msg_01"
    assert kinds.count("message_delta") == 1 and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("message_stop") == 1 and kinds.count("ping") == 2
    assert sorted({e["index"] for e in out if "index" in e}) == [0, 1, 2]
    starts = [e["content_block"]["type"] for e in out if e["type"] == "content_block_start"]
    assert starts == ["thinking", "text", "text"]
    assert not any("context_reload" in json.dumps(e) for e in out)
    delta = out[-2]
    assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert delta["usage"] == {
        "input_tokens": 1200 + 300 + 7,
        "cache_creation_input_tokens": 50,
        "cache_read_input_tokens": 3250,
        "output_tokens": 80 + 40 + 3,
    }
    final = accumulate(out)
    assert [b.type for b in final.content] == ["thinking", "text", "text"]
    assert final.content[0].signature == SIG and final.content[2].text == FINAL["text"]
    assert final.stop_reason == "end_turn" and final.id == "msg_01"
    assert (final.usage.input_tokens, final.usage.output_tokens, final.usage.cache_read_input_tokens) == (
        1507,
        123,
        3250,
    )


def test_encoded_events_are_anthropic_sse():
    rounds = rounds_for()
    assert rounds.encode({"type": "ping"}) == b'event: ping\ndata: {"type":"ping"}\n\n'
    assert rounds.encode({"type": "a\nb"}).startswith(b"data: ")


def test_a_round_asking_for_the_clients_tool_ends_the_stream_with_its_call():
    rounds = rounds_for()
    rounds.request(True)
    mixed = message("msg_01", SAY, RELOAD, BASH, stop="tool_use", use=usage(10, 5))
    out = [e for event in events(mixed) for e in rounds.feed(event)]
    assert rounds.calls() == [] and [c.call_id for c in rounds.unanswered] == ["toolu_r1"]
    out += rounds.finish()
    final = accumulate(out)
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[1].input == {"command": "make"} and final.stop_reason == "tool_use"


def test_not_offered_a_streamed_injected_call_is_hidden_and_the_turn_ends():
    rounds = rounds_for()
    rounds.request(False)
    out = [e for event in events(ROUND1) for e in rounds.feed(event)]
    assert rounds.calls() == [] and [c.name for c in rounds.unanswered] == ["context_reload"]
    out += rounds.finish()
    assert out[-2]["delta"]["stop_reason"] == "end_turn"
    assert [b.type for b in accumulate(out).content] == ["thinking", "text"]


def test_an_upstream_error_event_is_relayed_and_ends_the_stream():
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    second = [*events(ROUND2, end=False)[:3], overloaded]
    rounds, out, _ = stream_two_rounds(second)
    assert out[-1] == overloaded
    assert rounds.calls() == [] and rounds.finish() == [] and rounds.fail(error_body("x", "server_error")) == []
    assert [e["type"] for e in out].count("error") == 1


def test_a_truncated_stream_ends_with_an_error_event():
    rounds, out, _ = stream_two_rounds(events(ROUND2, end=False))
    assert rounds.calls() == []
    end = rounds.finish()
    assert end == [
        {
            "type": "error",
            "error": {"type": "api_error", "message": "The upstream's stream ended before the message completed."},
        }
    ]
    assert rounds.finish() == []


def test_a_truncated_injected_call_is_not_run():
    rounds = rounds_for()
    rounds.request(True)
    for event in events(ROUND1, end=False)[:-1]:
        rounds.feed(event)
    assert rounds.calls() == []


def test_failures_midway_become_anthropic_error_events():
    rounds = rounds_for()
    rounds.request(True)
    [rounds.feed(e) for e in events(ROUND1)]
    assert rounds.fail(stream_broke(httpx2.ReadTimeout("slow"))) == [
        {"type": "error", "error": {"type": "timeout_error", "message": "The upstream stream broke off (ReadTimeout)."}}
    ]
    assert rounds.finish() == [] and rounds.feed({"type": "ping"}) == []

    def error_type(error):  # what `fail` sends for an error body
        return anthropic_error_event(error)["error"]["type"]

    assert (
        error_type({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})
        == "rate_limit_error"
    )
    assert error_type(error_body("m", "rate_limit_error", "rate_limit_exceeded")) == "rate_limit_error"
    assert error_type(error_body("m", "server_error", "proxy_error")) == "api_error"
    assert error_type("junk") == "api_error"  # type: ignore[arg-type]


def test_streamed_input_edge_cases():
    rounds = rounds_for()
    rounds.request(True)
    empty = {"type": "tool_use", "id": "toolu_e", "name": "context_search", "input": {}}
    for event in [
        {"type": "message_start", "message": {**ROUND1, "content": [], "usage": usage(1, 1)}},
        {"type": "content_block_start", "index": 0, "content_block": empty},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {**RELOAD, "input": {}}},
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '["not", "an object"]'},
        },
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}},
    ]:
        rounds.feed(event)
    calls = rounds.calls()  # complete without message_stop: the message_delta carried the stop
    # the model's own text, not an object: run as it was written, the tools answer "must be a JSON object"
    assert [(c.name, c.arguments) for c in calls] == [
        ("context_search", "{}"),
        ("context_reload", '["not", "an object"]'),
    ]


def test_server_tools_citations_and_unknown_deltas_pass_through():
    search = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    result = {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": [
            {
                "type": "web_search_result",
                "url": "https://example.org",
                "title": "t",
                "encrypted_content": "Eq",
                "page_age": None,
            }
        ],
    }
    citation = {
        "type": "web_search_result_location",
        "url": "https://example.org",
        "title": "t",
        "encrypted_index": "Eo",
        "cited_text": "libfoo",
    }
    seq = [
        {"type": "message_start", "message": {**ROUND1, "content": [], "usage": usage(5, 1)}},
        {"type": "content_block_start", "index": 0, "content_block": search},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"query": "libfoo"}'},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": result},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "citations_delta", "citation": citation}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "See."}},
        {"type": "content_block_stop", "index": 2},
        {"type": "content_block_start", "index": 3, "content_block": {**SEARCH, "input": {}}},
        {
            "type": "content_block_delta",
            "index": 3,
            "delta": {"type": "input_json_delta", "partial_json": '{"pattern": "x"}'},
        },
        {"type": "content_block_stop", "index": 3},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 30, "server_tool_use": {"web_search_requests": 1}},
        },
        {"type": "message_stop"},
    ]
    rounds = rounds_for()
    rounds.request(True)
    out = [e for event in seq for e in rounds.feed(event)]
    assert [c.name for c in rounds.calls()] == ["context_search"]
    rounds.answer(["no match"])
    turn = rounds.request(True)["messages"][1]["content"]
    assert turn[0] == {**search, "input": {"query": "libfoo"}} and turn[1] == result
    assert turn[2] == {"type": "text", "text": "See.", "citations": [citation]}
    assert turn[3]["input"] == {"pattern": "x"}
    out += [e for event in events(ROUND2) for e in rounds.feed(event)]
    rounds.calls()
    out += rounds.finish()
    final = accumulate(out)
    assert [b.type for b in final.content] == ["server_tool_use", "web_search_tool_result", "text", "text"]
    assert out[-2]["usage"]["server_tool_use"] == {"web_search_requests": 1}


# ---- through the real reload loop ----------------------------------------------------------------

ANYIO = pytest.mark.anyio


def sse(*items: dict) -> httpx2.Response:
    body = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in items)
    return httpx2.Response(200, content=body, headers={"content-type": "text/event-stream"})


@pytest.fixture
async def tools(tmp_path):
    store = SQLiteStore(tmp_path)
    refs = RefStore(store, "n" * 32, ttl=60)
    await refs.save([Offload("abc123", "tool_result", "error: libfoo not found\n", 6)], [])
    yield ReloadTools(
        refs, counter_for_model("claude-sonnet-4-5"), max_tokens=500, request_refs=["abc123"], session=None
    )
    await store.close()


@ANYIO
async def test_the_reload_loop_streams_one_message(tools):
    sent: list[dict] = []

    async def send(body: dict) -> httpx2.Response:
        sent.append(body)
        return sse(*events(ROUND2))

    rounds = rounds_for({**BODY, "stream": True})
    first = sse(*events(ROUND1))
    rounds.request(True)
    budget = reload_loop.Budget(max_rounds=4, seconds=60)
    raw = b"".join([chunk async for chunk in reload_loop.stream(first, rounds, send, tools=tools, budget=budget)])
    client = [json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: ")]
    assert raw.decode().startswith("event: message_start\n")
    assert sent[0]["stream"] is True and "error: libfoo not found" in json.dumps(sent[0]["messages"][-1])
    final = accumulate(client)
    assert [b.type for b in final.content] == ["thinking", "text", "text"] and final.stop_reason == "end_turn"


@ANYIO
async def test_the_reload_loop_answers_one_message(tools):
    answers = iter([ROUND1, ROUND2])

    async def send(body: dict) -> httpx2.Response:
        return httpx2.Response(200, json=next(answers))

    rounds = rounds_for()
    result = await reload_loop.complete(rounds, send, tools=tools, budget=reload_loop.Budget(max_rounds=4, seconds=60))
    final = json.loads(result.body)
    assert result.status == 200 and final["id"] == "msg_01" and final["content"] == [THINK, SAY, FINAL]


def test_an_injected_input_too_deep_to_write_is_refused_and_not_sent_back():
    """A non-streamed answer may carry an input up to 1,000 levels deep (what orjson reads): the
    tools are given the object (they refuse it as too deep), the history a note in its place."""
    from proxy.formats.messages._rounds import assistant_turn, tool_calls

    deep = {"ref": json.loads("[" * 900 + "]" * 900)}
    block = {"type": "tool_use", "id": "toolu_d", "name": "context_reload", "input": deep}
    [call] = tool_calls([block])
    assert call.arguments is deep
    sent = assistant_turn([block])["content"][0]
    assert sent["input"] == {"_raw": "(arguments nested too deeply to repeat here)"}
    assert json.loads(json.dumps(sent))  # writable


def test_a_streamed_input_past_the_parsers_recursion_is_run_as_its_text():
    rounds = rounds_for()
    rounds.request(True)
    deep = '{"ref": ' + "[" * 200_000 + "]" * 200_000 + "}"
    for event in [
        {"type": "message_start", "message": {**ROUND1, "content": [], "usage": usage(1, 1)}},
        {"type": "content_block_start", "index": 0, "content_block": {**RELOAD, "input": {}}},
        *(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": deep[i : i + 1000]},
            }
            for i in range(0, len(deep), 1000)
        ),
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}},
    ]:
        rounds.feed(event)
    [call] = rounds.calls()
    assert call.arguments == deep
