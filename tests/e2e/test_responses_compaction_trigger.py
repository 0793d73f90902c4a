"""A `POST /v1/responses` ending in `{"type": "compaction_trigger"}` (Codex's remote compaction
v2) through the proxy, with the real openai SDK: emulated for an upstream that does not compact
(the fake on loopback: `auto` emulates), answered with one compaction item holding the proxy's
token, streamed and not; the item carried into the next turn, where the fake model sees the
summary and reloads what it stands for byte for byte; compacted again later; bad input refused
in OpenAI's error shape, never a 500; relayed byte for byte to a native upstream
(`X-Offload-Context-Management: relay`)."""

from __future__ import annotations

import json

import httpx2
import openai
import pytest

from proxy.core.compaction import PREFIX
from proxy.core.texts import refs_in
from tests.harness import responses as fake
from tests.harness.requests import post
from tests.harness.responses import assistant_message as assistant
from tests.harness.responses import user_message as user
from tests.harness.servers import SNAPSHOT, failing_summaries, scripted

pytestmark = [
    pytest.mark.usefixtures("fresh_summary_memory"),
    pytest.mark.filterwarnings("error:Pydantic serializer warnings:UserWarning"),
]

MODEL = "gpt-5-codex"
TRIGGER = {"type": "compaction_trigger"}
RELOAD = {"X-Offload-Max-Reload-Tokens": "100000"}
BIG_OUTPUT = "\n".join(f"line {i}: test {i} passed in {i % 17} ms" for i in range(400))
DEVELOPER = {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be careful."}]}
TASK = user("Fix the failing test.")
HISTORY = [
    DEVELOPER,
    TASK,
    {"type": "function_call", "call_id": "call_test", "name": "exec_command", "arguments": '{"cmd":"pytest"}'},
    {"type": "function_call_output", "call_id": "call_test", "output": BIG_OUTPUT},
    assistant("The tests pass now."),
    user("Now run the linter."),
]
TOOLS = [
    {"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {}}, "strict": False}
]


def sdk(proxy_url: str, key: str, **headers) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{proxy_url}/v1", api_key=key, max_retries=0, timeout=30, default_headers={**RELOAD, **headers}
    )


@pytest.fixture(autouse=True)
def model(upstream):
    """The fake model: reloads the ref of a summary it is shown when asked to, then answers."""
    upstream.handler = scripted(fake.reloading_model("an answer that is no compaction"))


def history_lines(items: list[dict]) -> str:
    return "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in items)


def test_the_sdk_gets_one_compaction_item_and_the_upstream_no_turn(proxy_url, upstream, key):
    client = sdk(proxy_url, key)
    raw = client.responses.with_raw_response.create(
        model=MODEL, input=[*HISTORY, TRIGGER], tools=TOOLS, store=False, instructions="You are Codex."
    )
    response = raw.parse()
    assert raw.headers["x-offload-action"] == "emulated-compaction"
    assert int(raw.headers["x-offload-tokens-after"]) < int(raw.headers["x-offload-tokens-before"])
    [item] = response.output
    assert item.type == "compaction" and item.encrypted_content.startswith(PREFIX) and item.id.startswith("cmp_")
    assert response.status == "completed" and response.object == "response" and response.model == MODEL
    assert response.instructions == "You are Codex." and response.tools[0].name == "exec_command"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (300, 40)  # the summary call's
    assert not upstream.responses_requests()  # the upstream was asked for no turn
    [summary_call] = upstream.summary_requests()
    sent = summary_call.json()
    assert b"compaction_trigger" not in summary_call.body and sent["model"] == MODEL
    assert fake.input_items(summary_call)[: len(HISTORY)] == HISTORY  # the history before the trigger, as sent
    # the same history compacted again: the same item, nothing billed
    again = client.responses.create(
        model=MODEL, input=[*HISTORY, TRIGGER], tools=TOOLS, store=False, instructions="You are Codex."
    )
    assert again.output[0].encrypted_content == item.encrypted_content and again.usage.total_tokens == 0
    assert len(upstream.summary_requests()) == 1


def test_streamed_it_is_openais_event_sequence(proxy_url, upstream, key):
    client = sdk(proxy_url, key)
    with client.responses.create(
        model=MODEL, input=[*HISTORY, TRIGGER], tools=TOOLS, store=False, stream=True
    ) as stream:
        events = list(stream)
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == [0, 1, 2, 3, 4]
    done = events[3].item
    assert done.type == "compaction" and done.encrypted_content.startswith(PREFIX)
    final = events[-1].response
    assert [o.type for o in final.output] == ["compaction"] and final.usage.total_tokens == 340
    assert final.id == events[0].response.id
    with client.responses.stream(model=MODEL, input=[*HISTORY, TRIGGER], store=False) as stream:
        assert stream.get_final_response().output[0].encrypted_content == done.encrypted_content
    assert not upstream.responses_requests()


@pytest.mark.parametrize("stream", [False, True])
def test_the_next_turn_carries_the_item_back_and_the_model_sees_the_summary(proxy_url, upstream, key, stream):
    client = sdk(proxy_url, key)
    compacted = client.responses.create(model=MODEL, input=[*HISTORY, TRIGGER], store=False, stream=False)
    item = compacted.output[0].model_dump(exclude_unset=True, warnings=False)
    # as Codex goes on: its developer and user messages, the compaction item, the new turn
    follow = [DEVELOPER, TASK, HISTORY[5], item, user("reload please")]
    final = fake.final_response(client, stream=stream, model=MODEL, store=False, input=follow)
    assert final.output_text == "reloaded"
    first, second = upstream.responses_requests()
    assert item["encrypted_content"].encode() not in first.body and b"compaction" not in first.body
    sent = fake.input_items(first)
    assert sent[0] == DEVELOPER and sent[1] == TASK and sent.count(DEVELOPER) == 1 and sent.count(TASK) == 1
    summary = sent[2]["content"][0]["text"]
    assert SNAPSHOT in summary and refs_in(summary) and BIG_OUTPUT not in first.body.decode()
    assert sent[3:] == [HISTORY[5], user("reload please")]
    reload_output = fake.input_items(second)[-1]
    assert reload_output["output"] == history_lines(HISTORY[2:])  # every summarised byte, in order


def test_a_compacted_history_compacts_again(proxy_url, upstream, key):
    client = sdk(proxy_url, key)
    first = client.responses.create(model=MODEL, input=[*HISTORY, TRIGGER], store=False).output[0]
    later = [
        DEVELOPER,
        TASK,
        HISTORY[5],
        first.model_dump(exclude_unset=True, warnings=False),
        assistant("Linted."),
        user("Deploy."),
        assistant("Deployed."),
        TRIGGER,
    ]
    second = client.responses.create(model=MODEL, input=later, store=False).output[0]
    assert second.type == "compaction" and second.encrypted_content != first.encrypted_content
    summary_call = upstream.summary_requests()[-1]
    assert first.encrypted_content.encode() not in summary_call.body  # the record folded, never the token
    assert SNAPSHOT.encode() in summary_call.body and b"Deployed." in summary_call.body
    client.responses.create(
        model=MODEL,
        store=False,
        input=[DEVELOPER, TASK, second.model_dump(exclude_unset=True, warnings=False), user("status?")],
    )
    sent = fake.input_items(upstream.responses_requests()[-1])
    assert sent[:2] == [DEVELOPER, TASK] and sent[-1] == user("status?")
    assert b"compaction" not in upstream.responses_requests()[-1].body


@pytest.mark.parametrize(
    "items, param, code",
    [
        ([TRIGGER, *HISTORY], "input[0]", "invalid_value"),
        ([*HISTORY, TRIGGER, TRIGGER], f"input[{len(HISTORY)}]", "invalid_value"),
        ([*HISTORY, TRIGGER, user("and then")], f"input[{len(HISTORY)}]", "invalid_value"),
        ([*HISTORY, {**TRIGGER, "id": "ct_1"}], f"input[{len(HISTORY)}].id", "unknown_parameter"),
        ([*HISTORY, {**TRIGGER, "id": 7}], f"input[{len(HISTORY)}].id", "invalid_type"),  # the body check's, first
        ([*HISTORY, {**TRIGGER, "extra": [None, {"a": 1}]}], f"input[{len(HISTORY)}].extra", "unknown_parameter"),
        (
            [*HISTORY, {**TRIGGER, "encrypted_content": {"x": True}}],
            f"input[{len(HISTORY)}].encrypted_content",
            "unknown_parameter",
        ),
        ([TRIGGER], "input", "invalid_value"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_bad_triggers_are_400s_in_openais_shape(proxy_url, upstream, key, items, param, code, stream):
    r = post(proxy_url, "/v1/responses", body={"model": MODEL, "input": items, "stream": stream}, key=key)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["param"], error["code"], error["type"]) == (param, code, "invalid_request_error")
    assert not upstream.requests


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"background": True, "store": True}, "background"),
    ],
)
def test_state_the_proxy_cannot_compact_is_refused_with_the_trigger(proxy_url, upstream, key, extra, param):
    r = post(proxy_url, "/v1/responses", body={"model": MODEL, "input": [*HISTORY, TRIGGER], **extra}, key=key)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    assert not upstream.requests


