"""Compression end to end: summaries via the upstream, reuse without new calls, failures, events."""

from __future__ import annotations

import asyncio
import json
import re
from concurrent.futures import ThreadPoolExecutor

import httpx2
import openai
from starlette.responses import JSONResponse, StreamingResponse

from proxy.core.texts import RELOAD_TOOL_SCHEMAS, SUMMARY_INSTRUCTION
from tests.harness.history import agent_history
from tests.harness.servers import SUMMARY_TEXTS, completion, stream_chunks, summary_shape

# Summaries made inline, the request waiting for them: a hard limit below any history, nothing made
# ahead of time (summaries made in the background: test_background_summaries.py).
INLINE = {"X-Offload-Hard-Max-Tokens": "1", "X-Offload-Precompress-Ratio": "0"}
COMPRESS = {"X-Offload-Mode": "compress", "X-Offload-Max-Total-Tokens": "1500", "X-Offload-Session": "sess-1", **INLINE}


def chat_history(turns: int) -> list[dict]:
    messages = [{"role": "system", "content": "You are a helpful planner."}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"Question {i}: " + "please consider the details " * 20})
        messages.append({"role": "assistant", "content": f"Answer {i}: " + "here is a thorough reply " * 20})
    messages.append({"role": "user", "content": "And now?"})
    return messages


ACME_PROMPT = "ACME PROMPT: write a <state_snapshot>."  # a tenant's summary_prompt (test_tenant_prompt…)


def is_summary_call(rec) -> bool:
    """One of the proxy's summary calls, either shape (exact: `tests.harness.servers.summary_shape`)."""
    return summary_shape(rec, (*SUMMARY_TEXTS, ACME_PROMPT)) is not None


def summarizing(
    answer=lambda rec: JSONResponse(completion("Final answer")), *, fail: int | None = None, delay: float = 0.0
):
    calls = []

    async def handler(request, rec):
        if is_summary_call(rec):
            calls.append(rec)
            await asyncio.sleep(delay)
            if fail:
                return JSONResponse({"error": {"message": "summarizer down", "type": "server_error"}}, status_code=fail)
            n = len(calls)
            return JSONResponse(
                completion(
                    f"<state_snapshot><task_overview>plan #{n}</task_overview></state_snapshot>", usage=(300, 40)
                )
            )
        return answer(rec)

    return handler, calls


def forwarded(upstream) -> list[list[dict]]:
    return [r.json()["messages"] for r in upstream.chat_requests() if not is_summary_call(r)]


def test_summary_replaces_old_history_and_is_reused_next_turn(client, upstream, proxy_url):
    handler, calls = summarizing()
    upstream.handler = handler
    history = chat_history(12)
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history, extra_headers=COMPRESS)
    assert raw.parse().choices[0].message.content == "Final answer"
    assert raw.headers["x-offload-action"] == "compress"
    assert raw.headers["x-offload-summary-tokens"] == "340"
    usage = raw.parse().usage  # the answer's own (10, 5) plus the summary call's (300, 40)
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (310, 45, 355)
    assert len(calls) == 1 and calls[0].json()["model"] == "gpt-4o"
    assert calls[0].headers["authorization"] == "Bearer sk-test-key"
    sent = forwarded(upstream)[0]
    assert sent[:2] == history[:2]  # the system message and the task (the first user message) stay
    assert "<state_snapshot>" in sent[2]["content"] and "ref=" in sent[2]["content"]
    later_questions = [m for m in history[2:-2] if m["role"] == "user"]  # 11 × ≈ 570 characters: all fit
    assert sent[3:-2] == later_questions  # later user messages stay verbatim, after the summary, in order
    assert sent[-2:] == history[-2:]  # the verbatim tail (keep_recent 2 for compression)
    assert [t["function"]["name"] for t in upstream.chat_requests()[-1].json()["tools"]] == [
        "context_reload",
        "context_search",
    ]

    # next turn: no new summarisation, forwarded prefix byte-stable
    history2 = history + [{"role": "assistant", "content": "Final answer"}, {"role": "user", "content": "More?"}]
    client.chat.completions.create(model="gpt-4o", messages=history2, extra_headers=COMPRESS)
    assert len(calls) == 1
    first, second = forwarded(upstream)
    assert second[: len(first)] == first

    # the summary's reference returns the original messages, one JSON object per line
    ref = re.search(r"ref=([A-Za-z0-9_-]+)", sent[2]["content"]).group(1)
    content = httpx2.get(f"{proxy_url}/v1/offload/{ref}", headers={"authorization": "Bearer sk-test-key"}).json()
    assert [json.loads(line) for line in content["content"].splitlines()] == history[2:-2]

    # events: one compression, tenant-scoped
    data = httpx2.get(
        f"{proxy_url}/v1/offload/events", params={"session": "sess-1"}, headers={"authorization": "Bearer sk-test-key"}
    ).json()["data"]
    assert [e["type"] for e in data].count("compression") == 1
    assert data[0]["summary_tokens_in"] == 300 and data[0]["messages"] == len(history) - 4
    other = httpx2.get(
        f"{proxy_url}/v1/offload/events", params={"session": "sess-1"}, headers={"authorization": "Bearer sk-other"}
    ).json()["data"]
    assert other == []


