"""OpenAI's threshold compaction (`context_management: [{"type": "compaction", "compact_threshold": N}]`)
emulated by the proxy for an upstream without it (issue 22, part 2): over the threshold, the
proxy summarises in the turn, forwards the reduced input, and the answer (streamed or not)
opens with one `compaction` item carrying its token, which stands for everything the client
may drop; the next turn, sent from that item on, reaches the model as summary + tail + new turn,
with no second summary. Malformed fields are refused with a 400."""

from __future__ import annotations

import json

import httpx2
import openai
import pytest

from proxy.core.compaction import PREFIX, is_ours
from proxy.core.texts import refs_in
from tests.harness import responses as fake
from tests.harness.requests import post
from tests.harness.responses import assistant_message as assistant
from tests.harness.responses import user_message as user
from tests.harness.responses import words
from tests.harness.servers import RedisProcess, scripted

# the SDK's Pydantic serializer warnings are errors here: one came from the README's example (see
# test_the_readmes_compaction_example_runs_without_a_warning in test_responses_compact.py)
pytestmark = [
    pytest.mark.usefixtures("fresh_summary_memory"),
    pytest.mark.filterwarnings("error:Pydantic serializer warnings:UserWarning"),
]

MODEL = "gpt-5"
CM = [{"type": "compaction", "compact_threshold": 1000}]


HISTORY = [
    {"type": "message", "role": "developer", "content": "Be brief."},
    user("the task: fix the build"),
    *[assistant(words(f"a{k}", 300)) if k % 2 == 0 else user(words(f"u{k}", 8)) for k in range(8)],
    user("and now?"),
]


@pytest.fixture(autouse=True)
def answers(upstream):
    upstream.handler = scripted(lambda rec: fake.answer(rec, fake.message("Done.")))


def test_over_the_threshold_the_answer_opens_with_a_compaction_item_standing_for_the_reduced_input(
    proxy_url, upstream, key
):
    r = post(
        proxy_url,
        "/v1/responses",
        body={"model": MODEL, "store": False, "input": HISTORY, "context_management": CM},
        key=key,
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-offload-action"].endswith("emulated-compaction")
    output = r.json()["output"]
    assert [o["type"] for o in output] == ["compaction", "message"]
    assert is_ours(output[0]["encrypted_content"]) and output[0]["id"].startswith("cmp_")
    assert r.json()["usage"]["input_tokens"] >= 300 + 10  # the summary's usage is counted in
    assert len(upstream.summary_requests()) == 1
    forwarded = upstream.responses_requests()[0]
    assert "context_management" not in forwarded.json()  # the upstream knows none
    sent = fake.input_items(forwarded)
    assert sent[:2] == HISTORY[:2] and sent[-1] == HISTORY[-1]  # the system item and the task, the new turn
    summary = sent[2]["content"][0]["text"]
    assert refs_in(summary) and "a0w1" not in json.dumps(sent)  # the old turns are folded
    assert len(sent) < len(HISTORY)

    # next turn: the client drops everything before the compaction item
    second = [*output, user("next question")]
    r2 = post(
        proxy_url,
        "/v1/responses",
        body={"model": MODEL, "store": False, "input": second, "context_management": CM},
        key=key,
    )
    assert r2.status_code == 200, r2.text
    assert "emulated-compaction" not in r2.headers["x-offload-action"]
    assert [o["type"] for o in r2.json()["output"]] == ["message"]
    assert len(upstream.summary_requests()) == 1  # nothing summarised twice
    seen = fake.input_items(upstream.responses_requests()[1])
    # the model sees what was forwarded (less the developer item, which the client sends itself if
    # it wants it: it dropped it here): the task, the summary, the tail verbatim; the answer, the new turn
    assert seen == [*sent[1:], output[1], user("next question")]


@pytest.mark.parametrize("use_sdk_stream", [False, True])
def test_streamed_the_compaction_item_comes_first_with_its_own_events(proxy_url, upstream, key, use_sdk_stream):
    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key=key, max_retries=0, timeout=30)
    if use_sdk_stream:
        with client.responses.stream(model=MODEL, store=False, input=HISTORY, context_management=CM) as stream:
            # warnings=False: the SDK's ParsedResponse of `response.completed` dumps with a serializer
            # warning whatever the answer (openai-python issue 2872), not for anything of the proxy's
            events = [e.model_dump(warnings=False) for e in stream]
            final = stream.get_final_response()
    else:
        events = [
            e.model_dump()
            for e in client.responses.create(
                model=MODEL, store=False, input=HISTORY, context_management=CM, stream=True
            )
        ]
        final = None
    numbers = [e["sequence_number"] for e in events]
    assert numbers == sorted(set(numbers))
    items = [
        (e["type"], e["output_index"], e["item"]["type"])
        for e in events
        if e["type"] in ("response.output_item.added", "response.output_item.done")
    ]
    assert items == [
        ("response.output_item.added", 0, "compaction"),
        ("response.output_item.done", 0, "compaction"),
        ("response.output_item.added", 1, "message"),
        ("response.output_item.done", 1, "message"),
    ]
    completed = events[-1]["response"]
    assert [o["type"] for o in completed["output"]] == ["compaction", "message"]
    assert is_ours(completed["output"][0]["encrypted_content"])
    if final is not None:
        assert final.output[0].type == "compaction" and final.output_text == "Done."