@pytest.mark.parametrize(
    "item",
    [
        {"type": ["compaction_trigger"]},
        {"type": None},
        {"type": 5},
        {"type": {"compaction_trigger": 1}},
        {"type": "compaction_trigger "},
    ],
)
def test_something_that_only_looks_like_a_trigger_is_no_trigger_and_no_500(proxy_url, upstream, key, item):
    r = post(proxy_url, "/v1/responses", body={"model": MODEL, "input": [*HISTORY, item]}, key=key)
    assert r.status_code in (200, 400), r.text
    assert "x-offload-action" not in r.headers or r.headers["x-offload-action"] != "emulated-compaction"


def test_a_huge_history_is_compacted(proxy_url, upstream, key):
    outputs = [
        {"type": "function_call_output", "call_id": f"c{i}", "output": f"{i}: " + "data " * 20_000} for i in range(60)
    ]  # about 6 MB, 60 large tool results
    calls = [
        {"type": "function_call", "call_id": f"c{i}", "name": "exec_command", "arguments": "{}"} for i in range(60)
    ]
    items = [TASK, *[x for pair in zip(calls, outputs) for x in pair], TRIGGER]
    r = post(proxy_url, "/v1/responses", body={"model": MODEL, "input": items, "store": False}, key=key)
    assert r.status_code == 200, r.text[:2000]
    [item] = r.json()["output"]
    assert item["type"] == "compaction" and item["encrypted_content"].startswith(PREFIX)
    assert not upstream.responses_requests()


