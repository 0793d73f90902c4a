"""OpenAI's own context management through the proxy's `POST /v1/responses` (issue 22, part 1):
a provider `compaction` item is relayed byte for byte and in place, never summarised or
compacted, and what precedes it is neither counted nor summarised; with `context_management`
the proxy never compresses and the provider's `compaction` output reaches the client unchanged
(streamed or not, with the reload loop or not); a `compaction_trigger` stays the last item."""

from __future__ import annotations

import json

import openai
import pytest

from proxy.core.texts import refs_in
from tests.harness import responses as fake
from tests.harness.requests import post
from tests.harness.responses import assistant_message as assistant
from tests.harness.responses import user_message as user
from tests.harness.responses import words
from tests.harness.servers import is_summary_call, scripted

# the SDK's Pydantic serializer warnings are errors here: one came from the README's example (see
# test_the_readmes_compaction_example_runs_without_a_warning in test_responses_compact.py)
pytestmark = [
    pytest.mark.usefixtures("fresh_summary_memory"),
    pytest.mark.filterwarnings("error:Pydantic serializer warnings:UserWarning"),
]

MODEL = "gpt-5"
# the summary made inline when needed: the turn's forwarded input is the one to check
INLINE = {
    "X-Offload-Max-Total-Tokens": "1500",
    "X-Offload-Hard-Max-Tokens": "1",
    "X-Offload-Precompress-Ratio": "0",
    "X-Offload-Max-Tool-Message-Tokens": "300",
}
CLIENT_COMPACTION = fake.compaction("gAAAAABclient+state/" + "Zm9vYmFy" * 30 + "==", id="cmp_client_1")
# the fake upstream plays OpenAI's own API, which applies context management itself
RELAY = {"X-Offload-Context-Management": "relay"}
CONTEXT_MANAGEMENT = [{"type": "compaction", "compact_threshold": 1000}]


OLD = [user(words(f"old{k}", 300)) if k % 2 == 0 else assistant(words(f"old{k}", 300)) for k in range(6)]
NEW = [user(words(f"new{k}", 250)) if k % 2 == 0 else assistant(words(f"new{k}", 250)) for k in range(8)]
BIG_OUTPUT = "\n".join(f"line {i}: build step {i} finished with status ok in {i % 13} ms" for i in range(400))
TOOL_TURN = [
    {"type": "function_call", "call_id": "call_build", "name": "build", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "call_build", "output": BIG_OUTPUT},
]


