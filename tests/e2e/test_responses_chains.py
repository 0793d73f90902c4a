"""Server-side state through reload rounds: the client continues from the id it got.

After a reload round the client holds the first round's response id; upstream, the response
that holds the whole exchange is the last round's. A later `previous_response_id` naming the
first id goes up as the last one (per credential: another credential's request is untouched),
and the rounds of a chained request are themselves chained from the previous round.
"""

from __future__ import annotations

import time

import openai
import pytest

from tests.e2e.test_responses_clients import HEADERS, TOOLS, history, reload_then_answer
from tests.harness.responses import function_call_output, input_items
from tests.harness.servers import default_handler


@pytest.fixture
def client(proxy_url, upstream) -> openai.OpenAI:
    """A credential of this module's own: what it stores is not another test's business."""
    return openai.OpenAI(base_url=f"{proxy_url}/v1", api_key="sk-chains-key", max_retries=0, timeout=20)


def wait_for_chain(client: openai.OpenAI, upstream, first_id: str) -> str:
    """The previous_response_id the upstream gets for `first_id` (the proxy remembers the chain
    just after answering, so the first try may come too early)."""
    deadline = time.monotonic() + 10
    while True:
        upstream.requests.clear()
        client.responses.create(model="gpt-5", previous_response_id=first_id, input="and then?", extra_headers=HEADERS)
        sent = upstream.responses_requests()[-1].json()["previous_response_id"]
        if sent != first_id or time.monotonic() > deadline:
            return sent
        time.sleep(0.05)


def test_continuing_from_the_id_of_a_reloaded_response(client, upstream, proxy_url):
    upstream.handler = reload_then_answer()
    result = client.responses.create(model="gpt-5", input=history(), tools=TOOLS, extra_headers=HEADERS)
    assert result.id == "resp_round_1"
    upstream.handler = default_handler
    assert wait_for_chain(client, upstream, "resp_round_1") == "resp_round_2"

    other = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key="sk-another-key", max_retries=0, timeout=20)
    upstream.requests.clear()
    other.responses.create(model="gpt-5", previous_response_id="resp_round_1", input="mine?", extra_headers=HEADERS)
    assert upstream.responses_requests()[-1].json()["previous_response_id"] == "resp_round_1"


def test_a_stored_false_exchange_is_not_remembered(upstream, proxy_url):
    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key="sk-store-false-key", max_retries=0, timeout=20)
    upstream.handler = reload_then_answer()
    result = client.responses.create(model="gpt-5", input=history(), tools=TOOLS, store=False, extra_headers=HEADERS)
    assert result.id == "resp_round_1"
    upstream.handler = default_handler
    time.sleep(0.3)  # the chain would be remembered right after the answer
    upstream.requests.clear()
    client.responses.create(model="gpt-5", previous_response_id="resp_round_1", input="x", extra_headers=HEADERS)
    assert upstream.responses_requests()[-1].json()["previous_response_id"] == "resp_round_1"


def test_rounds_of_a_chained_request_are_chained(client, upstream):
    upstream.handler = reload_then_answer()
    items = history()
    result = client.responses.create(
        model="gpt-5", previous_response_id="resp_before", input=items, tools=TOOLS, extra_headers=HEADERS
    )
    assert result.output_text and result.id == "resp_round_1"
    first, second = upstream.responses_requests()
    assert first.json()["previous_response_id"] == "resp_before"
    assert second.json()["previous_response_id"] == "resp_round_1"
    [out] = input_items(second)
    assert out["type"] == "function_call_output" and out["call_id"] == "call_reload_1"
    assert out == function_call_output("call_reload_1", out["output"]) and len(out["output"]) > 30_000


def test_deleting_the_id_of_a_reloaded_response_deletes_the_exchange_too(proxy_url, upstream):
    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key="sk-delete-key", max_retries=0, timeout=20)
    upstream.handler = reload_then_answer()
    assert (
        client.responses.create(model="gpt-5", input=history(), tools=TOOLS, extra_headers=HEADERS).id == "resp_round_1"
    )
    upstream.handler = default_handler
    assert wait_for_chain(client, upstream, "resp_round_1") == "resp_round_2"
    upstream.requests.clear()
    client.responses.delete("resp_round_1")
    assert [(r.method, r.path) for r in upstream.requests] == [
        ("DELETE", "/v1/responses/resp_round_1"),
        ("DELETE", "/v1/responses/resp_round_2"),
    ]
    assert upstream.requests[1].headers["authorization"] == "Bearer sk-delete-key"
    upstream.requests.clear()
    client.responses.delete("resp_unrelated")
    assert [(r.method, r.path) for r in upstream.requests] == [("DELETE", "/v1/responses/resp_unrelated")]


def mixed_round(response_id: str):
    """The model calls the client's tool and context_reload at once, then answers."""
    from tests.harness.responses import answering, function_call, message, refs_in_input
    from tests.harness.servers import scripted

    def first(rec):
        return answering(
            function_call("read_logs", {"path": "/other.log"}, call_id="call_client_2", id="fc_c2"),
            function_call("context_reload", {"ref": refs_in_input(rec)[0]}, call_id="call_inj_2", id="fc_i2"),
            id=response_id,
        )(rec)

    return scripted(first, answering(message("all done"), id=f"{response_id}_next"))


def test_an_injected_call_beside_the_clients_is_answered_in_the_clients_next_request(proxy_url, upstream):
    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key="sk-mixed-key", max_retries=0, timeout=20)
    upstream.handler = mixed_round("resp_mix_1")
    result = client.responses.create(model="gpt-5", input=history(), tools=TOOLS, extra_headers=HEADERS)
    assert result.id == "resp_mix_1"
    assert [(o.type, o.call_id) for o in result.output] == [("function_call", "call_client_2")]
    upstream.requests.clear()
    client.responses.create(
        model="gpt-5",
        previous_response_id="resp_mix_1",
        tools=TOOLS,
        extra_headers=HEADERS,
        input=[function_call_output("call_client_2", "no such file")],
    )
    [sent] = upstream.responses_requests()
    assert sent.json()["previous_response_id"] == "resp_mix_1"
    carried, own = input_items(sent)
    assert carried["type"] == "function_call_output" and carried["call_id"] == "call_inj_2"
    assert len(carried["output"]) > 30_000  # the reloaded log: every call of the stored response has its output
    assert own == function_call_output("call_client_2", "no such file")


def test_in_a_conversation_the_answer_is_carried_once(proxy_url, upstream):
    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key="sk-conversation-key", max_retries=0, timeout=20)
    upstream.handler = mixed_round("resp_conv_1")
    events = list(
        client.responses.create(
            model="gpt-5", input=history(), tools=TOOLS, conversation="conv_9", stream=True, extra_headers=HEADERS
        )
    )
    done = [e for e in events if e.type == "response.completed"]
    assert [o.call_id for o in done[0].response.output] == ["call_client_2"]
    for expected in (["call_inj_2", "call_client_2"], ["call_client_2"]):
        upstream.requests.clear()
        client.responses.create(
            model="gpt-5",
            conversation="conv_9",
            tools=TOOLS,
            extra_headers=HEADERS,
            input=[function_call_output("call_client_2", "no such file")],
        )
        [sent] = upstream.responses_requests()
        assert sent.json()["conversation"] == "conv_9" and "previous_response_id" not in sent.json()
        assert [i["call_id"] for i in input_items(sent)] == expected
