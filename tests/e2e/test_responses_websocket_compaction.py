"""A `compaction_trigger` (Codex's remote compaction v2) over the Responses WebSocket mode, with
the plain `websockets` client: the same event sequence and the same one compaction item as over
HTTP streaming, emulated for an upstream that does not compact (the fake on loopback); the
response held by the connection without its trigger, so that a continuation with
`previous_response_id` on the same connection goes on from the compaction item (the upstream
sees the summary, then the new items; never the trigger, the item or the token); a trigger
continuing a held response compacts the whole history it stands for; bad trigger input answered
as `error` events with the status, code and param HTTP answers, the connection going on;
relayed, the provider's own item carried on the same way.
"""

from __future__ import annotations

import json

import pytest

from proxy.core.compaction import ANY_VERSION, PREFIX
from tests.e2e.test_responses_compaction_trigger import (
    DEVELOPER,
    HISTORY,
    MODEL,
    RELOAD,
    TASK,
    TRIGGER,
    history_lines,  # noqa: F401 (the fake model)
    model,
)
from tests.harness import responses as fake
from tests.harness.requests import post, streamed
from tests.harness.responses import user_message as user
from tests.harness.servers import SNAPSHOT, failing_summaries, scripted
from tests.harness.websocket import Socket, completed, texts

pytestmark = [pytest.mark.usefixtures("fresh_summary_memory")]

SEQUENCE = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.output_item.done",
    "response.completed",
]


def socket(proxy_url: str, key: str, **headers: str) -> Socket:
    return Socket(proxy_url, key, headers={**RELOAD, **headers}, timeout=30)


def sse_events(proxy_url: str, key: str, body: dict) -> list[dict]:
    r, text = streamed(
        proxy_url, "/v1/responses", json=body, headers={"Authorization": f"Bearer {key}", **RELOAD}, timeout=30
    )
    assert r.status_code == 200, text
    return [
        json.loads(line[len("data: ") :])
        for line in text.replace("\r\n", "\n").split("\n")
        if line.startswith("data: ") and line != "data: [DONE]"
    ]


def never_upstream(upstream) -> None:
    """No upstream request carried a trigger, a compaction item or a token of the proxy's."""
    for rec in upstream.requests:
        assert b"compaction_trigger" not in rec.body and ANY_VERSION.encode() not in rec.body
        assert b'"compaction"' not in rec.body.replace(b" ", b"")


def test_the_same_events_as_over_http_and_one_compaction_item(proxy_url, upstream, key):
    body = {"model": MODEL, "input": [*HISTORY, TRIGGER], "store": False, "instructions": "You are Codex."}
    with socket(proxy_url, key) as ws:
        got = ws.create(**body)
    assert [e["type"] for e in got] == SEQUENCE
    assert [e["sequence_number"] for e in got] == [0, 1, 2, 3, 4]
    response = completed(got)
    [item] = response["output"]
    assert item["type"] == "compaction" and item["encrypted_content"].startswith(PREFIX)
    assert got[3]["item"] == item and got[0]["response"]["id"] == response["id"]
    assert response["status"] == "completed" and response["instructions"] == "You are Codex."
    assert not upstream.responses_requests() and len(upstream.summary_requests()) == 1
    # over HTTP the same history gets the same events and the same item (the summary reused)
    http = sse_events(proxy_url, key, body)
    assert [e["type"] for e in http] == SEQUENCE
    assert http[3]["item"]["encrypted_content"] == item["encrypted_content"]
    assert set(http[-1]["response"]) == set(response)
    assert len(upstream.summary_requests()) == 1 and not upstream.responses_requests()


def test_a_continuation_on_the_same_connection_goes_on_from_the_compaction_item(proxy_url, upstream, key):
    with socket(proxy_url, key) as ws:
        compacted = completed(ws.create(model=MODEL, input=[*HISTORY, TRIGGER], store=False))
        # the held response: its history without the trigger, then its compaction item
        go_on = ws.create(model=MODEL, input=[user("reload please")], store=False, previous_response_id=compacted["id"])
        assert texts(completed(go_on)) == ["reloaded"]
        assert "context_reload" not in json.dumps(go_on)  # the reload round stays hidden
        later = completed(
            ws.create(model=MODEL, input=[user("and now?")], store=False, previous_response_id=completed(go_on)["id"])
        )
        assert texts(later) == ["an answer that is no compaction"]
    first, reload_round, third = upstream.responses_requests()
    never_upstream(upstream)
    sent = fake.input_items(first)
    # the developer and first user message kept, the summary in the item's place, the last user
    # message the record keeps, then the new items
    assert sent[:2] == [DEVELOPER, TASK] and sent.count(DEVELOPER) == 1 and sent.count(TASK) == 1
    summary = sent[2]["content"][0]["text"]
    assert SNAPSHOT in summary and "ref=" in summary and "line 399" not in first.body.decode()
    assert sent[3:] == [HISTORY[5], user("reload please")]
    assert fake.input_items(reload_round)[-1]["output"] == history_lines(HISTORY[2:])  # every summarised byte
    # the next continuation: the same history, the reload round's answer, the new question
    assert fake.input_items(third)[: len(sent)] == sent
    assert fake.input_items(third)[-1] == user("and now?")
    assert len(upstream.summary_requests()) == 1