def answer_streamed_when_asked(rec):
    body = rec.json()
    if not body.get("stream"):
        return JSONResponse(completion("Final answer"))
    usage = (10, 5) if (body.get("stream_options") or {}).get("include_usage") else None
    return StreamingResponse(iter(stream_chunks("Final answer", usage=usage)), media_type="text/event-stream")


def test_summary_usage_is_added_to_the_clients_usage_streamed_and_without_reload_tools(client, upstream):
    handler, calls = summarizing(answer_streamed_when_asked)
    upstream.handler = handler
    history = chat_history(12)
    headers = {**COMPRESS, "X-Offload-Tenant": "usage-stream"}
    chunks = list(
        client.chat.completions.create(
            model="gpt-4o", messages=history, extra_headers=headers, stream=True, stream_options={"include_usage": True}
        )
    )
    assert len(calls) == 1
    usage = [c.usage for c in chunks if c.usage]
    assert len(usage) == 1 and (usage[0].prompt_tokens, usage[0].completion_tokens) == (310, 45)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip() == "Final answer"
    # the next turn reuses the summary: nothing more to pay, nothing added
    again = client.chat.completions.create(model="gpt-4o", messages=history, extra_headers=headers)
    assert len(calls) == 1 and again.usage.prompt_tokens == 10
    # no reload tools: the answer is still completed with the summary's usage
    off = {**COMPRESS, "X-Offload-Tenant": "usage-off", "X-Offload-Reload-Tools": "off"}
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history, extra_headers=off)
    assert len(calls) == 2 and "tools" not in upstream.chat_requests()[-1].json()
    assert raw.parse().usage.prompt_tokens == 310 and raw.headers["x-offload-summary-tokens"] == "340"


def test_growth_past_the_trigger_folds_the_previous_summary(client, upstream):
    """The prefix shape (the default): the summary call is the conversation as the previous turn
    forwarded it (its summary first), the same tools, then the instruction."""
    handler, calls = summarizing()
    upstream.handler = handler
    history = chat_history(12)
    headers = {**COMPRESS, "X-Offload-Tenant": "fold"}
    client.chat.completions.create(model="gpt-4o", messages=history, extra_headers=headers)
    previous = [r for r in upstream.chat_requests() if not is_summary_call(r)][-1].json()
    longer = history + chat_history(14)[1:]
    client.chat.completions.create(model="gpt-4o", messages=longer, extra_headers=headers)
    assert len(calls) == 2
    asked = calls[1].json()
    assert summary_shape(calls[1]) == "prefix" and calls[1].path == "/v1/chat/completions"
    sent = previous["messages"]  # the whole of it: the longer history's part to summarise holds it all
    assert json.dumps(asked["messages"][: len(sent)]) == json.dumps(sent)
    assert (
        "plan #1" in asked["messages"][2]["content"]
    )  # the summary to fold, as the turn forwarded it (after the task)
    assert asked["messages"][-1] == {"role": "user", "content": SUMMARY_INSTRUCTION}
    assert json.dumps(asked["tools"]) == json.dumps(previous["tools"])
    assert [t["function"]["name"] for t in asked["tools"]] == [t["function"]["name"] for t in RELOAD_TOOL_SCHEMAS]
    assert (asked["tool_choice"], asked["stream"]) == ("none", False)
    assert "plan #2" in forwarded(upstream)[-1][2]["content"]


