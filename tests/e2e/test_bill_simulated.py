"""The bill the proxy shows against the bill a provider would send: the fake upstream's prompt
cache (`tests.harness.billing`: a TTL on a clock the test moves) bills every model request, and
the statistics API (what the dashboard draws) shows, for the tenant, the session and each turn,
what it billed — uncached input, cache reads, 5-minute and 1-hour writes, output; in tokens and
in money at the price table's — with the real SDKs unchanged, streamed and not, over turns with
the clock moved between them (one gap longer than the TTL: that turn writes again):

- chat completions and the Responses API (OpenAI caches by itself): reads from the second turn;
- Anthropic Messages without the client's `cache_control` (the proxy's `--cache-control auto`
  caches: reads appear), and with the client's own breakpoints (sent as they were, none moved
  or added; its 1-hour one outlives the gap);
- a turn's reload round, and the summary call a turn waited for, in that turn's bill; a summary
  made in the background (it reads the conversation's cached prefix) in the session's.
"""

from __future__ import annotations

import uuid

import anthropic
import openai
import pytest
from starlette.responses import JSONResponse, StreamingResponse

from tests.e2e import test_anthropic_clients as claude
from tests.e2e.test_bill import chat_usage, openai_stream
from tests.e2e.test_compression_e2e import INLINE, chat_history, summarizing
from tests.harness import bill_checks as checks
from tests.harness.billing import ProviderCaches
from tests.harness.servers import completion, default_handler, is_summary_call, snapshot_answer

pytestmark = pytest.mark.usefixtures("fresh_summary_memory")

