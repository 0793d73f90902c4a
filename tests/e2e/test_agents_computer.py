"""openai-agents with a `ComputerTool` over a fake computer, unchanged, through the proxy (Responses).

The fake computer returns a real 1280×800 PNG screenshot after each action; the agent sends them
back as `computer_call_output` items on every model call. Past the third, the older screenshots
(one at a time: `image_batch=1`) leave the forwarded payload (a 1×1 stand-in and a marker
message); the fake model then reloads the oldest with `context_reload` and gets the screenshot
itself (an `input_image` output), byte for byte. The agent sees its own computer calls and the answer, never the reload.
"""

from __future__ import annotations

import base64
import json
import os

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

import openai  # noqa: E402
import pytest  # noqa: E402
from agents import Agent, AsyncComputer, ComputerTool, Runner, set_default_openai_client, set_tracing_disabled  # noqa: E402
from agents.models import _openai_shared  # noqa: E402

from proxy.core import texts  # noqa: E402
from proxy.formats.responses._items import PLACEHOLDER_PNG  # noqa: E402
from tests.harness.responses import answer, function_call, input_items, message, usage  # noqa: E402
from tests.harness.screens import b64, screenshot  # noqa: E402
from tests.harness.servers import default_handler, is_responses_create  # noqa: E402

pytestmark = pytest.mark.anyio

STEPS = 5
ANSWER = "Booked: the first screen showed the search form."


class FakeComputer(AsyncComputer):
    """A desktop whose screen changes a little with every action; it records what it was asked."""

    def __init__(self) -> None:
        self.actions: list[str] = []
        self.shots: list[str] = []

    @property
    def environment(self):
        return "linux"

    @property
    def dimensions(self):
        return (1280, 800)

    async def screenshot(self) -> str:
        self.shots.append(b64(screenshot(len(self.actions))))
        return self.shots[-1]

    async def click(self, x: int, y: int, button: str) -> None:
        self.actions.append(f"click {x},{y}")

    async def double_click(self, x: int, y: int) -> None:
        self.actions.append("double_click")

    async def scroll(self, x: int, y: int, scroll_x: int, scroll_y: int) -> None:
        self.actions.append("scroll")

    async def type(self, text: str) -> None:
        self.actions.append(f"type {text}")

    async def wait(self) -> None:
        self.actions.append("wait")

    async def move(self, x: int, y: int) -> None:
        self.actions.append("move")

    async def keypress(self, keys: list[str]) -> None:
        self.actions.append("keypress")

    async def drag(self, path: list[tuple[int, int]]) -> None:
        self.actions.append("drag")


def computer_call(step: int) -> dict:
    return {
        "type": "computer_call",
        "id": f"cu_{step}",
        "call_id": f"call_cu_{step}",
        "action": {"type": "click", "button": "left", "x": 10 * step, "y": 20},
        "pending_safety_checks": [],
        "status": "completed",
    }


def fake_model(rec):
    items = input_items(rec)
    last = items[-1]
    if last.get("type") == "function_call_output" and last.get("call_id") == "call_reload":
        return answer(rec, message(ANSWER), usage=usage(1_500, 10))
    done = sum(1 for i in items if i.get("type") == "computer_call_output")
    if done < STEPS:
        return answer(rec, computer_call(done), usage=usage(100, 5))
    refs = [
        texts.media_ref(i["content"][0]["text"])
        for i in items
        if i.get("type") == "message"
        and i.get("role") == "user"
        and isinstance(i.get("content"), list)
        and texts.media_ref(i["content"][0].get("text", ""))
    ]
    return answer(rec, function_call("context_reload", {"ref": refs[0]}, call_id="call_reload"), usage=usage(200, 5))


async def model_handler(request, rec):
    return fake_model(rec) if is_responses_create(rec) else await default_handler(request, rec)


@pytest.fixture
async def agent_client(make_proxy, upstream):
    set_tracing_disabled(True)
    upstream.handler = model_handler
    before = _openai_shared.get_default_openai_client()
    # one screenshot at a time (the default offloads them in chunks of 6, which tests/e2e/
    # test_image_offload.py covers): five steps are enough to see the agent's loop go through
    with make_proxy(image_batch=1) as url:
        async with openai.AsyncOpenAI(
            base_url=f"{url}/v1", api_key="sk-agents-key", max_retries=0, timeout=30
        ) as client:
            set_default_openai_client(client, use_for_tracing=False)
            try:
                yield client
            finally:
                _openai_shared.set_default_openai_client(before)


@pytest.mark.parametrize("streamed", [False, True])
async def test_computer_screenshots_offloaded_and_one_reloaded_behind_the_agent(agent_client, upstream, streamed):
    computer = FakeComputer()
    agent = Agent(
        name="operator", instructions="Book a train.", tools=[ComputerTool(computer)], model="computer-use-preview"
    )
    if streamed:
        result = Runner.run_streamed(agent, "Book the 9:40 train to Lyon.", max_turns=20)
        seen = [event async for event in result.stream_events()]
        raw = [e.data.model_dump() for e in seen if e.type == "raw_response_event"]
        assert "context_reload" not in json.dumps(raw, default=str)
    else:
        result = await Runner.run(agent, "Book the 9:40 train to Lyon.", max_turns=20)
    assert result.final_output == ANSWER
    assert len(computer.actions) == STEPS and len(computer.shots) == STEPS
    assert "context_reload" not in json.dumps(result.to_input_list(), default=str)
    assert [item.type for item in result.new_items].count("tool_call_item") == STEPS
    requests = upstream.responses_requests()
    assert len(requests) == STEPS + 2  # one per action, the model's reload round, the answer
    last_agent_call = requests[-2].body.decode()
    for shot in computer.shots[:2]:
        assert shot not in last_agent_call  # older than the most recent three: offloaded
    for shot in computer.shots[2:]:
        assert shot in last_agent_call
    sent = requests[-2].json()["input"]
    assert (
        sum(1 for i in sent if i.get("type") == "computer_call_output" and i["output"]["image_url"] == PLACEHOLDER_PNG)
        == 2
    )
    reloaded = [i for i in requests[-1].json()["input"] if i.get("call_id") == "call_reload"][-1]
    image = reloaded["output"][0]
    assert image["type"] == "input_image"
    assert base64.b64decode(image["image_url"].partition(",")[2]) == base64.b64decode(computer.shots[0])
    assert image["image_url"] == f"data:image/png;base64,{computer.shots[0]}"
