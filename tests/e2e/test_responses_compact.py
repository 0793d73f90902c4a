"""`POST /v1/responses/compact` through the proxy (issue 22, part 2): emulated for an upstream
that does not compact (the fake on loopback: `auto` emulates), with the real openai SDK; the
compacted output carried into later `responses.create` turns (streamed and not), where the
fake model reloads what the summary stands for byte for byte; relayed byte for byte to a
native upstream (`X-Offload-Context-Management: relay`)."""

from __future__ import annotations

import json
import re
import time
import warnings
from pathlib import Path

import httpx2
import openai
import pytest
from starlette.responses import Response

from proxy.core.compaction import PREFIX
from proxy.core.texts import refs_in
from tests.harness import responses as fake
from tests.harness.responses import assistant_message as assistant
from tests.harness.responses import user_message as user
from tests.harness.servers import SNAPSHOT, RedisProcess, failing_summaries, scripted

# the SDK's Pydantic serializer warnings are errors here: the README's example printed one
pytestmark = [
    pytest.mark.usefixtures("fresh_summary_memory"),
    pytest.mark.filterwarnings("error:Pydantic serializer warnings:UserWarning"),
]

MODEL = "gpt-5"
RELOAD = {"X-Offload-Max-Reload-Tokens": "100000"}


BIG_OUTPUT = "\n".join(f"line {i}: build step {i} finished with status ok in {i % 13} ms" for i in range(400))
TASK = user("Task: fix the build, then deploy.")
HISTORY = [
    TASK,
    {"type": "function_call", "call_id": "call_build", "name": "build", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "call_build", "output": BIG_OUTPUT},
    assistant("The build passes now."),
    user("Good. Now deploy to staging."),
    {"type": "function_call", "call_id": "call_deploy", "name": "deploy", "arguments": '{"env":"staging"}'},
    {"type": "function_call_output", "call_id": "call_deploy", "output": "deployed ✓ to staging"},
    assistant("Deployed to staging."),
]


def history_lines(items: list[dict]) -> str:
    return "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in items)


def sdk(proxy_url: str, key: str, **headers) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{proxy_url}/v1", api_key=key, max_retries=0, timeout=30, default_headers={**RELOAD, **headers}
    )


def dumped(compacted) -> dict:
    out = compacted.model_dump(exclude_unset=True, warnings=False)
    out.pop("created_at")
    return out


@pytest.fixture(autouse=True)
def model(upstream):
    """The fake model: reloads the ref of a summary it is shown once, then answers."""
    upstream.handler = scripted(fake.reloading_model("Hello there"))


def test_the_sdk_compacts_and_the_answer_is_openais_shape(proxy_url, upstream, key):
    client = sdk(proxy_url, key)
    raw = client.responses.with_raw_response.compact(model=MODEL, input=HISTORY, instructions="Be brief.")
    compacted = raw.parse()
    assert raw.headers["x-offload-action"] == "emulated-compaction"
    assert compacted.object == "response.compaction" and compacted.id.startswith("resp_")
    assert isinstance(compacted.created_at, int)
    *users, item = compacted.output
    assert item.type == "compaction" and item.encrypted_content.startswith(PREFIX) and item.id.startswith("cmp_")
    assert [u.model_dump(exclude_unset=True, warnings=False) for u in users] == [
        TASK,
        HISTORY[4],
    ]  # the user messages, in order
    assert (compacted.usage.input_tokens, compacted.usage.output_tokens, compacted.usage.total_tokens) == (300, 40, 340)
    [summary_call] = upstream.summary_requests()
    assert summary_call.json()["instructions"] == "Be brief." and summary_call.json()["model"] == MODEL
    assert not upstream.responses_requests()  # nothing else went upstream
    # the same input: the same answer (the summary reused, nothing new billed)
    again = client.responses.compact(model=MODEL, input=HISTORY, instructions="Be brief.")
    first, second = dumped(compacted), dumped(again)
    assert first.pop("usage")["total_tokens"] == 340 and second.pop("usage")["total_tokens"] == 0
    assert first == second and len(upstream.summary_requests()) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_a_later_turn_gets_the_summary_and_reloads_the_originals_byte_exact(proxy_url, upstream, key, stream):
    client = sdk(proxy_url, key)
    compacted = client.responses.compact(model=MODEL, input=HISTORY)
    token = compacted.output[-1].encrypted_content
    kept = [o.model_dump(exclude_unset=True, warnings=False) for o in compacted.output]
    follow = [*kept, user("reload please")]
    final = fake.final_response(client, stream=stream, model=MODEL, store=False, input=follow)
    assert final.output_text == "reloaded"
    first, second = upstream.responses_requests()
    assert token.encode() not in first.body and b'"type":"compaction"' not in first.body.replace(b" ", b"")
    sent = fake.input_items(first)
    assert sent[0] == TASK and sent[-1] == user("reload please")
    summary = sent[1]["content"][0]["text"]
    assert SNAPSHOT in summary and refs_in(summary)
    assert HISTORY[4] in sent[2:] and BIG_OUTPUT not in first.body.decode()
    reload_output = fake.input_items(second)[-1]
    assert reload_output["call_id"] == "call_reload"
    assert reload_output["output"] == history_lines(HISTORY[1:])  # every summarised byte, in order
    [ref] = refs_in(summary)
    stored = httpx2.get(f"{proxy_url}/v1/offload/{ref}", headers={"Authorization": f"Bearer {key}"}).json()
    assert stored["content"] == history_lines(HISTORY[1:])


