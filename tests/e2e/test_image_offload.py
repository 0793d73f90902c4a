"""Screenshots offloaded by content hash and reloaded as images, with real SDK clients unchanged.

Each client sends a computer-use-like session of real 1280×800 PNG screenshots, as many as the
defaults need to offload one chunk (the 3 most recent stay, older ones leave `image_batch` at a
time): the oldest chunk leaves the forwarded payload (a marker with a ref in their place), the
fake model asks
`context_reload` of the oldest, and gets the image itself back, byte for byte (chat: a short text
in the tool message and the image in a user message after it; Anthropic: an image block in the
tool_result; Responses: an input_image output). The client gets one ordinary answer.
"""

from __future__ import annotations

import json

import anthropic
import openai
import pytest
from starlette.responses import JSONResponse, StreamingResponse

from proxy.core import texts
from proxy.core.settings import OffloadSettings
from tests.harness import anthropic as fake_anthropic
from tests.harness import responses as fake_responses
from tests.harness.screens import b64, data_url, screenshot
from tests.harness.servers import completion, scripted, stream_chunks

KEEP, BATCH = OffloadSettings().keep_images, OffloadSettings().image_batch
SHOTS = [screenshot(step) for step in range(KEEP + BATCH)]  # one whole chunk older than the most recent
URLS = [data_url(s) for s in SHOTS]
ANSWER = "The button is at the top left."


def _markers(payload: str) -> list[str]:
    return [m.group(0) for m in texts.MEDIA_MARKER_RE.finditer(payload)]


def _offloaded_upstream(body: bytes) -> list[str]:
    """The refs of the markers a forwarded body carries; the oldest chunk of screenshots is gone."""
    text = body.decode()
    for shot in SHOTS[:BATCH]:
        assert b64(shot) not in text
    for shot in SHOTS[BATCH:]:
        assert b64(shot) in text
    markers = _markers(text)
    assert len(markers) == BATCH and all(m.startswith("[image offloaded: png 1280×800, ~") for m in markers)
    return [texts.media_ref(m) for m in markers]


# ---------------------------------------------------------------- chat completions, openai SDK


def _chat_messages() -> list[dict]:
    messages: list[dict] = [{"role": "system", "content": "You operate a browser."}]
    for step, url in enumerate(URLS):
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": f"Screen after step {step}."},
                    {"type": "image_url", "image_url": {"url": url}},
                ],
            }
        )
        messages.append({"role": "assistant", "content": f"click({step * 10}, 20)"})
    messages.append({"role": "user", "content": "Where was the button on the first screen?"})
    return messages


@pytest.mark.parametrize("stream", [False, True])
def test_chat_image_parts_offloaded_and_reloaded(make_proxy, upstream, stream):
    refs: list[str] = []

    def first(rec):
        refs.extend(_offloaded_upstream(rec.body))
        call = {
            "id": "proxy_1",
            "type": "function",
            "function": {"name": "context_reload", "arguments": json.dumps({"ref": refs[0]})},
        }
        if stream:
            return StreamingResponse(iter(stream_chunks(None, tool_calls=[call])), media_type="text/event-stream")
        return JSONResponse(completion(None, tool_calls=[call]))

    def second(rec):
        if stream:
            return StreamingResponse(iter(stream_chunks(ANSWER, id="chatcmpl-2")), media_type="text/event-stream")
        return JSONResponse(completion(ANSWER))

    upstream.handler = scripted(first, second)
    with make_proxy() as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test-key", max_retries=0, timeout=30)
        if stream:
            chunks = list(client.chat.completions.create(model="gpt-4o", messages=_chat_messages(), stream=True))
            content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            assert not any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
        else:
            reply = client.chat.completions.create(model="gpt-4o", messages=_chat_messages())
            content = reply.choices[0].message.content
            assert reply.choices[0].message.tool_calls is None and reply.choices[0].finish_reason == "stop"
    assert content.strip() == ANSWER  # the fake stream splits it in words
    _, reload_round = upstream.chat_requests()
    sent = reload_round.json()["messages"]
    tool, shown = sent[-2], sent[-1]
    assert tool["role"] == "tool" and tool["content"] == texts.media_follows("image", refs[0])
    assert shown["role"] == "user" and shown["content"][1] == {"type": "image_url", "image_url": {"url": URLS[0]}}


# ---------------------------------------------------------------- Anthropic Messages, anthropic SDK


def _computer_messages() -> list[dict]:
    messages: list[dict] = [{"role": "user", "content": "Open the settings page."}]
    for step, shot in enumerate(SHOTS):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Step {step}."},
                    {
                        "type": "tool_use",
                        "id": f"toolu_{step}",
                        "name": "computer",
                        "input": {"action": "left_click", "coordinate": [step * 10, 20]},
                    },
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"toolu_{step}",
                        "content": [
                            {
                                "type": "image",
                                "source": {"type": "base64", "media_type": "image/png", "data": b64(shot)},
                            }
                        ],
                    }
                ],
            }
        )
    messages[-1]["content"].append({"type": "text", "text": "What did the first screen show?"})
    return messages


