"""Sessions of clients that send no X-Offload-Session, through the real proxy with each API's
SDK: the turns of one conversation are one session, two conversations two, in chat
completions, Responses (whole history, or continued with previous_response_id, streamed or
not, through reload rounds) and Anthropic Messages (cache_control moving every turn)."""

from __future__ import annotations

import time
import uuid

import anthropic
import httpx2
import openai
import pytest

from proxy.offload.tenant import namespace_for
from proxy.stats._sessions import PREFIX
from tests.e2e.test_responses_clients import HEADERS as RESPONSES_HEADERS
from tests.e2e.test_responses_clients import TOOLS, reload_then_answer
from tests.e2e.test_responses_clients import history as responses_history
from tests.harness.servers import default_handler


def sessions(url: str, key: str, turns: int) -> list[dict]:
    """The tenant's sessions once the recorder has flushed `turns` turns, oldest first."""
    deadline = time.monotonic() + 10
    while True:
        r = httpx2.get(f"{url}/v1/offload/sessions", headers={"authorization": f"Bearer {key}"}, timeout=10)
        assert r.status_code == 200, r.text
        rows = r.json()["data"]
        if sum(row["turns"] for row in rows) >= turns or time.monotonic() > deadline:
            return sorted(rows, key=lambda row: row["last_seen"])
        time.sleep(0.2)


def totals(url: str, key: str) -> dict:
    r = httpx2.get(f"{url}/v1/offload/stats", params={"window": "1h"}, headers={"authorization": f"Bearer {key}"})
    return r.json()["totals"]


def derived(rows: list[dict]) -> list[int]:
    assert all(row["id"].startswith(PREFIX) and len(row["id"]) == len(PREFIX) + 16 for row in rows), rows
    return [row["turns"] for row in rows]


def test_chat_completions(proxy_url, upstream, key):
    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key=key, max_retries=0, timeout=20)
    for task in ("fix the failing test", "write the changelog"):
        history = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": task}]
        for turn in range(3):
            answer = client.chat.completions.create(model="gpt-4o", messages=history, stream=turn == 1)
            text = (
                "".join(c.choices[0].delta.content or "" for c in answer if c.choices)
                if turn == 1
                else answer.choices[0].message.content
            )
            history += [{"role": "assistant", "content": text}, {"role": "user", "content": f"and then {turn}?"}]
    rows = sessions(proxy_url, key, 6)
    assert derived(rows) == [3, 3]
    assert rows[0]["id"] != rows[1]["id"] and rows[0]["models"] == {"gpt-4o": 3}
    assert totals(proxy_url, key)["requests"] == 6
    # the same conversation again under another credential: another tenant, another session
    other = f"sk-{uuid.uuid4().hex}"
    openai.OpenAI(base_url=f"{proxy_url}/v1", api_key=other, max_retries=0).chat.completions.create(
        model="gpt-4o", messages=history[:2]
    )
    [row] = sessions(proxy_url, other, 1)
    assert row["id"] not in {r["id"] for r in rows}


def test_the_header_still_wins(proxy_url, upstream, key):
    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key=key, max_retries=0, timeout=20)
    history = [{"role": "user", "content": "named"}]
    client.chat.completions.create(model="gpt-4o", messages=history, extra_headers={"X-Offload-Session": "run-7"})
    client.chat.completions.create(model="gpt-4o", messages=history)
    rows = sessions(proxy_url, key, 2)
    assert sorted(row["id"] for row in rows)[1] == "run-7" and len(rows) == 2
    bad = client.chat.completions.with_raw_response
    with pytest.raises(openai.BadRequestError):
        bad.create(model="gpt-4o", messages=history, extra_headers={"X-Offload-Session": "not valid"})


def test_responses_with_the_whole_history(proxy_url, upstream, key):
    """As Codex CLI sends it: store false, instructions, the whole input every turn."""
    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key=key, max_retries=0, timeout=20)
    for task in ("refactor the parser", "add a flag"):
        items: list = [{"role": "user", "content": [{"type": "input_text", "text": task}]}]
        for turn in range(3):
            result = client.responses.create(model="gpt-5", instructions="You are Codex.", input=items, store=False)
            items += [
                {"role": "assistant", "content": [{"type": "output_text", "text": result.output_text}]},
                {"role": "user", "content": [{"type": "input_text", "text": f"next {turn}"}]},
            ]
    assert derived(sessions(proxy_url, key, 6)) == [3, 3]


def test_responses_continued_with_previous_response_id(proxy_url, upstream, key):
    """Each turn names the previous answer and sends only its new input: streamed or not."""
    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key=key, max_retries=0, timeout=20)
    for task in ("plan the migration", "review the diff"):
        previous = None
        for turn in range(3):
            text = task if previous is None else f"go on {turn}"
            if turn == 1:
                with client.responses.stream(model="gpt-5", input=text, previous_response_id=previous) as stream:
                    previous = stream.get_final_response().id
            else:
                previous = client.responses.create(model="gpt-5", input=text, previous_response_id=previous).id
    assert derived(sessions(proxy_url, key, 6)) == [3, 3]


def test_responses_continued_after_reload_rounds(proxy_url, upstream, key):
    """The client holds the first round's id: the turn continuing from it joins the session."""
    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key=key, max_retries=0, timeout=20)
    upstream.handler = reload_then_answer()
    first = client.responses.create(
        model="gpt-5", input=responses_history(), tools=TOOLS, extra_headers=RESPONSES_HEADERS
    )
    assert first.id == "resp_round_1"
    upstream.handler = default_handler
    second = client.responses.create(model="gpt-5", input="thanks", previous_response_id=first.id)
    client.responses.create(model="gpt-5", input="bye", previous_response_id=second.id, stream=True).close()
    client.responses.create(model="gpt-5", input="unrelated")
    # two sessions; not asserted in order: under load both may be last seen in the same second
    assert sorted(derived(sessions(proxy_url, key, 4))) == [1, 3]


def test_anthropic_messages(proxy_url, upstream, key):
    """As Claude Code sends it: a system prompt, cache_control on the newest block every turn."""
    client = anthropic.Anthropic(base_url=proxy_url, api_key=key, max_retries=0, timeout=20)
    system = [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}]
    for task in ("fix the build", "explain the error"):
        messages: list = []
        for turn in range(3):
            for message in messages:  # the marker moves to the newest block
                for block in message["content"]:
                    block.pop("cache_control", None)
            messages.append(
                {
                    "role": "user",
                    "content": [{"type": "text", "text": f"{task} ({turn})", "cache_control": {"type": "ephemeral"}}],
                }
            )
            if turn == 1:
                with client.messages.stream(
                    model="claude-sonnet-4-5", max_tokens=100, system=system, messages=messages
                ) as stream:
                    reply = stream.get_final_message()
            else:
                reply = client.messages.create(
                    model="claude-sonnet-4-5", max_tokens=100, system=system, messages=messages
                )
            messages.append({"role": "assistant", "content": [{"type": "text", "text": reply.content[0].text}]})
    rows = sessions(proxy_url, key, 6)
    assert derived(rows) == [3, 3] and rows[0]["models"] == {"claude-sonnet-4-5": 3}
    ns = namespace_for("credential", [key], None)
    assert httpx2.get(f"{proxy_url}/v1/offload/stats", headers={"x-api-key": key}).json()["tenant"] == ns
