"""Folding through the real server (chat with the openai SDK, Anthropic Messages with the anthropic
SDK): a re-run goes upstream as a pointer with its diff, the model's reload gets the original
byte for byte, later turns forward the same bytes, and X-Offload-Fold turns it off."""

from __future__ import annotations

import json

import anthropic
import httpx2
from starlette.responses import JSONResponse

from proxy.core.texts import fold_ref
from tests.harness.anthropic import answer, message, text, tool_use
from tests.harness.servers import completion, scripted, tool_call
from tests.unit.core.fold_fixtures import CLAUDE_READ, MSA_FIRST, MSA_RERUN, history

QUIET = {"X-Offload-Reload-Tools": "off"}


def test_chat_rerun_goes_as_a_diff_and_reloads_byte_for_byte(client, upstream):
    items = history("chat", [MSA_FIRST, MSA_RERUN])

    def first(rec):
        folded = rec.json()["messages"][-1]["content"]
        return JSONResponse(
            completion(
                "Let me see.", tool_calls=[tool_call("context_reload", {"ref": fold_ref(folded)}, id="call_reload_1")]
            )
        )

    def second(rec):
        return JSONResponse(completion("Done."))

    upstream.handler = scripted(first, second)
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=items)
    assert raw.parse().choices[0].message.content == "Done."
    one, two = upstream.chat_requests()
    sent = one.json()["messages"]
    assert sent[:-1] == items[:-1]  # the base and everything before the re-run: as the client sent them
    folded = sent[-1]["content"]
    assert fold_ref(folded) and "call_0 above" in folded and "-tests/test_rounding.py::test_case_3 FAILED" in folded
    assert len(folded) < len(MSA_RERUN) / 2
    assert raw.headers["x-offload-refs"] == "1" and raw.headers["x-offload-refs-created"] == "1"
    reloaded = two.json()["messages"][-1]
    assert reloaded["tool_call_id"] == "call_reload_1" and reloaded["content"] == MSA_RERUN


def test_chat_later_turns_forward_the_same_bytes(client, upstream):
    upstream.handler = scripted(lambda rec: JSONResponse(completion("ok")))
    steps = [MSA_FIRST, MSA_FIRST, "total 1\nok", MSA_RERUN, "total 2\nok", "total 3\nok"]
    for n in range(2, len(steps) + 1):
        client.chat.completions.create(
            model="gpt-4o",
            messages=history("chat", steps[:n], filler=0),
            extra_headers={**QUIET, "X-Offload-Tenant": "fold-turns"},
        )
    sent = [[json.dumps(m, sort_keys=True) for m in rec.json()["messages"]] for rec in upstream.chat_requests()]
    for before, after in zip(sent, sent[1:]):
        assert after[: len(before)] == before  # nothing a turn forwarded is rewritten by the next
    assert fold_ref(json.loads(sent[-1][5])["content"]) and fold_ref(json.loads(sent[-1][9])["content"])


def test_fold_off_by_header_and_a_bad_value_is_a_400(client, upstream, proxy_url):
    upstream.handler = scripted(lambda rec: JSONResponse(completion("ok")))
    items = history("chat", [MSA_FIRST, MSA_FIRST])
    client.chat.completions.create(model="gpt-4o", messages=items, extra_headers={**QUIET, "X-Offload-Fold": "off"})
    assert upstream.chat_requests()[-1].json()["messages"] == items
    for value in ("maybe", "2", "x" * 300):
        r = httpx2.post(
            f"{proxy_url}/chat/completions",
            json={"model": "gpt-4o", "messages": items},
            headers={"authorization": "Bearer sk-test", "X-Offload-Fold": value},
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "X-Offload-Fold", r.text


def test_anthropic_read_again_is_a_pointer_and_reloads_byte_for_byte(proxy_url, upstream):
    items = history("claude", [CLAUDE_READ, CLAUDE_READ], tool="Read")  # one result per message: the messages

    def first(rec):
        [block] = rec.json()["messages"][-1]["content"]
        assert block["type"] == "tool_result" and fold_ref(block["content"])
        assert "identical to the result of call toolu_00 above" in block["content"]
        return answer(
            rec, message(tool_use("context_reload", {"ref": fold_ref(block["content"])}, id="toolu_reload_1"))
        )

    upstream.handler = scripted(first, lambda rec: answer(rec, message(text("Read it."))))
    got = anthropic.Anthropic(base_url=proxy_url, api_key="sk-ant-test", max_retries=0, timeout=20).messages.create(
        model="claude-sonnet-4-5",
        max_tokens=256,
        messages=items,
        tools=[{"name": "Read", "description": "Read a file.", "input_schema": {"type": "object"}}],
    )
    assert got.content[0].text == "Read it."
    one, two = upstream.messages_requests()
    assert one.json()["messages"][:-1] == items[:-1]
    [result] = two.json()["messages"][-1]["content"]
    reloaded = result["content"] if isinstance(result["content"], str) else result["content"][0]["text"]
    assert result["tool_use_id"] == "toolu_reload_1" and reloaded == CLAUDE_READ