COMPUTER_TOOL = {
    "name": "computer",
    "description": "Use the computer.",
    "input_schema": {"type": "object", "properties": {"action": {"type": "string"}}},
}


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_tool_result_images_offloaded_and_reloaded(make_proxy, upstream, stream):
    refs: list[str] = []

    def first(rec):
        refs.extend(_offloaded_upstream(rec.body))
        return fake_anthropic.answer(
            rec, fake_anthropic.message(fake_anthropic.tool_use("context_reload", {"ref": refs[0]}, id="toolu_reload"))
        )

    def second(rec):
        return fake_anthropic.answer(rec, fake_anthropic.message(fake_anthropic.text(ANSWER)))

    upstream.handler = scripted(first, second)
    with make_proxy() as url:
        client = anthropic.Anthropic(base_url=url, api_key="sk-ant-test", max_retries=0, timeout=30)
        kwargs = dict(model="claude-sonnet-4-5", max_tokens=512, messages=_computer_messages(), tools=[COMPUTER_TOOL])
        if stream:
            with client.messages.stream(**kwargs) as events:
                reply = events.get_final_message()
        else:
            reply = client.messages.create(**kwargs)
    assert [b.type for b in reply.content] == ["text"] and reply.content[0].text == ANSWER
    assert reply.stop_reason == "end_turn"
    _, reload_round = upstream.messages_requests()
    result = reload_round.json()["messages"][-1]["content"][0]
    assert result["tool_use_id"] == "toolu_reload"
    assert result["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(SHOTS[0])}}
    ]


# ---------------------------------------------------------------- Responses, computer_call_output


def _responses_input() -> list[dict]:
    items: list[dict] = [{"role": "user", "content": "Book the 9:40 train."}]
    for step, url in enumerate(URLS):
        items.append(
            {
                "type": "computer_call",
                "id": f"cu_{step}",
                "call_id": f"call_{step}",
                "action": {"type": "click", "button": "left", "x": step * 10, "y": 20},
                "pending_safety_checks": [],
                "status": "completed",
            }
        )
        items.append(
            {
                "type": "computer_call_output",
                "call_id": f"call_{step}",
                "output": {"type": "computer_screenshot", "image_url": url},
            }
        )
    return items


@pytest.mark.parametrize("stream", [False, True])
def test_responses_screenshots_offloaded_and_reloaded(make_proxy, upstream, stream):
    refs: list[str] = []

    def first(rec):
        refs.extend(_offloaded_upstream(rec.body))
        return fake_responses.answer(
            rec, fake_responses.function_call("context_reload", {"ref": refs[0]}, call_id="call_reload")
        )

    def second(rec):
        return fake_responses.answer(rec, fake_responses.message(ANSWER))

    upstream.handler = scripted(first, second)
    with make_proxy() as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test-key", max_retries=0, timeout=30)
        if stream:
            events = list(
                client.responses.create(
                    model="computer-use-preview", input=_responses_input(), truncation="auto", stream=True
                )
            )
            reply = [e.response for e in events if e.type == "response.completed"][0]
            assert "context_reload" not in json.dumps([e.model_dump() for e in events])
        else:
            reply = client.responses.create(model="computer-use-preview", input=_responses_input(), truncation="auto")
    assert reply.output_text == ANSWER and [o.type for o in reply.output] == ["message"]
    first_round, reload_round = upstream.responses_requests()
    sent = first_round.json()["input"]
    # the task, a call and its output per screenshot; each offloaded one: its marker as a user message
    # after the 1×1 stand-in that takes the screenshot's place
    assert len(sent) == 1 + 2 * len(SHOTS) + BATCH
    notes = [i for i in sent if i.get("type") == "message" and i["role"] == "user"]
    assert [texts.media_ref(n["content"][0]["text"]) for n in notes] == refs
    output = [i for i in reload_round.json()["input"] if i.get("call_id") == "call_reload"][-1]
    assert output["type"] == "function_call_output"
    assert output["output"] == [{"type": "input_image", "image_url": URLS[0]}]


def test_the_statistics_count_image_tokens_saved_apart_from_text(make_proxy, upstream):
    from tests.e2e.test_stats_api import stats_when

    upstream.handler = scripted(lambda rec: JSONResponse(completion("ok")))
    with make_proxy() as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-image-stats", max_retries=0, timeout=30)
        raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=_chat_messages())
        before, after = int(raw.headers["x-offload-tokens-before"]), int(raw.headers["x-offload-tokens-after"])
        totals = stats_when(url, "sk-image-stats", 1, window="1h")["totals"]
    assert totals["tokens_saved"] == before - after > BATCH * 1000
    assert totals["image_tokens_saved"] == before - after and totals["text_tokens_saved"] == 0