def compact_json(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


@pytest.fixture(autouse=True)
def native(upstream):
    """A "native" upstream: OpenAI's answers to its own context management; summaries answered."""
    upstream.handler = scripted(lambda rec: fake.native_answer(rec) or fake.answer(rec, fake.message("Hello there")))


def test_a_compaction_item_is_never_summarised_and_the_summary_comes_after_it(proxy_url, upstream, key):
    items = [*OLD, CLIENT_COMPACTION, *NEW]
    r = post(
        proxy_url,
        "/v1/responses",
        body=compact_json({"model": MODEL, "store": False, "input": items}),
        key=key,
        headers={**RELAY, **INLINE, "X-Offload-Mode": "compress"},
    )
    assert r.status_code == 200, r.text
    assert r.headers["x-offload-action"] == "compress"
    forwarded = upstream.responses_requests()[-1]
    sent = fake.input_items(forwarded)
    assert sent[: len(OLD) + 1] == [*OLD, CLIENT_COMPACTION]  # verbatim, in place
    assert compact_json(CLIENT_COMPACTION) in forwarded.body  # byte for byte
    summary = sent[len(OLD) + 1]["content"][0]["text"]
    assert refs_in(summary) and f"{len(NEW) - 2} earlier messages" in summary  # only what follows the item
    rest = sent[len(OLD) + 2 :]  # the user messages summarised past are kept verbatim (up to a budget), then the tail
    assert rest[-2:] == NEW[-2:] and all(item in NEW for item in rest)
    assert not any("old" in json.dumps(i) for i in sent[len(OLD) + 1 :])  # nothing before it was folded


def test_what_precedes_a_compaction_item_does_not_count_towards_the_trigger(proxy_url, upstream, key):
    items = [*OLD, *OLD, CLIENT_COMPACTION, *NEW[:3]]  # 3600 words before the item, 750 after
    r = post(
        proxy_url,
        "/v1/responses",
        body=compact_json({"model": MODEL, "store": False, "input": items}),
        key=key,
        headers={**RELAY, **INLINE, "X-Offload-Mode": "auto"},
    )
    assert r.status_code == 200 and r.headers["x-offload-action"] == "none"
    assert upstream.responses_requests()[-1].body == compact_json({"model": MODEL, "store": False, "input": items})
    assert not upstream.summary_requests()


@pytest.mark.parametrize("mode", ["compress", "auto", "compact"])
@pytest.mark.parametrize("stream", [False, True])
def test_with_context_management_the_proxy_never_compresses_and_the_output_is_relayed(
    proxy_url, upstream, key, mode, stream
):
    items = [user("start"), *NEW, *TOOL_TURN, user("and now?")]
    body = {"model": MODEL, "store": False, "context_management": CONTEXT_MANAGEMENT, "input": items, "stream": stream}
    r = post(
        proxy_url,
        "/v1/responses",
        body=compact_json(body),
        key=key,
        headers={**RELAY, **INLINE, "X-Offload-Mode": mode},
    )
    assert r.status_code == 200, r.text
    assert "compress" not in r.headers["x-offload-action"]
    assert not upstream.summary_requests()
    forwarded = upstream.responses_requests()[0]
    assert b'"context_management":' + compact_json(CONTEXT_MANAGEMENT) in forwarded.body
    if mode == "compress":  # nothing else to do: the body goes up as sent
        assert forwarded.body == compact_json(body)
    else:  # the proxy still compacts the large tool output (reloadable), nothing else
        assert r.headers["x-offload-action"] == "compact"
        assert fake.input_items(forwarded)[: len(NEW) + 2] == [user("start"), *NEW, TOOL_TURN[0]]
        assert refs_in(fake.input_items(forwarded)[len(NEW) + 2]["output"])
    if stream:
        events = fake.parse_sse(r.content)
        added = [e for e in events if e["type"] == "response.output_item.added"]
        done = [e for e in events if e["type"] == "response.output_item.done"]
        assert added[0]["output_index"] == 0 and added[0]["item"] == fake.NATIVE_COMPACTION
        assert done[0]["output_index"] == 0 and done[0]["item"] == fake.NATIVE_COMPACTION
        output = events[-1]["response"]["output"]
    else:
        output = r.json()["output"]
    assert output[0] == fake.NATIVE_COMPACTION  # unchanged, first
    assert output[1]["type"] == "message"


def test_a_compaction_trigger_stays_last_and_no_reload_round_follows(proxy_url, upstream, key):
    items = [user("start"), *TOOL_TURN, *NEW, {"type": "compaction_trigger"}]
    r = post(
        proxy_url,
        "/v1/responses",
        body=compact_json({"model": MODEL, "store": False, "input": items}),
        key=key,
        headers={**RELAY, **INLINE, "X-Offload-Mode": "auto", "X-Offload-Keep-Recent": "0"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["output"] == [fake.NATIVE_COMPACTION]
    forwarded = upstream.responses_requests()
    assert len(forwarded) == 1 and not upstream.summary_requests()  # the provider compacts: no summary
    sent = fake.input_items(forwarded[0])
    assert sent[-1] == {"type": "compaction_trigger"}
    assert refs_in(sent[2]["output"])  # compacted all the same...
    assert "context_reload" not in fake.tool_names(forwarded[0])  # ...but no tool is appended after the trigger


def test_the_openai_sdk_round_trips_a_compaction_through_the_proxy(proxy_url, upstream, key):
    client = openai.OpenAI(
        base_url=f"{proxy_url}/v1",
        api_key=key,
        max_retries=0,
        timeout=30,
        default_headers={**INLINE, **RELAY, "X-Offload-Mode": "auto"},
    )
    items = [user("start"), *TOOL_TURN, *NEW]
    first = client.responses.create(model=MODEL, store=False, input=items, context_management=CONTEXT_MANAGEMENT)
    assert first.output[0].type == "compaction"
    assert first.output[0].encrypted_content == fake.NATIVE_COMPACTION["encrypted_content"]
    assert first.output[1].type == "message"
    # a stateless client keeps what follows the newest compaction item, and the item itself
    kept = [item.model_dump(exclude_none=True) for item in first.output]
    second_input = [*kept, user(words("next", 400)), assistant(words("reply", 400)), user("go on")]
    with client.responses.stream(
        model=MODEL, store=False, input=second_input, context_management=CONTEXT_MANAGEMENT
    ) as stream:
        final = stream.get_final_response()
    assert final.output[0].type == "compaction" and final.output[0].id == fake.NATIVE_COMPACTION["id"]
    sent = fake.input_items(upstream.responses_requests()[-1])
    assert sent[0] == fake.NATIVE_COMPACTION and sent[1:] == second_input[1:]
    assert not [r for r in upstream.requests if is_summary_call(r)]
