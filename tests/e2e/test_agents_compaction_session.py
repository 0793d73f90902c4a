"""The OpenAI Agents SDK's `OpenAIResponsesCompactionSession`, unchanged, through a proxy that
emulates `POST /v1/responses/compact` (issue 22, part 2): several turns with large tool outputs,
the session compacts (its history becomes the user messages and the proxy's compaction item),
the agent continues, and the fake model reloads the compacted content byte for byte."""

from __future__ import annotations

import json
import os

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

import openai  # noqa: E402
import pytest  # noqa: E402
from agents import (  # noqa: E402
    Agent,
    OpenAIResponsesCompactionSession,  # noqa: E402
    Runner,
    SQLiteSession,
    function_tool,
    set_tracing_disabled,
)
from agents.models.openai_responses import OpenAIResponsesModel  # noqa: E402

from proxy.core.compaction import PREFIX  # noqa: E402
from tests.e2e.test_responses_clients import LOG  # noqa: E402
from tests.harness.responses import answer, function_call, input_items, message, refs_in_input  # noqa: E402
from tests.harness.servers import SNAPSHOT, default_handler, is_responses_create, is_summary_call, snapshot_answer  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("fresh_summary_memory")]

MODEL = "gpt-5"
compactions: list[list[dict]] = []  # the session's history each time it decided to compact


@function_tool
def read_log(day: int) -> str:
    """Read the deploy log of a day."""
    return f"day {day}\n{LOG}"


def fake_model(rec):
    """Each user turn: read a log, then answer; "reload please": reload the summary's ref, then
    answer with what came back."""
    items = input_items(rec)
    last = items[-1]
    if last.get("type") == "function_call_output" and last["call_id"].startswith("call_reload"):
        return answer(rec, message(f"reloaded {len(last['output'])} characters"))
    if last.get("type") == "function_call_output":
        return answer(rec, message("read it"))
    text = json.dumps(last)
    if "reload please" in text:
        [ref] = [r for r in refs_in_input(rec)][:1]
        return answer(rec, function_call("context_reload", {"ref": ref}, call_id="call_reload_1"))
    day = sum(1 for i in items if i.get("type") == "function_call_output") + 1
    return answer(rec, function_call("read_log", {"day": day}, call_id=f"call_log_{day}"))


@pytest.fixture(scope="module")
def agents_proxy(make_proxy):
    with make_proxy(max_reload_tokens=1_000_000) as url:
        yield url


async def test_the_compaction_session_compacts_continues_and_reloads(agents_proxy, upstream, tmp_path):
    set_tracing_disabled(True)

    async def handler(request, rec):
        if is_summary_call(rec):
            return snapshot_answer(rec)
        return fake_model(rec) if is_responses_create(rec) else await default_handler(request, rec)

    upstream.handler = handler
    compactions.clear()

    def should_compact(context) -> bool:
        if len(context["compaction_candidate_items"]) >= 9:  # three turns of call, output, answer
            compactions.append([dict(i) for i in context["session_items"]])
            return True
        return False

    async with openai.AsyncOpenAI(
        base_url=f"{agents_proxy}/v1", api_key="sk-agents-compact", max_retries=0, timeout=30
    ) as client:
        agent = Agent(
            name="deployer", instructions="Read the logs.", tools=[read_log], model=OpenAIResponsesModel(MODEL, client)
        )
        session = OpenAIResponsesCompactionSession(
            "deploys",
            SQLiteSession("deploys", str(tmp_path / "s.db")),
            client=client,
            model=MODEL,
            compaction_mode="input",
            should_trigger_compaction=should_compact,
        )
        for n in range(1, 4):
            result = await Runner.run(agent, f"Check day {n}.", session=session)
            assert result.final_output == "read it"
        assert len(compactions) == 1  # after the third turn
        history = await session.get_items()
        assert [i.get("role") for i in history[:-1]] == ["user"] * 3
        assert history[-1]["type"] == "compaction" and history[-1]["encrypted_content"].startswith(PREFIX)
        assert LOG not in json.dumps(history)

        result = await Runner.run(agent, "Check day 4.", session=session)  # continues from the compaction
        assert result.final_output == "read it"
        turn = [r for r in upstream.responses_requests() if "Check day 4." in r.body.decode()][0]
        assert PREFIX.encode() not in turn.body and SNAPSHOT in turn.body.decode()
        assert LOG not in turn.body.decode()  # the summarised logs are behind the summary's ref

        result = await Runner.run(agent, "reload please", session=session)
        reloads = [r for r in upstream.responses_requests() if input_items(r)[-1].get("call_id") == "call_reload_1"]
        assert reloads, "the model's reload never came back"
        output = input_items(reloads[-1])[-1]["output"]
        summarised = compactions[0][1:]  # all but the task
        assert [json.loads(line) for line in output.splitlines()] == summarised
        outputs = [
            json.loads(line)["output"]
            for line in output.splitlines()
            if json.loads(line).get("type") == "function_call_output"
        ]
        assert outputs == [f"day {d}\n{LOG}" for d in (1, 2, 3)]  # byte for byte
        assert result.final_output == f"reloaded {len(output)} characters"