def test_a_compaction_of_a_compacted_history_folds_the_summary(proxy_url, upstream, key):
    client = sdk(proxy_url, key)
    first = client.responses.compact(model=MODEL, input=HISTORY)
    later = [
        *[o.model_dump(exclude_unset=True, warnings=False) for o in first.output],
        user("Now production."),
        assistant("Deployed to production."),
    ]
    second = client.responses.compact(model=MODEL, input=later)
    *users, item = second.output
    assert item.encrypted_content != first.output[-1].encrypted_content
    assert [u.model_dump(exclude_unset=True, warnings=False) for u in users] == [
        TASK,
        HISTORY[4],
        user("Now production."),
    ]
    summary_call = upstream.summary_requests()[-1]
    assert first.output[-1].encrypted_content.encode() not in summary_call.body  # the record, not the token
    assert SNAPSHOT.encode() in summary_call.body


def test_nothing_to_fold_still_answers_a_compaction_standing_for_the_input(proxy_url, upstream, key):
    client = sdk(proxy_url, key)
    compacted = client.responses.compact(model=MODEL, input="just the task")
    *users, item = compacted.output
    assert [u.model_dump(exclude_unset=True, warnings=False) for u in users] == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "just the task"}]}
    ]
    assert compacted.usage.total_tokens == 0 and not upstream.summary_requests()
    client.responses.create(
        model=MODEL, store=False, input=[item.model_dump(exclude_unset=True, warnings=False), user("next")]
    )
    assert fake.input_items(upstream.responses_requests()[-1]) == [
        {"role": "user", "content": "just the task"},
        user("next"),
    ]


def test_a_failing_summary_fails_the_compaction(proxy_url, upstream, key):
    upstream.handler = failing_summaries
    r = httpx2.post(
        f"{proxy_url}/v1/responses/compact",
        json={"model": MODEL, "input": HISTORY},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert r.status_code == 502, r.text
    assert r.json()["error"]["code"] == "compaction_failed" and r.json()["error"]["type"] == "server_error"
    assert not upstream.responses_requests()


def test_relayed_byte_for_byte_to_a_native_upstream(proxy_url, upstream, key):
    native = {
        "id": "resp_native",
        "object": "response.compaction",
        "created_at": 1_700_000_000,
        "output": [TASK, fake.NATIVE_COMPACTION],
        "usage": fake.usage(1000, 100),
    }
    answer = json.dumps(native, separators=(",", ":")).encode()

    async def handler(request, rec):
        return Response(answer, media_type="application/json")

    upstream.handler = handler
    body = json.dumps({"model": MODEL, "input": HISTORY, "previous_response_id": None}).encode()
    r = httpx2.post(
        f"{proxy_url}/v1/responses/compact",
        content=body,
        timeout=30,
        headers={
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            "X-Offload-Context-Management": "relay",
        },
    )
    assert r.status_code == 200 and r.content == answer
    [rec] = upstream.requests
    assert rec.path == "/v1/responses/compact" and rec.body == body
    assert "x-offload-action" not in r.headers
    client = sdk(proxy_url, key, **{"X-Offload-Context-Management": "relay"})
    assert (
        client.responses.compact(model=MODEL, input=HISTORY).output[-1].encrypted_content
        == fake.NATIVE_COMPACTION["encrypted_content"]
    )


def test_a_store_that_is_down_fails_the_compaction_with_a_503(make_proxy, upstream, key):
    server = RedisProcess().start()
    try:
        with make_proxy(redis_url=server.url, store_timeout=2.0) as url:  # no timeout for a healthy Redis
            assert sdk(url, key).responses.compact(model=MODEL, input=HISTORY).output[-1].type == "compaction"
            server.proc.kill()
            server.proc.wait()
            r = httpx2.post(
                f"{url}/v1/responses/compact",
                json={"model": MODEL, "input": [*HISTORY, user("more")]},
                headers={"Authorization": f"Bearer {key}"},
                timeout=30,
            )
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "store_unavailable" and "try again" in r.json()["error"]["message"]
    finally:
        server.stop()


def test_the_compaction_is_recorded_as_a_managed_request(make_proxy, upstream, key):
    with make_proxy(admin_token="admin-secret-token-0123456789") as url:
        sdk(url, key).responses.compact(model=MODEL, input=HISTORY)
        admin = {"Authorization": "Bearer admin-secret-token-0123456789"}
        metrics = httpx2.get(f"{url}/metrics", headers=admin).text
        deadline = time.monotonic() + 10  # the recorder flushes about once a second
        while (
            totals := httpx2.get(f"{url}/v1/offload/stats", params={"window": "1h"}, headers=admin, timeout=10).json()[
                "totals"
            ]
        )["requests"] < 1:
            assert time.monotonic() < deadline, totals
            time.sleep(0.2)
    assert 'route="responses_compact"' in metrics
    # the dashboard's count: emulated apart from the offload action
    assert totals["emulated"] == {"compactions": 1, "context_edits": 0}, totals


def readme_compaction_example() -> str:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    [block] = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "responses.compact(" in b]
    return block