def test_a_failing_summary_is_a_502_and_no_item(proxy_url, upstream, key):
    upstream.handler = failing_summaries
    for stream in (False, True):
        r = post(
            proxy_url,
            "/v1/responses",
            body={"model": MODEL, "input": [*HISTORY, user(f"{stream}"), TRIGGER], "stream": stream},
            key=key,
        )
        assert r.status_code == 502, r.text
        assert r.json()["error"]["code"] == "compaction_failed"
    assert not upstream.responses_requests()


def test_relayed_byte_for_byte_to_a_native_upstream(proxy_url, upstream, key):
    upstream.handler = scripted(lambda rec: fake.native_answer(rec))
    body = json.dumps({"model": MODEL, "input": [user("hi"), TRIGGER], "store": False}).encode()
    r = httpx2.post(
        f"{proxy_url}/v1/responses",
        content=body,
        timeout=30,
        headers={
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            "X-Offload-Context-Management": "relay",
        },
    )
    assert r.status_code == 200, r.text
    assert r.json()["output"] == [fake.NATIVE_COMPACTION]
    [rec] = upstream.requests
    assert rec.path == "/v1/responses" and rec.body == body
    # a misplaced trigger is the provider's to refuse: it goes as sent too
    misplaced = json.dumps({"model": MODEL, "input": [TRIGGER, user("hi")]}).encode()
    httpx2.post(
        f"{proxy_url}/v1/responses",
        content=misplaced,
        timeout=30,
        headers={
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            "X-Offload-Context-Management": "relay",
        },
    )
    assert upstream.requests[-1].body == misplaced


def test_the_compaction_is_recorded_as_an_emulated_compaction(make_proxy, upstream, key):
    import time

    with make_proxy(admin_token="admin-secret-token-0123456789") as url:
        for stream in (False, True):
            r = post(
                url,
                "/v1/responses",
                body={"model": MODEL, "input": [*HISTORY, user(f"stream={stream}"), TRIGGER], "stream": stream},
                key=key,
            )
            assert r.status_code == 200, r.text
        admin = {"Authorization": "Bearer admin-secret-token-0123456789"}
        deadline = time.monotonic() + 10  # the recorder flushes about once a second
        while (
            totals := httpx2.get(f"{url}/v1/offload/stats", params={"window": "1h"}, headers=admin, timeout=10).json()[
                "totals"
            ]
        )["requests"] < 2:
            assert time.monotonic() < deadline, totals
            time.sleep(0.2)
        metrics = httpx2.get(f"{url}/metrics", headers=admin).text
        events = httpx2.get(f"{url}/v1/offload/events", headers={"Authorization": f"Bearer {key}"}).json()["data"]
    assert totals["emulated"] == {"compactions": 2, "context_edits": 0}, totals
    assert 'route="responses"' in metrics
    assert [(e["endpoint"], e["emulated"]) for e in events if e["type"] == "provider_compaction"] == [
        ("responses", True)
    ] * 2