def test_transcript_shape_folds_the_previous_summary(make_proxy, upstream):
    handler, calls = summarizing()
    upstream.handler = handler
    with make_proxy(summary_request="transcript") as url:
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-transcript", max_retries=0)
        history = chat_history(12)
        c.chat.completions.create(model="gpt-4o", messages=history, extra_headers=COMPRESS)
        c.chat.completions.create(model="gpt-4o", messages=history + chat_history(14)[1:], extra_headers=COMPRESS)
    assert len(calls) == 2 and {summary_shape(c) for c in calls} == {"transcript"}
    first = calls[0].json()
    assert set(first) == {"model", "messages"} and first["messages"][0]["content"].startswith("You compress")
    assert "Previous snapshot:\n<state_snapshot><task_overview>plan #1" in calls[1].json()["messages"][1]["content"]
    assert "plan #2" in forwarded(upstream)[-1][2]["content"]


def test_failing_summarizer_leaves_the_request_successful(client, upstream):
    handler, calls = summarizing(fail=500)
    upstream.handler = handler
    headers = {**COMPRESS, "X-Offload-Tenant": "failing"}
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=chat_history(12), extra_headers=headers
    )
    assert raw.parse().choices[0].message.content == "Final answer"
    assert "compression skipped" in raw.headers["x-offload-warning"]
    assert raw.headers["x-offload-action"] == "none"
    assert forwarded(upstream)[0] == chat_history(12)
    client.chat.completions.create(model="gpt-4o", messages=chat_history(12), extra_headers=headers)
    assert len(calls) == 2  # the failure was not cached


def test_concurrent_identical_requests_summarize_once(proxy_url, upstream):
    handler, calls = summarizing(delay=0.5)
    upstream.handler = handler
    c = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key="sk-concurrent", max_retries=0)

    def one(_):
        return c.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=chat_history(12), extra_headers=COMPRESS
        )

    with ThreadPoolExecutor(5) as pool:
        results = list(pool.map(one, range(5)))
    assert len(calls) == 1
    assert all(r.parse().choices[0].message.content == "Final answer" for r in results)
    assert {r.headers["x-offload-action"] for r in results} == {"compress"}


def test_summary_model_header_and_auto_ratio(client, upstream):
    handler, calls = summarizing()
    upstream.handler = handler
    # auto: big tool results compact well (ratio < 0.75), so no summary is needed
    headers = {
        "X-Offload-Max-Total-Tokens": "1500",
        "X-Offload-Summary-Model": "gpt-4o-mini",
        "X-Offload-Tenant": "auto",
        **INLINE,
    }
    raw = client.chat.completions.with_raw_response.create(  # 40k tokens, 8.6k once compacted (700-char previews)
        model="gpt-4o",
        messages=agent_history(steps=6),
        extra_headers={**headers, "X-Offload-Max-Total-Tokens": "10000"},
    )
    assert raw.headers["x-offload-action"] == "compact" and not calls
    # auto with a history compaction cannot shrink: compaction, then compression
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=chat_history(12), extra_headers=headers
    )
    assert raw.headers["x-offload-action"] == "compress"
    assert calls[0].json()["model"] == "gpt-4o-mini"


