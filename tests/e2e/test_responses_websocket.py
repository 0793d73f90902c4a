"""The Responses API's WebSocket mode, driven by the plain `websockets` client: several responses
on one connection, `previous_response_id` chains held by the connection (`store: false`), the
managed turn (compaction, the hidden reload round) exactly as over HTTP, settings and tenants
from the upgrade request's headers."""

from __future__ import annotations

import json
import re

import pytest

from tests.harness.responses import REF, answer, function_call, input_items, message
from tests.harness.servers import default_handler, is_responses_create
from tests.harness.websocket import Socket, completed, texts

LINES = 3000
SEQ = "\n".join(str(i) for i in range(1, LINES + 1))
SETTINGS = {
    "mode": "compact",
    "max_total_tokens": 2000,
    "max_tool_message_tokens": 500,
    "keep_recent": 0,
    "max_reload_tokens": 50_000,
}


@pytest.fixture(scope="module")
def ws_proxy(make_proxy):
    with make_proxy(**SETTINGS) as url:
        yield url


def user(text: str) -> dict:
    return {"type": "message", "role": "user", "content": text}


def test_responses_in_sequence_on_one_connection(ws_proxy, upstream):
    with Socket(ws_proxy) as ws:
        first = ws.create(input="one", store=False)
        second = ws.create(input="two", store=False)
    for got in (first, second):
        kinds = [e["type"] for e in got]
        assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
        assert "response.output_text.delta" in kinds
        assert texts(completed(got)) == ["Hello there"]
        assert all("stream_id" not in e for e in got)
    sent = [r.json() for r in upstream.responses_requests()]
    assert [(b["stream"], b["input"]) for b in sent] == [(True, "one"), (True, "two")]
    assert completed(first)["id"] != completed(second)["id"]


def test_the_path_without_v1_serves_it_too(ws_proxy, upstream):
    with Socket(ws_proxy, path="/responses") as ws:
        assert texts(completed(ws.create(input="hi"))) == ["Hello there"]


def test_previous_response_id_with_store_false_sends_the_whole_history(ws_proxy, upstream):
    with Socket(ws_proxy) as ws:
        one = completed(ws.create(input=[user("one")], store=False, instructions="be brief"))
        two = completed(ws.create(input=[user("two")], store=False, previous_response_id=one["id"]))
        completed(ws.create(input=[user("three")], store=False, previous_response_id=two["id"]))
        # a fork from the first response, on the same connection
        completed(ws.create(input=[user("other")], store=False, previous_response_id=one["id"]))
    *_, third, fork = [r.json() for r in upstream.responses_requests()]
    assert "previous_response_id" not in third and third["store"] is False
    assert "instructions" not in third  # as on OpenAI: a continuation does not carry the previous instructions
    assert [
        (i.get("role"), i.get("content") if i.get("role") == "user" else i["content"][0]["text"])
        for i in third["input"]
    ] == [
        ("user", "one"),
        ("assistant", "Hello there"),
        ("user", "two"),
        ("assistant", "Hello there"),
        ("user", "three"),
    ]
    answers = [i for i in third["input"] if i["role"] == "assistant"]
    assert [i["id"] for i in answers] == [one["output"][0]["id"], two["output"][0]["id"]]  # as the responses gave them
    assert [i.get("role") for i in fork["input"]] == ["user", "assistant", "user"]
    assert fork["input"][-1]["content"] == "other"


def test_a_string_input_continues_as_a_user_message(ws_proxy, upstream):
    with Socket(ws_proxy) as ws:
        one = completed(ws.create(input="one", store=False))
        completed(ws.create(input="two", store=False, previous_response_id=one["id"]))
    last = upstream.responses_requests()[-1].json()
    assert [i["role"] for i in last["input"]] == ["user", "assistant", "user"]
    assert last["input"][0]["content"] == "one" and last["input"][2]["content"] == "two"


def test_a_previous_response_the_connection_does_not_hold_is_previous_response_not_found(ws_proxy, upstream):
    with Socket(ws_proxy) as ws:
        [error] = ws.create(input="two", store=False, previous_response_id="resp_not_here")
        assert error["type"] == "error" and error["status"] == 400
        assert error["error"]["code"] == "previous_response_not_found"
        assert error["error"]["param"] == "previous_response_id"
        assert "resp_not_here" in error["error"]["message"] and "full input" in error["error"]["message"]
        assert upstream.responses_requests() == []
        assert texts(completed(ws.create(input="full", store=False))) == ["Hello there"]  # the connection goes on


