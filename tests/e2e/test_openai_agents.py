"""The OpenAI Agents SDK (`openai-agents`), unchanged, through the proxy.

The agent runs on its default model over the Responses API, with the proxy as its OpenAI client's
`base_url`. Its function tool returns a 30 KB log: on the next request the proxy offloads it (the
proxy's settings keep no recent item verbatim), the fake model reloads it with `context_reload`,
which the proxy answers itself, then answers. The agent sees its own tool call and the answer,
never the reload.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

import openai  # noqa: E402
import pytest  # noqa: E402
from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled  # noqa: E402
from agents.models import _openai_shared  # noqa: E402

from tests.e2e.test_responses_clients import LOG, NEEDLE  # noqa: E402
from tests.harness.responses import REF, answer, function_call, input_items, message, refs_in_input, usage  # noqa: E402
from tests.harness.servers import default_handler, is_responses_create  # noqa: E402

pytestmark = pytest.mark.anyio

SETTINGS = {"max_total_tokens": 1000, "max_tool_message_tokens": 500, "keep_recent": 0, "max_reload_tokens": 50_000}
calls: list[str] = []


@function_tool
def read_deploy_log() -> str:
    """Read the deploy log."""
    calls.append("read_deploy_log")
    return LOG


def agent() -> Agent:
    return Agent(name="deployer", instructions="Find why the deploy failed.", tools=[read_deploy_log])


def fake_model(rec):
    """The model: call the tool, reload what came back offloaded, answer with what it found."""
    items = input_items(rec)
    last = items[-1]
    if last.get("type") == "function_call_output" and last["call_id"] == "call_reload_1":
        errors = [line for line in last["output"].splitlines() if " NOTICE " in line]
        return answer(rec, message(f"Found: {errors}"), usage=usage(2_000, 20))
    if last.get("type") == "function_call_output":
        refs = REF.findall(last["output"])
        if refs:
            return answer(
                rec, function_call("context_reload", {"ref": refs[0]}, call_id="call_reload_1"), usage=usage(300, 10)
            )
        return answer(rec, message(f"Saw {len(last['output'])} characters verbatim."))
    if not any(i.get("type") == "function_call" for i in items):
        return answer(rec, function_call("read_deploy_log", {}, call_id="call_log_1"), usage=usage(100, 5))
    return answer(rec, message(f"Continuing with refs {refs_in_input(rec)}."))


@pytest.fixture(scope="module")
def agents_proxy(make_proxy):
    with make_proxy(**SETTINGS) as url:
        yield url


@pytest.fixture
async def agent_client(agents_proxy, upstream):
    """The agents' default OpenAI client, pointed at the proxy (restored, and closed on this test's loop)."""
    set_tracing_disabled(True)
    upstream.handler = model_handler
    before = _openai_shared.get_default_openai_client()
    async with openai.AsyncOpenAI(
        base_url=f"{agents_proxy}/v1", api_key="sk-agents-key", max_retries=0, timeout=20
    ) as client:
        set_default_openai_client(client, use_for_tracing=False)
        calls.clear()
        try:
            yield client
        finally:
            _openai_shared.set_default_openai_client(before)


async def model_handler(request, rec):
    return fake_model(rec) if is_responses_create(rec) else await default_handler(request, rec)


def assert_reloaded_behind_the_agent(upstream) -> str:
    """Three model calls: the tool call, the offloaded output answered by a reload, the answer."""
    first, second, third = upstream.responses_requests()
    assert input_items(first)[-1]["role"] == "user" and len(input_items(first)) == 1
    assert "read_deploy_log" in json.dumps(first.json()["tools"])
    offloaded = input_items(second)[-1]
    assert offloaded["type"] == "function_call_output" and offloaded["call_id"] == "call_log_1"
    assert offloaded["output"].startswith("[offloaded tool result: ") and len(offloaded["output"]) < 2_000
    assert NEEDLE not in second.body.decode()
    [ref] = refs_in_input(second)
    names = [t.get("name") for t in second.json()["tools"]]
    assert names[-2:] == ["context_reload", "context_search"] and "read_deploy_log" in names
    reload_call, reload_output = input_items(third)[-2:]
    assert (reload_call["name"], json.loads(reload_call["arguments"])) == ("context_reload", {"ref": ref})
    assert reload_output["output"] == LOG
    return ref


def assert_agent_never_saw_the_reload(result) -> None:
    assert result.final_output == f"Found: {[NEEDLE]}"
    assert calls == ["read_deploy_log"]
    kinds = [item.type for item in result.new_items]
    assert kinds == ["tool_call_item", "tool_call_output_item", "message_output_item"], kinds
    assert "context_reload" not in json.dumps(result.to_input_list(), default=str)
    usage_total = sum(r.usage.total_tokens for r in result.raw_responses)
    assert usage_total == (100 + 5) + (300 + 10) + (2_000 + 20)  # the reload round is counted in the answer's
    assert len(result.raw_responses) == 2


async def test_run(agent_client, upstream):
    result = await Runner.run(agent(), "Why did the deploy fail?")
    assert_agent_never_saw_the_reload(result)
    assert_reloaded_behind_the_agent(upstream)


async def test_run_streamed(agent_client, upstream):
    result = Runner.run_streamed(agent(), "Why did the deploy fail?")
    seen = [event async for event in result.stream_events()]
    assert_agent_never_saw_the_reload(result)
    assert_reloaded_behind_the_agent(upstream)
    raw = [e.data for e in seen if e.type == "raw_response_event"]
    assert [e.type for e in raw].count("response.completed") == 2  # one per model call the agent made
    assert "context_reload" not in json.dumps([e.model_dump() for e in raw])
    named = [e.name for e in seen if e.type == "run_item_stream_event"]
    assert named == ["tool_called", "tool_output", "message_output_created"], named


async def test_a_run_continuing_from_earlier_items(agent_client, upstream):
    first = await Runner.run(agent(), "Why did the deploy fail?")
    ref = assert_reloaded_behind_the_agent(upstream)
    history = first.to_input_list() + [{"role": "user", "content": "Which disk was it?"}]
    [held] = [i for i in history if i.get("type") == "function_call_output"]
    assert held["output"] == LOG  # the agent holds the original output
    result = await Runner.run(agent(), history)
    assert result.final_output == f"Continuing with refs {[ref]}."  # the same ref, the same marker
    later = upstream.responses_requests()[-1]
    [offloaded] = [i for i in input_items(later) if i.get("type") == "function_call_output"]
    assert offloaded["output"].startswith("[offloaded tool result: ") and REF.findall(offloaded["output"]) == [ref]
    assert input_items(later)[-1] == {"role": "user", "content": "Which disk was it?"}
    assert calls == ["read_deploy_log"]
