"""A newest tool result of any size no longer goes whole (issue 38): over
max_fresh_tool_message_tokens it is compacted on the turn it arrives, through the real server
in chat, Responses and Anthropic Messages; the model's context_reload gets the original back,
and a later turn forwards the same preview."""

from __future__ import annotations

import json

import anthropic
from starlette.responses import JSONResponse

from proxy.core.texts import is_marker, refs_in
from proxy.core.tokens import counter_for_model
from tests.harness import anthropic as claude
from tests.harness import responses as fake
from tests.harness.history import agent_history, big_text_over, refs_sent
from tests.harness.servers import completion, scripted, tool_call

WHOLE = {"X-Offload-Max-Reload-Tokens": "1000000"}  # the reload gives the whole original at once


def huge(model: str) -> str:
    """Just over the default cap of 25,000 tokens, as the proxy counts for `model`."""
    return big_text_over(25_000, counter_for_model(model), "runaway")


def test_chat_a_huge_newest_result_goes_as_a_preview_and_reloads_whole(client, upstream):
    text = huge("gpt-4o")
    history = agent_history(steps=2, lines=40)
    history[-1] = {**history[-1], "content": text}  # the newest message: a runaway result

    def first(rec):
        return JSONResponse(
            completion(
                "Let me see it.",
                tool_calls=[tool_call("context_reload", {"ref": refs_sent(rec)[0]}, id="call_reload_1")],
            )
        )

    upstream.handler = scripted(first, lambda rec: JSONResponse(completion("Seen.")))
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history, extra_headers=WHOLE)
    assert raw.parse().choices[0].message.content == "Seen." and raw.headers["x-offload-action"] == "compact"
    one, two = upstream.chat_requests()
    sent = one.json()["messages"]
    assert sent[:-1] == history[:-1]  # only the newest result changed
    preview = sent[-1]["content"]
    assert is_marker(preview) and len(preview) < 1000 and sent[-1]["tool_call_id"] == history[-1]["tool_call_id"]
    reloaded = two.json()["messages"][-1]
    assert reloaded["tool_call_id"] == "call_reload_1" and reloaded["content"] == text

    upstream.reset()
    upstream.handler = scripted(lambda rec: JSONResponse(completion("ok")))
    later = [*history, {"role": "assistant", "content": "Seen."}, {"role": "user", "content": "Go on."}]
    client.chat.completions.create(model="gpt-4o", messages=later, extra_headers=WHOLE)
    assert upstream.chat_requests()[-1].json()["messages"][len(history) - 1]["content"] == preview  # the same bytes


def test_responses_a_huge_newest_output_goes_as_a_preview_and_reloads_whole(client, upstream):
    text = huge("gpt-5")
    items = [
        {"role": "user", "content": "Read the log."},
        fake.function_call("shell", {"cmd": "cat build.log"}, call_id="call_log", id="fc_log"),
        fake.function_call_output("call_log", text),
    ]

    def first(rec):
        return fake.answer(
            rec,
            fake.function_call(
                "context_reload", {"ref": fake.refs_in_input(rec)[0]}, call_id="call_reload", id="fc_reload"
            ),
        )

    upstream.handler = scripted(first, fake.answering(fake.message("Seen.")))
    got = client.responses.create(model="gpt-5", input=items, extra_headers=WHOLE)
    assert got.output_text == "Seen."
    one, two = upstream.responses_requests()
    sent = fake.input_items(one)
    assert sent[:-1] == items[:-1]
    assert sent[-1]["call_id"] == "call_log" and is_marker(sent[-1]["output"]) and len(sent[-1]["output"]) < 1000
    added = fake.input_items(two)[len(sent) :]
    assert [i.get("type") for i in added] == ["function_call", "function_call_output"]
    assert added[-1]["call_id"] == "call_reload" and added[-1]["output"] == text


def test_messages_a_huge_newest_result_goes_as_a_preview_and_reloads_whole(proxy_url, upstream):
    model = "claude-sonnet-4-5"
    text = huge(model)
    messages = [
        {"role": "user", "content": "Read the log."},
        {"role": "assistant", "content": [claude.tool_use("Bash", {"command": "cat build.log"}, id="toolu_log")]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_log", "content": text}]},
    ]

    def first(rec):
        [block] = rec.json()["messages"][-1]["content"]
        assert block["tool_use_id"] == "toolu_log" and is_marker(block["content"]) and len(block["content"]) < 1000
        [ref] = refs_in(block["content"])
        return claude.answer(rec, claude.message(claude.tool_use("context_reload", {"ref": ref}, id="toolu_reload")))

    upstream.handler = scripted(first, lambda rec: claude.answer(rec, claude.message(claude.text("Seen."))))
    got = anthropic.Anthropic(base_url=proxy_url, api_key="sk-ant-test", max_retries=0, timeout=30).messages.create(
        model=model,
        max_tokens=256,
        messages=messages,
        extra_headers=WHOLE,
        tools=[{"name": "Bash", "description": "Run a command.", "input_schema": {"type": "object"}}],
    )
    assert got.content[0].text == "Seen."
    one, two = upstream.messages_requests()
    assert one.json()["messages"][:-1] == messages[:-1]
    [result] = two.json()["messages"][-1]["content"]
    reloaded = result["content"] if isinstance(result["content"], str) else result["content"][0]["text"]
    assert result["tool_use_id"] == "toolu_reload" and reloaded == text
    assert len(json.dumps(one.json())) < len(text) / 10