def test_the_openai_sdk_keeps_going_from_the_compaction_item(proxy_url, upstream, key):
    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key=key, max_retries=0, timeout=30)
    first = client.responses.create(model=MODEL, store=False, input=HISTORY, context_management=CM)
    assert first.output[0].type == "compaction" and first.output_text == "Done."
    kept = [item.model_dump(exclude_none=True) for item in first.output]
    second = client.responses.create(model=MODEL, store=False, input=[*kept, user("go on")], context_management=CM)
    assert [o.type for o in second.output] == ["message"]
    assert len(upstream.summary_requests()) == 1
    seen = fake.input_items(upstream.responses_requests()[-1])
    assert refs_in(seen[1]["content"][0]["text"]) and seen[0] == HISTORY[1] and seen[-1] == user("go on")


def test_below_the_threshold_nothing_is_compacted(proxy_url, upstream, key):
    body = {"model": MODEL, "store": False, "input": HISTORY[:3], "context_management": CM}
    r = post(proxy_url, "/v1/responses", body=body, key=key)
    assert r.status_code == 200 and [o["type"] for o in r.json()["output"]] == ["message"]
    assert not upstream.summary_requests() and r.headers["x-offload-action"] == "none"


@pytest.mark.parametrize(
    "entries, param",
    [
        ([{"type": "compaction", "compact_threshold": "2000"}], "context_management[0].compact_threshold"),
        ([{"type": "compaction", "compact_threshold": 2000.0}], "context_management[0].compact_threshold"),
        ([{"type": "compaction", "compact_threshold": True}], "context_management[0].compact_threshold"),
        ([{"type": "compaction", "compact_threshold": [2000]}], "context_management[0].compact_threshold"),
        ([{"type": "compaction", "compact_threshold": -5}], "context_management[0].compact_threshold"),
        ([{"type": "compaction", "compact_threshold": 999}], "context_management[0].compact_threshold"),
        ([{"type": "truncate"}], "context_management[0].type"),
        ([{"type": "compaction"}, {"type": "compaction"}], "context_management[1]"),
        ([{"type": "compaction"}] * 10_000, "context_management"),
        ({"type": "compaction"}, "context_management"),
        (["compaction"], "context_management[0]"),
    ],
)
def test_malformed_context_management_is_a_400(proxy_url, upstream, key, entries, param):
    r = post(
        proxy_url, "/v1/responses", body={"model": MODEL, "input": HISTORY, "context_management": entries}, key=key
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param and r.json()["error"]["type"] == "invalid_request_error"
    assert not upstream.requests


def test_the_largest_threshold_is_never_crossed_and_a_larger_one_refused(proxy_url, upstream, key):
    body = {
        "model": MODEL,
        "store": False,
        "input": HISTORY,
        "context_management": [{"type": "compaction", "compact_threshold": 2**31 - 1}],
    }
    r = post(proxy_url, "/v1/responses", body=body, key=key)
    assert r.status_code == 200 and [o["type"] for o in r.json()["output"]] == ["message"]
    assert not upstream.summary_requests()
    body["context_management"][0]["compact_threshold"] = 10**30
    r = post(proxy_url, "/v1/responses", body=body, key=key)
    assert r.status_code == 400 and r.json()["error"]["param"] == "context_management[0].compact_threshold"


def test_relayed_to_a_native_upstream_the_fields_go_on_byte_for_byte(proxy_url, upstream, key):
    upstream.handler = scripted(lambda rec: fake.native_answer(rec) or fake.answer(rec, fake.message("Hi")))
    raw = json.dumps(
        {"model": MODEL, "store": False, "input": HISTORY, "context_management": CM}, separators=(",", ":")
    ).encode()
    r = httpx2.post(
        f"{proxy_url}/v1/responses",
        content=raw,
        timeout=30,
        headers={
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            "X-Offload-Context-Management": "relay",
            "X-Offload-Mode": "off",
        },
    )
    assert r.status_code == 200 and r.json()["output"][0] == fake.NATIVE_COMPACTION
    assert upstream.responses_requests()[0].body == raw and not upstream.summary_requests()


def test_a_store_that_is_down_makes_no_compaction_and_the_turn_goes_on(make_proxy, upstream, key):
    """A failing store never fails the turn: no compaction item (it could stand for nothing),
    the history goes uncompacted, with a warning."""
    server = RedisProcess().start()
    try:
        with make_proxy(redis_url=server.url, store_timeout=0.3) as url:
            server.proc.kill()
            server.proc.wait()
            r = post(
                url,
                "/v1/responses",
                body={"model": MODEL, "store": False, "input": HISTORY, "context_management": CM},
                key=key,
            )
            assert r.status_code == 200, r.text
            assert [o["type"] for o in r.json()["output"]] == ["message"]
            assert "emulated-compaction" not in r.headers["x-offload-action"]
            assert "store" in r.headers["x-offload-warning"]
            sent = fake.input_items(upstream.responses_requests()[-1])
            assert sent == HISTORY and PREFIX.encode() not in upstream.responses_requests()[-1].body
    finally:
        server.stop()