def test_the_readmes_compaction_example_runs_without_a_warning(proxy_url, upstream, key):
    """The README's example as written. The SDK types a compaction's kept user messages
    (`input_text`, as OpenAI answers them) as its assistant output messages: passing those objects
    back into `responses.create` made Pydantic print a serializer warning; the example passes dicts."""
    client = sdk(proxy_url, key)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run = {"client": client, "history": HISTORY}
        exec(readme_compaction_example(), run)
    assert run["compacted"].output[-1].type == "compaction" and run["reply"].output
    sent = fake.input_items(upstream.responses_requests()[-1])
    assert sent[0] == TASK and sent[-1] == {"role": "user", "content": "next"}
    assert SNAPSHOT in sent[1]["content"][0]["text"]  # the summary in the compaction item's place
    with pytest.warns(UserWarning, match="Pydantic serializer warnings"):  # the objects themselves: the warning
        client.responses.create(model=MODEL, input=[*run["compacted"].output, user("next")])


DEVELOPER = {"type": "message", "role": "developer", "content": "Always answer in French."}


@pytest.mark.parametrize("where", ["before", "after", "not re-sent"])
def test_a_developer_item_reaches_the_upstream_once_after_a_compaction(proxy_url, upstream, key, where):
    """OpenAI's compact output is the user messages and the compaction item; clients re-send their
    instructions with it (agents before it, Codex after it, before the next turn) or not at all:
    each way, the developer item the compaction saw goes upstream once."""
    client = sdk(proxy_url, key)
    compacted = client.responses.compact(model=MODEL, input=[DEVELOPER, *HISTORY])
    kept = [o.model_dump(exclude_unset=True, warnings=False) for o in compacted.output]
    follow = {"before": [DEVELOPER, *kept], "after": [*kept, DEVELOPER], "not re-sent": kept}[where]
    client.responses.create(model=MODEL, store=False, input=[*follow, user("next")])
    sent = upstream.responses_requests()[-1].body.decode()
    assert sent.count("Always answer in French.") == 1, sent[:2000]


def test_a_developer_item_reaches_the_upstream_once_after_a_threshold_compaction(proxy_url, upstream, key):
    client = sdk(proxy_url, key)
    big = [DEVELOPER, *HISTORY, user("Summarise the build " + " ".join(f"w{i}" for i in range(600)))]
    first = client.responses.create(
        model=MODEL, store=False, input=big, context_management=[{"type": "compaction", "compact_threshold": 1000}]
    )
    item = first.output[0].model_dump(exclude_unset=True, warnings=False)
    assert item["type"] == "compaction"
    client.responses.create(model=MODEL, store=False, input=[DEVELOPER, item, user("next")])
    sent = upstream.responses_requests()[-1].body.decode()
    assert sent.count("Always answer in French.") == 1 and PREFIX not in sent, sent[:2000]