def test_a_compacted_chain_compacts_again_and_goes_on(proxy_url, upstream, key):
    with socket(proxy_url, key) as ws:
        one = completed(ws.create(model=MODEL, input=[*HISTORY, TRIGGER], store=False))
        two = completed(ws.create(model=MODEL, input=[user("Deploy.")], store=False, previous_response_id=one["id"]))
        # a trigger continuing a held response compacts the whole history it stands for
        again = completed(ws.create(model=MODEL, input=[TRIGGER], store=False, previous_response_id=two["id"]))
        [item] = again["output"]
        assert item["type"] == "compaction" and item["encrypted_content"] != one["output"][0]["encrypted_content"]
        last = completed(ws.create(model=MODEL, input=[user("status?")], store=False, previous_response_id=again["id"]))
        assert texts(last) == ["an answer that is no compaction"]
    first_summary, second_summary = upstream.summary_requests()
    assert one["output"][0]["encrypted_content"].encode() not in second_summary.body  # the record, never the token
    assert SNAPSHOT.encode() in second_summary.body and b"Deploy." in second_summary.body
    never_upstream(upstream)
    sent = fake.input_items(upstream.responses_requests()[-1])
    assert sent[0] == DEVELOPER and sent[-1] == user("status?") and SNAPSHOT in json.dumps(sent)
    # the record keeps the user messages (as OpenAI's compaction does); the answers are folded
    assert "an answer that is no compaction" not in json.dumps(sent)


def test_codex_style_full_input_after_the_compaction(proxy_url, upstream, key):
    """Codex after compacting: its developer and user messages, the item, the new turn, in full."""
    with socket(proxy_url, key) as ws:
        [item] = completed(ws.create(model=MODEL, input=[*HISTORY, TRIGGER], store=False))["output"]
        assert texts(
            completed(
                ws.create(model=MODEL, store=False, input=[DEVELOPER, TASK, HISTORY[5], item, user("reload please")])
            )
        ) == ["reloaded"]
    never_upstream(upstream)
    first = fake.input_items(upstream.responses_requests()[0])
    assert first[:2] == [DEVELOPER, TASK] and SNAPSHOT in first[2]["content"][0]["text"]
    assert first[3:] == [HISTORY[5], user("reload please")]


BAD = [
    [TRIGGER, *HISTORY],
    [*HISTORY, TRIGGER, TRIGGER],
    [*HISTORY, TRIGGER, user("and then")],
    [*HISTORY, {**TRIGGER, "id": "ct_1"}],
    [*HISTORY, {**TRIGGER, "id": 7}],
    [*HISTORY, {**TRIGGER, "extra": [None, {"a": 1}]}],
    [TRIGGER],
]


def http_error(proxy_url: str, key: str, body: dict) -> tuple[int, dict]:
    r = post(
        proxy_url,
        "/v1/responses",
        json={**body, "stream": True},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    return r.status_code, r.json()["error"]


@pytest.mark.parametrize("items", BAD, ids=range(len(BAD)))
def test_bad_triggers_are_error_events_with_the_codes_http_answers(proxy_url, upstream, key, items):
    body = {"model": MODEL, "input": items}
    with socket(proxy_url, key) as ws:
        [error] = ws.create(**body)
        status, expected = http_error(proxy_url, key, body)
        assert status == 400 and error["type"] == "error" and error["status"] == status
        assert error["error"] == {k: expected[k] for k in ("type", "code", "message", "param")}
        assert texts(completed(ws.create(model=MODEL, input="hi"))) == ["an answer that is no compaction"]
    assert len(upstream.requests) == 1  # only the last, good one


@pytest.mark.parametrize("extra", [{"conversation": "conv_1"}, {"previous_response_id": "resp_stored_upstream"}])
def test_state_the_proxy_does_not_hold_is_refused_as_over_http(proxy_url, upstream, key, extra):
    body = {"model": MODEL, "input": [*HISTORY, TRIGGER], **extra}
    with socket(proxy_url, key) as ws:
        [error] = ws.create(**body)
    status, expected = http_error(proxy_url, key, body)
    assert (
        (error["status"], error["error"]["code"], error["error"]["param"])
        == (status, expected["code"], expected["param"])
        == (400, "unsupported_parameter", next(iter(extra)))
    )
    assert not upstream.requests


def test_a_trigger_continuing_a_response_the_connection_does_not_hold_is_previous_response_not_found(
    proxy_url, upstream, key
):
    with socket(proxy_url, key) as ws:
        [error] = ws.create(model=MODEL, input=[TRIGGER], store=False, previous_response_id="resp_elsewhere")
    assert error["error"]["code"] == "previous_response_not_found"
    assert not upstream.requests


def test_a_failing_summary_is_a_502_event_and_nothing_held(proxy_url, upstream, key):
    upstream.handler = failing_summaries
    with socket(proxy_url, key) as ws:
        [error] = ws.create(model=MODEL, input=[*HISTORY, TRIGGER], store=False)
        assert (error["status"], error["error"]["code"]) == (502, "compaction_failed")
        assert texts(completed(ws.create(model=MODEL, input="still there?", store=False))) == ["Hello"]
    assert len(upstream.responses_requests()) == 1


def test_relayed_the_providers_item_is_carried_on_without_the_trigger(proxy_url, upstream, key):
    upstream.handler = scripted(lambda rec: fake.native_answer(rec) or fake.answer(rec, fake.message("Hello")))
    with socket(proxy_url, key, **{"X-Offload-Context-Management": "relay"}) as ws:
        compacted = completed(ws.create(model=MODEL, input=[user("hi")], store=False))
        native = completed(ws.create(model=MODEL, input=[TRIGGER], store=False, previous_response_id=compacted["id"]))
        assert native["output"] == [fake.NATIVE_COMPACTION]
        completed(ws.create(model=MODEL, input=[user("go on")], store=False, previous_response_id=native["id"]))
    _, trigger, after = upstream.responses_requests()
    assert fake.input_items(trigger)[-1] == TRIGGER  # the provider compacts
    sent = fake.input_items(after)
    assert TRIGGER not in sent and sent[-2:] == [fake.NATIVE_COMPACTION, user("go on")]
    assert sent[0] == user("hi")
