"""A summarised computer-use session: the originals behind the summary's ref carry each screenshot
as its marker, never its base64, and every screenshot is reloadable as the image itself.

The screenshots the summary covers include the most recent ones, which the turns still forwarded
as images: the summary stores them under their own refs. Reloading the summary's ref gives its
JSON lines (one page, not thousands of pages of base64); `context_reload` of a marker's ref gives
the model the image, byte for byte.
"""

from __future__ import annotations

import json
import time
import uuid

import anthropic
import httpx2
import pytest

from proxy.core import texts
from proxy.core.texts import history_ref
from tests.harness import anthropic as fake
from tests.harness.screens import b64, screenshot
from tests.harness.servers import default_handler, is_summary_call, snapshot_answer

pytestmark = pytest.mark.usefixtures("fresh_summary_memory")

MODEL = "claude-sonnet-4-5"
SHOTS = [screenshot(step) for step in range(10)]
# compress only, made inline: a history of screenshots over the trigger is summarised by this turn
INLINE = {
    "X-Offload-Mode": "compress",
    "X-Offload-Max-Total-Tokens": "1500",
    "X-Offload-Hard-Max-Tokens": "1",
    "X-Offload-Precompress-Ratio": "0",
}
BACKGROUND = {**INLINE, "X-Offload-Hard-Max-Tokens": "1000000"}
TOOLS = [
    {
        "name": "computer",
        "description": "Use the computer.",
        "input_schema": {"type": "object", "properties": {"action": {"type": "string"}}},
    }
]


def session() -> list[dict]:
    """The task, then per screenshot a click and its tool_result (the screenshot), then a last exchange."""
    messages: list[dict] = [{"role": "user", "content": "Book the cheapest train to Lyon."}]
    for step, shot in enumerate(SHOTS):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    fake.text(f"Step {step}."),
                    fake.tool_use("computer", {"action": "left_click"}, id=f"toolu_{step}"),
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
    messages += [{"role": "assistant", "content": "Checking the results."}, {"role": "user", "content": "Go on."}]
    return messages


def summary_ref(body: dict) -> str:
    found = [
        history_ref(block["text"])
        for m in body["messages"]
        if isinstance(m["content"], list)
        for block in m["content"]
        if block.get("type") == "text" and history_ref(block["text"])
    ]
    assert len(found) == 1, "one summary in the forwarded messages"
    return found[0]


def stored_lines(text: str) -> list[str]:
    """The media refs the summarised originals name, in order; the originals carry no screenshot."""
    for shot in SHOTS:
        assert b64(shot)[:2000] not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert len(lines) == 2 * len(SHOTS)  # every summarised message, one JSON object per line
    return [m.group(2) for m in texts.MEDIA_MARKER_RE.finditer(text)]


def last_tool_result(body: dict) -> list[dict]:
    [block] = [b for b in body["messages"][-1]["content"] if b.get("type") == "tool_result"]
    return block["content"] if isinstance(block["content"], list) else [{"type": "text", "text": block["content"]}]


def test_a_summary_stores_screenshots_as_markers_and_each_reloads_as_the_image(proxy_url, upstream):
    key = f"sk-ant-{uuid.uuid4().hex}"
    seen: dict[str, list[str]] = {}

    async def handler(request, rec):
        if is_summary_call(rec):
            return snapshot_answer(rec)
        if not fake.is_messages_create(rec):  # the proxy asking GET /v1/models whether the key is good
            return await default_handler(request, rec)
        body = rec.json()
        step = len(upstream.messages_requests()) - 1
        if step == 0:  # the model reloads the summarised history
            seen["history"] = [summary_ref(body)]
            call = fake.tool_use("context_reload", {"ref": seen["history"][0]}, id="toolu_r1")
        elif step == 1:  # ...and the most recent screenshot it names (forwarded as an image until now)
            [page] = last_tool_result(body)
            seen["media"] = stored_lines(page["text"])
            call = fake.tool_use("context_reload", {"ref": seen["media"][-1]}, id="toolu_r2")
        else:
            seen["image"] = [json.dumps(last_tool_result(body))]
            return fake.answer(rec, fake.message(fake.text("The cheapest train leaves at 9:40.")))
        return fake.answer(rec, fake.message(call))

    upstream.handler = handler
    client = anthropic.Anthropic(base_url=proxy_url, api_key=key, max_retries=0, timeout=60, default_headers=INLINE)
    raw = client.messages.with_raw_response.create(model=MODEL, max_tokens=256, tools=TOOLS, messages=session())
    assert raw.headers["x-offload-action"] == "compact+compress"  # the older screenshots, then the summary
    assert raw.parse().content[0].text == "The cheapest train leaves at 9:40."
    assert len(seen["media"]) == len(SHOTS)  # one marker per screenshot, in order
    [image] = json.loads(seen["image"][0])
    assert image == {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(SHOTS[-1])}}
    for ref, shot in zip(seen["media"], SHOTS):  # each one stored, byte for byte
        stored = httpx2.get(f"{proxy_url}/v1/offload/{ref}", headers={"x-api-key": key}, timeout=20).json()
        assert (stored["kind"], stored["content"]) == ("image", f"data:image/png;base64,{b64(shot)}")


def test_a_background_summary_stores_its_screenshots_too(proxy_url, upstream):
    key = f"sk-ant-{uuid.uuid4().hex}"
    calls: list = []

    async def handler(request, rec):
        if is_summary_call(rec):
            calls.append(rec)
            return snapshot_answer(rec)
        if not fake.is_messages_create(rec):
            return await default_handler(request, rec)
        return fake.answer(rec, fake.message(fake.text("ok")))

    upstream.handler = handler
    client = anthropic.Anthropic(base_url=proxy_url, api_key=key, max_retries=0, timeout=60, default_headers=BACKGROUND)
    history = session()
    for _ in range(200):  # the summary is made after the first turn's answer, then found by a later turn
        raw = client.messages.with_raw_response.create(model=MODEL, max_tokens=256, tools=TOOLS, messages=history)
        if raw.headers["x-offload-action"] == "compact+compress":
            break
        time.sleep(0.05)
    assert raw.headers["x-offload-action"] == "compact+compress" and len(calls) == 1
    ref = summary_ref(upstream.messages_requests()[-1].json())
    stored = httpx2.get(f"{proxy_url}/v1/offload/{ref}", headers={"x-api-key": key}, timeout=20).json()
    refs = stored_lines(stored["content"])
    assert len(refs) == len(SHOTS)
    for ref, shot in zip(refs, SHOTS):
        item = httpx2.get(f"{proxy_url}/v1/offload/{ref}", headers={"x-api-key": key}, timeout=20).json()
        assert item["content"] == f"data:image/png;base64,{b64(shot)}"