def test_reused_summary_is_forwarded_even_without_reload_tools(client, upstream):
    handler, calls = summarizing()
    upstream.handler = handler
    headers = {**COMPRESS, "X-Offload-Tenant": "no-tools", "X-Offload-Reload-Tools": "off"}
    for _ in range(2):
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=chat_history(12), extra_headers=headers
        )
        assert raw.headers["x-offload-action"] == "compress"
    first, second = forwarded(upstream)
    assert first == second and "<state_snapshot>" in second[2]["content"]
    assert len(calls) == 1 and "tools" not in upstream.chat_requests()[-1].json()
    assert "tools" not in calls[0].json() and "tool_choice" not in calls[0].json()  # as the turns: none


def test_slow_or_unusable_summaries_are_warnings(make_proxy, upstream):
    async def slow_then_garbage(request, rec):
        if is_summary_call(rec):
            if len(upstream.requests) == 1:
                await asyncio.sleep(60)  # past the summary timeout by far
            return JSONResponse(completion("no snapshot here"))
        return JSONResponse(completion("Final answer"))

    upstream.handler = slow_then_garbage
    with make_proxy(summary_timeout=2) as url:  # the garbage answer comes well within it, loaded or not
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-slow", max_retries=0)
        first = c.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=chat_history(12), extra_headers=COMPRESS
        )
        assert "timed out" in first.headers["x-offload-warning"]
        second = c.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=chat_history(12), extra_headers=COMPRESS
        )
        assert "no <state_snapshot>" in second.headers["x-offload-warning"]
        assert second.parse().choices[0].message.content == "Final answer"


def test_tenant_prompt_from_tenants_file(make_proxy, upstream, tmp_path):
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(f'[tenants.acme]\nsummary_prompt = "{ACME_PROMPT}"\n')
    handler, calls = summarizing()
    upstream.handler = handler
    with make_proxy(tenants_file=tenants) as url:
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-acme", max_retries=0)
        c.chat.completions.create(
            model="gpt-4o", messages=chat_history(12), extra_headers={**COMPRESS, "X-Offload-Tenant": "acme"}
        )
    assert calls[0].json()["messages"][-1] == {"role": "user", "content": ACME_PROMPT}  # the instruction


def test_a_tiny_group_threshold_makes_at_most_max_groups_summary_calls(make_proxy, upstream):
    handler, calls = summarizing()
    upstream.handler = handler
    # the model's messages only: no task to keep, no later user messages kept beside the summary
    words = [{"role": "assistant", "content": f"word{i}"} for i in range(2000)]
    headers = {
        "X-Offload-Mode": "compress",
        "X-Offload-Max-Total-Tokens": "0",
        "X-Offload-Keep-Recent": "0",
        "X-Offload-Group-Token-Threshold": "1",
        "X-Offload-Session": "tiny-groups",
    }
    with make_proxy(summary_request="prefix") as url:  # groups are the transcript's: one call in the prefix shape
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-groups", max_retries=0)
        c.chat.completions.create(model="gpt-4o", messages=words, extra_headers=headers)
    assert len(calls) == 1 and calls[0].json()["messages"] == [*words, {"role": "user", "content": SUMMARY_INSTRUCTION}]
    calls.clear()
    upstream.requests.clear()
    with make_proxy(summary_request="transcript") as url:
        c = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-groups", max_retries=0)
        raw = c.chat.completions.with_raw_response.create(model="gpt-4o", messages=words, extra_headers=headers)
    assert raw.parse().choices[0].message.content == "Final answer"
    assert len(calls) == 8  # compress_plan.MAX_GROUPS, not one call per message (2,000)
    assert raw.headers["x-offload-action"] == "compress"
    transcripts = "\n".join(c.json()["messages"][-1]["content"] for c in calls)
    assert all(re.search(rf"\bword{i}\b", transcripts) for i in range(2000))  # every message in one group
    sent = forwarded(upstream)[0]
    assert len(sent) == 1 and "<state_snapshot>" in sent[0]["content"]  # all 2,000 summarised into one message
    assert sent[0]["content"].count("plan #") == 8