def test_a_stored_previous_response_it_does_not_hold_goes_upstream_as_over_http(ws_proxy, upstream):
    with Socket(ws_proxy) as ws:
        completed(ws.create(input="two", previous_response_id="resp_stored_upstream"))
    assert upstream.responses_requests()[-1].json()["previous_response_id"] == "resp_stored_upstream"


def test_a_response_of_one_connection_is_not_usable_from_another(ws_proxy, upstream):
    with Socket(ws_proxy, "sk-tenant-aaaa") as a:
        held = completed(a.create(input="secret plan", store=False))["id"]
        with Socket(ws_proxy, "sk-tenant-bbbb") as b:  # another credential
            [error] = b.create(input="tell me", store=False, previous_response_id=held)
            assert error["error"]["code"] == "previous_response_not_found"
        with Socket(ws_proxy, "sk-tenant-aaaa") as again:  # the same credential, another connection
            [error] = again.create(input="tell me", store=False, previous_response_id=held)
            assert error["error"]["code"] == "previous_response_not_found"
    assert all("secret plan" not in r.body.decode() for r in upstream.responses_requests()[1:])


def test_the_upgrade_headers_carry_the_offload_settings(ws_proxy, upstream):
    big = {"type": "function_call_output", "call_id": "call_1", "output": SEQ}
    call = {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{}"}
    with Socket(ws_proxy, headers={"X-Offload-Mode": "off"}) as off:
        completed(off.create(input=[user("go"), call, big], store=False))
    with Socket(ws_proxy) as on:
        completed(on.create(input=[user("go"), call, big], store=False))
    plain, managed = upstream.responses_requests()
    assert input_items(plain)[-1]["output"] == SEQ
    assert input_items(managed)[-1]["output"].startswith("[offloaded tool result: ")


def shell_model(rec):
    """Run a command; reload its output when it comes back offloaded; say what came back."""
    last = input_items(rec)[-1]
    if last.get("role") == "user" and len(input_items(rec)) > 1:
        return answer(rec, message(f"STILL {REF.findall(json.dumps(input_items(rec)))}"))
    if last.get("type") == "function_call_output" and last["call_id"] == "call_reload":
        return answer(rec, message(f"RELOADED {len(re.findall(r'^[0-9]+$', last['output'], re.M))} lines"))
    if last.get("type") == "function_call_output":
        refs = REF.findall(last["output"])
        return answer(rec, function_call("context_reload", {"ref": refs[0]}, call_id="call_reload"))
    return answer(rec, function_call("shell", {"cmd": f"seq 1 {LINES}"}, call_id="call_shell"))


async def shell_handler(request, rec):
    return shell_model(rec) if is_responses_create(rec) else await default_handler(request, rec)


def test_a_large_tool_output_is_offloaded_and_reloaded_in_a_hidden_round(ws_proxy, upstream):
    upstream.handler = shell_handler
    tools = [{"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {}}}]
    with Socket(ws_proxy) as ws:
        first = completed(ws.create(input=[user("run it")], tools=tools, store=False))
        [call] = first["output"]
        assert call["name"] == "shell"
        output = {"type": "function_call_output", "call_id": call["call_id"], "output": SEQ}
        got = ws.create(input=[output], tools=tools, store=False, previous_response_id=first["id"])
        second = completed(got)
        assert texts(second) == [f"RELOADED {LINES} lines"]
        assert "context_reload" not in json.dumps(got)  # the reload round stays hidden
        third = completed(
            ws.create(input=[user("and now?")], tools=tools, store=False, previous_response_id=second["id"])
        )
    one, two, reload_round, four = upstream.responses_requests()
    offloaded = input_items(two)[-1]["output"]
    assert offloaded.startswith("[offloaded tool result: ") and SEQ not in two.body.decode()
    [ref] = REF.findall(offloaded)
    assert SEQ in input_items(reload_round)[-1]["output"]
    # the next turn: the same history, offloaded the same way (the provider's cache prefix holds)
    assert input_items(four)[: len(input_items(two))] == input_items(two)
    assert texts(third) == [f"STILL {[ref]}"]