SYSTEM = "You are a careful release engineer. " + " ".join(
    f"Rule {i}: check the rollout log line {i}." for i in range(300)
)
TOOLS = [
    {
        "name": "read_logs",
        "description": "Read a log file.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }
]
GAPS = (60, 400, 30)  # seconds of the fake's clock after turns 1, 2, 3: the second is longer than the TTL (300 s)
ANSWER = "Hello there"
OUTPUT = 7  # the output tokens each answer reports


@pytest.fixture
def session() -> str:
    return f"bill-{uuid.uuid4().hex[:12]}"


def chat_answer(rec):
    """A chat completion with a usage, streamed (its usage chunk when asked) or not."""
    body = rec.json()
    if body.get("stream"):
        return StreamingResponse(
            iter(openai_stream(body, chat_usage(0, 0, OUTPUT), ANSWER)), media_type="text/event-stream"
        )
    return JSONResponse({**completion(ANSWER), "usage": chat_usage(0, 0, OUTPUT)})


async def answering(request, rec):
    """Every format's answer with a usage, billed by the fake's cache; the proxy's summary calls
    get their snapshot."""
    if is_summary_call(rec):
        return snapshot_answer(rec)
    if rec.path.endswith("/chat/completions"):
        return chat_answer(rec)
    return await default_handler(request, rec)


def assert_reads_follow_the_clock(caches: ProviderCaches, key: str) -> None:
    """The fake's bill of the 4 turns: written (or uncached) first, read next, expired after the
    long gap (nothing read), read again."""
    reads = [b.billed.read for b in caches.of(key)]
    assert len(reads) == 4 and reads[0] == 0 and reads[2] == 0, reads
    assert reads[1] >= 1024 and reads[3] >= 1024, reads


def assert_each_turn(shown: dict, caches: ProviderCaches, key: str) -> None:
    """One upstream answer per turn, each turn's row billed as the fake billed it."""
    turns = checks.of_call(caches.of(key), "turn")
    assert len(shown["data"]) == len(turns)
    for row, bill in zip(shown["data"], turns):
        checks.assert_turn_billed(row, [bill])


# ---------------------------------------------------------------- OpenAI: chat completions, Responses


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_chat_completions_billed_as_the_provider_bills(proxy_url, upstream, caches, key, session, stream):
    upstream.handler = answering
    client = openai.OpenAI(
        base_url=f"{proxy_url}/v1",
        api_key=key,
        max_retries=0,
        timeout=60,
        default_headers={"X-Offload-Session": session},
    )
    history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Why did the deploy stop?"}]
    for turn, gap in enumerate((*GAPS, 0)):
        if stream:
            chunks = list(client.chat.completions.create(model="gpt-4o", messages=history, stream=True))
            assert all(c.usage is None and c.choices for c in chunks)  # what the proxy asked for: not the client's
            text = "".join(c.choices[0].delta.content or "" for c in chunks)
        else:
            reply = client.chat.completions.create(model="gpt-4o", messages=history)
            billed = caches.of(key)[-1].billed
            assert reply.usage.prompt_tokens == billed.total  # the usage as the upstream reported it
            assert reply.usage.prompt_tokens_details.cached_tokens == billed.read
            text = reply.choices[0].message.content
        history += [{"role": "assistant", "content": text}, {"role": "user", "content": f"And step {turn}?"}]
        caches.clock.advance(gap)
    assert_reads_follow_the_clock(caches, key)
    shown = checks.assert_shown(proxy_url, key, session, caches.of(key), model="gpt-4o", turns=4)
    assert_each_turn(shown, caches, key)
    assert shown["bill"]["tokens"]["cache_write_5m"] == shown["bill"]["tokens"]["cache_write_1h"] == 0  # OpenAI's


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_the_responses_api_billed_as_the_provider_bills(proxy_url, upstream, caches, key, session, stream):
    client = openai.OpenAI(
        base_url=f"{proxy_url}/v1",
        api_key=key,
        max_retries=0,
        timeout=60,
        default_headers={"X-Offload-Session": session},
    )
    items: list[dict] = [{"role": "user", "content": "Why did the deploy stop?"}]
    for turn, gap in enumerate((*GAPS, 0)):
        if stream:
            with client.responses.stream(model="gpt-5", instructions=SYSTEM, input=items, store=False) as events:
                reply = events.get_final_response()
        else:
            reply = client.responses.create(model="gpt-5", instructions=SYSTEM, input=items, store=False)
        billed = caches.of(key)[-1].billed
        assert (
            reply.usage.input_tokens == billed.total and reply.usage.input_tokens_details.cached_tokens == billed.read
        )
        items += [{"role": "assistant", "content": reply.output_text}, {"role": "user", "content": f"And {turn}?"}]
        caches.clock.advance(gap)
    assert_reads_follow_the_clock(caches, key)
    assert_each_turn(checks.assert_shown(proxy_url, key, session, caches.of(key), model="gpt-5", turns=4), caches, key)


# ---------------------------------------------------------------- Anthropic Messages


def messages_turn(client: anthropic.Anthropic, *, stream: bool, **body) -> anthropic.types.Message:
    if stream:
        with client.messages.stream(model=claude.MODEL, max_tokens=512, **body) as events:
            return events.get_final_message()
    return client.messages.create(model=claude.MODEL, max_tokens=512, **body)


def assert_usage_as_billed(reply: anthropic.types.Message, caches: ProviderCaches, key: str) -> None:
    billed = caches.of(key)[-1].billed
    usage = reply.usage
    assert (usage.input_tokens, usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (
        billed.uncached,
        billed.read,
        billed.written,
    )
    assert (usage.cache_creation.ephemeral_5m_input_tokens, usage.cache_creation.ephemeral_1h_input_tokens) == (
        billed.write_5m,
        billed.write_1h,
    )


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_messages_without_cache_control_get_the_proxys_and_are_billed_reads(
    proxy_url, upstream, caches, session, stream
):
    key = f"sk-ant-{uuid.uuid4().hex}"
    client = anthropic.Anthropic(
        base_url=proxy_url, api_key=key, max_retries=0, timeout=60, default_headers={"X-Offload-Session": session}
    )
    messages: list[dict] = [{"role": "user", "content": "Why did the deploy stop?"}]
    for turn, gap in enumerate((*GAPS, 0)):
        reply = messages_turn(client, stream=stream, system=SYSTEM, tools=TOOLS, messages=messages)
        assert_usage_as_billed(reply, caches, key)
        messages += [{"role": "assistant", "content": reply.content[0].text}, {"role": "user", "content": f"{turn}?"}]
        caches.clock.advance(gap)
    for rec in upstream.messages_requests():  # the proxy's caching, on every turn
        body = rec.json()
        assert body["cache_control"] == {"type": "ephemeral"} and body["system"][-1]["cache_control"]
    assert_reads_follow_the_clock(caches, key)
    bills = caches.of(key)
    after_gap = bills[2].billed
    assert after_gap.written == after_gap.total > bills[1].billed.total  # after the gap: all written again
    shown = checks.assert_shown(proxy_url, key, session, caches.of(key), model=claude.MODEL, turns=4)
    assert_each_turn(shown, caches, key)
    tokens = shown["bill"]["tokens"]
    assert tokens["cache_read"] > 0 and tokens["cache_write_5m"] > 0 and tokens["cache_write_1h"] == 0


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_messages_with_the_clients_own_breakpoints_go_as_sent_and_are_billed(
    proxy_url, upstream, caches, session, stream
):
    """A 1-hour breakpoint on the system prompt, a 5-minute one on the last message, moved
    forward each turn as agents do: the upstream gets them where the client put them, no more."""
    key = f"sk-ant-{uuid.uuid4().hex}"
    client = anthropic.Anthropic(
        base_url=proxy_url, api_key=key, max_retries=0, timeout=60, default_headers={"X-Offload-Session": session}
    )
    system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    history: list[dict] = [{"role": "user", "content": "Why did the deploy stop?"}]
    sent = []
    for turn, gap in enumerate((*GAPS, 0)):
        *before, last = history
        messages = [
            *before,
            {
                "role": "user",
                "content": [{"type": "text", "text": last["content"], "cache_control": {"type": "ephemeral"}}],
            },
        ]
        sent.append(messages)
        reply = messages_turn(client, stream=stream, system=system, tools=TOOLS, messages=messages)
        assert_usage_as_billed(reply, caches, key)
        history += [{"role": "assistant", "content": reply.content[0].text}, {"role": "user", "content": f"{turn}?"}]
        caches.clock.advance(gap)
    bodies = [r.json() for r in upstream.messages_requests()]
    assert [(b["system"], b["tools"], b["messages"]) for b in bodies] == [(system, TOOLS, m) for m in sent]
    assert not any("cache_control" in b for b in bodies)  # no request-level caching added
    first, second, after_gap, last = (b.billed for b in caches.of(key))
    assert first.read == 0 and first.write_1h > 1024 and first.write_5m > 0
    assert second.read == first.written and second.written > 0
    assert after_gap.read == first.write_1h and after_gap.write_1h == 0  # the 1-hour system prompt outlived the gap
    assert last.read == after_gap.read + after_gap.written
    shown = checks.assert_shown(proxy_url, key, session, caches.of(key), model=claude.MODEL, turns=4)
    assert_each_turn(shown, caches, key)
    assert shown["bill"]["tokens"]["cache_write_1h"] == first.write_1h


# ---------------------------------------------------------------- reload rounds and summaries in the turn's bill


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_reload_round_is_billed_in_its_turn(proxy_url, upstream, caches, session, stream):
    """The model reloads an offloaded result (a round the proxy runs): both upstream answers in
    the turn's bill, the round's prefix read from the cache the first wrote; the next turn, after
    a gap longer than the TTL, writes again."""
    key = f"sk-ant-{uuid.uuid4().hex}"
    client = claude.client(proxy_url, key, headers={"X-Offload-Session": session})
    for gap in (400, 0):
        upstream.handler = claude.reload_then_answer()
        reply = messages_turn(client, stream=stream, system=SYSTEM, messages=claude.history(), tools=claude.TOOLS)
        assert reply.content[-1].text == claude.ANSWER
        caches.clock.advance(gap)
    bills = checks.of_call(caches.of(key), "turn")
    assert len(bills) == 4 and not checks.of_call(caches.of(key), "summary")
    first, round_1, after_gap, round_2 = (b.billed for b in bills)
    assert round_1.read == first.read + first.written > 0 and round_1.written > 0  # the round extends the prefix
    assert after_gap.read == 0 and after_gap.written == first.written
    shown = checks.assert_shown(proxy_url, key, session, caches.of(key), model=claude.MODEL, turns=2)
    assert [row["reload_rounds"] for row in shown["data"]] == [1, 1]
    for row, answers in zip(shown["data"], (bills[:2], bills[2:])):
        checks.assert_turn_billed(row, answers)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_summary_the_turn_waited_for_is_billed_with_it(proxy_url, upstream, caches, key, session, stream):
    """A turn that waits for its summary (compression, inline): the summary call in the turn's
    `summary_bill` and the tenant's `summary` call; the next turn reuses it (no call) and is
    billed reads of the compressed prefix."""
    upstream.handler, calls = summarizing(chat_answer)
    client = openai.OpenAI(
        base_url=f"{proxy_url}/v1",
        api_key=key,
        max_retries=0,
        timeout=60,
        default_headers={
            "X-Offload-Mode": "compress",
            "X-Offload-Max-Total-Tokens": "1500",
            "X-Offload-Session": session,
            **INLINE,
        },
    )
    history = chat_history(12)
    for extra, gap in ((0, 60), (1, 0)):
        turn = [*history, *([{"role": "assistant", "content": ANSWER}, {"role": "user", "content": "More?"}] * extra)]
        raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=turn, stream=stream)
        assert raw.headers["x-offload-action"] == "compress"
        parsed = raw.parse()
        if stream:
            assert "".join(c.choices[0].delta.content or "" for c in parsed if c.choices) == ANSWER + " "
        caches.clock.advance(gap)
    assert len(calls) == 1
    bills = caches.of(key)
    [summary] = checks.of_call(bills, "summary")
    turns = checks.of_call(bills, "turn")
    assert len(turns) == 2 and summary.output == 40 and turns[1].billed.read >= 1024
    shown = checks.assert_shown(proxy_url, key, session, caches.of(key), model="gpt-4o", turns=2)
    checks.assert_turn_billed(shown["data"][0], [turns[0]], summaries=[summary])
    checks.assert_turn_billed(shown["data"][1], [turns[1]])
    assert shown["summaries"]["made"] == 1


def conversation(turns: int) -> list[dict]:
    """A conversation as a client resends it, `turns` user messages long: each turn appends the
    answer and a question to the last (so the provider's cache finds the last turn's prefix)."""
    out = [{"role": "user", "content": "Question 0: " + "please consider the details " * 20}]
    for i in range(1, turns):
        out += [
            {"role": "assistant", "content": f"Answer {i}: " + "here is a thorough reply " * 20},
            {"role": "user", "content": f"Question {i}: " + "please consider the details " * 20},
        ]
    return out


def test_a_summary_made_in_the_background_reads_the_conversations_cache_and_is_billed_to_its_session(
    proxy_url, upstream, caches, session
):
    """Messages without the client's caching, compressed: the turns read the last turn's prefix;
    the summary call the proxy makes in the background (no turn waits) is the conversation's own
    prefix, so it reads it too, and is billed to the session (call "summary"), not to a turn."""
    upstream.handler = answering
    key = f"sk-ant-{uuid.uuid4().hex}"
    client = anthropic.Anthropic(
        base_url=proxy_url,
        api_key=key,
        max_retries=0,
        timeout=60,
        default_headers={
            "X-Offload-Mode": "compress",
            "X-Offload-Max-Total-Tokens": "3000",
            "X-Offload-Session": session,
            "X-Offload-Precompress-Ratio": "0",
            "X-Offload-Hard-Max-Tokens": "100000",
        },
    )
    system = SYSTEM[:5000]
    for turns in range(1, 40):  # until a turn crosses the trigger (where depends on how tokens are counted)
        raw = client.messages.with_raw_response.create(
            model=claude.MODEL, max_tokens=512, system=system, messages=conversation(turns)
        )
        caches.clock.advance(30)
        if raw.headers["x-offload-action"] != "none":
            break
    assert raw.headers["x-offload-action"] == "compress-pending"  # it did not wait
    checks.wait_for_event(proxy_url, key, session, "summary_ready")
    raw = client.messages.with_raw_response.create(
        model=claude.MODEL, max_tokens=512, system=system, messages=conversation(turns + 1)
    )
    assert raw.headers["x-offload-action"] == "compress"  # the summary, forwarded
    bills = caches.of(key)
    [summary] = checks.of_call(bills, "summary")
    turns_billed = checks.of_call(bills, "turn")
    assert all(b.billed.read == a.billed.total for a, b in zip(turns_billed[:-2], turns_billed[1:-1]))
    before = turns_billed[-3]  # the turn before the trigger's: the prefix the summary call resends
    assert summary.billed.read == before.billed.total and summary.billed.written < summary.billed.read / 10
    shown = checks.assert_shown(proxy_url, key, session, bills, model=claude.MODEL, turns=turns + 1)
    for row, bill in zip(shown["data"], turns_billed):
        checks.assert_turn_billed(row, [bill])  # the summary in no turn's bill: the session's
    assert shown["summaries"]["made"] == 1
