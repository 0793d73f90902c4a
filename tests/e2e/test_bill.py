"""The measured bill end to end: the fake upstream reports a usage scripted per answer, the real
SDKs talk to the proxy unchanged, and the statistics API's bill equals what was reported (per
part, per call, in money at the table's prices); a chat stream whose client did not ask for
usage is asked for it upstream and reaches the client byte for byte as it would have without;
an answer without usage is counted as such."""

from __future__ import annotations

import json
import time
import uuid

import anthropic
import httpx2
import openai
from starlette.responses import JSONResponse, StreamingResponse

from proxy.core.texts import INJECTED_TOOLS
from proxy.stats._counters import PriceTable
from tests.harness import anthropic as fake_anthropic
from tests.harness.history import agent_history
from tests.harness.servers import completion, is_summary_call, snapshot_answer, sse, stream_chunks

ADMIN = "admin-token-for-bill-tests"
PRICES = PriceTable()


def chat_usage(prompt: int, cached: int, output: int) -> dict:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": prompt + output,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
    }


def openai_stream(body: dict, usage: dict, content: str = "Hello there") -> list[bytes]:
    """The chunks OpenAI sends: with `stream_options.include_usage`, `"usage":null` on each chunk
    and a last chunk with no choices holding the usage (compact JSON, as OpenAI writes it)."""
    asked = (body.get("stream_options") or {}).get("include_usage") is True
    out = []
    for raw in stream_chunks(content):
        data = raw[len(b"data: ") : -2]
        if data == b"[DONE]":
            if asked:
                out.append(
                    b"data: "
                    + json.dumps({**json.loads(last), "choices": [], "usage": usage}, separators=(",", ":")).encode()
                    + b"\n\n"
                )
            out.append(raw)
            continue
        chunk = json.loads(data)
        if asked:
            chunk["usage"] = None
        last = json.dumps({k: v for k, v in chunk.items() if k != "usage"}, separators=(",", ":"))
        out.append(b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n")
    return out


class Script:
    """The usages the fake upstream reports, one per answer in order (its summary calls: the
    default snapshot answer)."""

    def __init__(self, *usages: dict) -> None:
        self.usages = list(usages)
        self.bodies: list[dict] = []

    async def chat(self, request, rec):
        if is_summary_call(rec):  # a summary the turn may need (offline, the estimated counts are larger)
            return snapshot_answer(rec)
        body = rec.json()
        self.bodies.append(body)
        usage = self.usages.pop(0)
        if body.get("stream"):
            return StreamingResponse(iter(openai_stream(body, usage)), media_type="text/event-stream")
        return JSONResponse({**completion("Hello there"), "usage": usage})

    async def messages(self, request, rec):
        if is_summary_call(rec):
            return snapshot_answer(rec)
        self.bodies.append(rec.json())
        msg = fake_anthropic.message(fake_anthropic.text("Hello there"), usage=self.usages.pop(0))
        return fake_anthropic.answer(rec, msg)


def totals(url: str, key: str, requests: int) -> dict:
    deadline = time.monotonic() + 15
    while True:
        r = httpx2.get(
            f"{url}/v1/offload/stats", params={"window": "1h"}, headers={"authorization": f"Bearer {key}"}, timeout=10
        )
        assert r.status_code == 200, r.text
        body = r.json()
        if body["totals"]["requests"] >= requests and body.get("recorder", {}).get("queued", 0) == 0:
            return body["totals"]
        if time.monotonic() > deadline:
            return body["totals"]
        time.sleep(0.2)


def usd(model: str, **tokens: int) -> float:
    price = PRICES.price(model)
    return sum(n * price.of(part) for part, n in tokens.items()) / 1e6


def test_a_chat_stream_the_client_did_not_ask_usage_for(make_proxy, upstream):
    script = Script(chat_usage(1200, 1024, 7), chat_usage(1300, 1152, 9), chat_usage(1400, 0, 11))
    upstream.handler = script.chat
    key = f"sk-{uuid.uuid4().hex}"
    history = [{"role": "user", "content": "hi"}]
    with make_proxy(admin_token=ADMIN) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)
        chunks = list(client.chat.completions.create(model="gpt-4o", messages=history, stream=True))
        # the client never sees what asking added: no usage chunk, no `usage` on any chunk
        assert all(c.usage is None and c.choices for c in chunks)
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Hello there "
        assert script.bodies[0]["stream_options"] == {"include_usage": True}

        # byte for byte what the upstream sends a request without include_usage
        raw = httpx2.post(
            f"{url}/v1/chat/completions",
            json={"model": "gpt-4o", "messages": history, "stream": True},
            headers={"authorization": f"Bearer {key}"},
            timeout=30,
        )
        expected = b"".join(openai_stream({"stream": True}, {}))
        assert raw.status_code == 200 and raw.content == expected
        assert script.bodies[1]["stream_options"] == {"include_usage": True}

        # a client that asked keeps its usage chunk
        asked = list(
            client.chat.completions.create(
                model="gpt-4o", messages=history, stream=True, stream_options={"include_usage": True}
            )
        )
        assert asked[-1].choices == [] and asked[-1].usage.prompt_tokens == 1400
        assert asked[-1].usage.completion_tokens == 11

        bill = totals(url, key, 3)["bill"]
    turn = bill["calls"]["turn"]
    assert turn["tokens"] == {
        "uncached": 176 + 148 + 1400,
        "cache_read": 1024 + 1152,
        "cache_write_5m": 0,
        "cache_write_1h": 0,
        "output": 27,
    }
    assert turn["answers"] == 3 and bill["turns_without_usage"] == 0
    assert turn["usd"]["total"] == round(usd("gpt-4o", uncached=1724, cache_read=2176, output=27), 6)


def test_the_raw_bytes_without_asking_are_the_upstreams(make_proxy, upstream):
    """What the client gets equals the upstream's bytes for a request without include_usage."""
    script = Script(chat_usage(50, 0, 3))
    upstream.handler = script.chat
    with make_proxy() as url:
        raw = httpx2.post(
            f"{url}/v1/chat/completions",
            json={"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
            headers={"authorization": f"Bearer sk-{uuid.uuid4().hex}"},
            timeout=30,
        )
    assert raw.content == b"".join(openai_stream({"stream": True}, {}))


def test_turns_through_the_reload_loop_streamed_and_not(make_proxy, upstream):
    """Turns whose history the proxy offloads (the reload tools injected: the rounds path): each
    answer's usage in the turn's bill, streamed (asked for, taken out) and not."""
    usages = [chat_usage(2000 + i, 1000, 10 + i) for i in range(4)]
    script = Script(*usages)
    upstream.handler = script.chat
    key = f"sk-{uuid.uuid4().hex}"
    # compaction only: every turn offloads its tool results by any token count (no summary replaces them)
    with make_proxy(admin_token=ADMIN, mode="compact", max_total_tokens=1000, max_tool_message_tokens=500) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)
        for steps, stream in ((4, False), (5, True), (6, False), (7, True)):
            raw = client.chat.completions.with_raw_response.create(
                model="gpt-4o", messages=agent_history(steps=steps), stream=stream
            )
            parsed = raw.parse()
            if stream:
                got = list(parsed)
                assert all(c.usage is None for c in got) and all(c.choices for c in got)
            else:
                assert parsed.usage.prompt_tokens >= usages[steps - 4]["prompt_tokens"]
        offered = [
            b
            for b in script.bodies
            if any((t.get("function") or {}).get("name") in INJECTED_TOOLS for t in b.get("tools") or [])
        ]
        assert len(offered) == 4  # every turn went through the rounds path
        streamed = [b for b in script.bodies if b.get("stream")]
        assert streamed and all(b["stream_options"] == {"include_usage": True} for b in streamed)
        bill = totals(url, key, 4)["bill"]
    turn = bill["calls"]["turn"]
    assert turn["answers"] == 4 and turn["answers_without_usage"] == 0
    assert turn["tokens"]["cache_read"] == 4000
    assert turn["tokens"]["uncached"] == sum(u["prompt_tokens"] - 1000 for u in usages)
    assert turn["tokens"]["output"] == sum(u["completion_tokens"] for u in usages)


def test_the_anthropic_sdk_streamed_and_not(make_proxy, upstream):
    script = Script(
        {
            "input_tokens": 40,
            "cache_read_input_tokens": 9000,
            "cache_creation_input_tokens": 1500,
            "cache_creation": {"ephemeral_5m_input_tokens": 500, "ephemeral_1h_input_tokens": 1000},
            "output_tokens": 70,
        },
        {"input_tokens": 30, "cache_read_input_tokens": 10500, "cache_creation_input_tokens": 200, "output_tokens": 50},
    )
    upstream.handler = script.messages
    key = f"sk-ant-{uuid.uuid4().hex}"
    model = "claude-sonnet-4-5"
    with make_proxy(admin_token=ADMIN) as url:
        client = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=30)
        message = client.messages.create(model=model, max_tokens=100, messages=[{"role": "user", "content": "hi"}])
        assert message.usage.cache_read_input_tokens == 9000  # the client's own answer, untouched
        with client.messages.stream(model=model, max_tokens=100, messages=[{"role": "user", "content": "hi"}]) as s:
            final = s.get_final_message()
        assert final.usage.output_tokens == 50
        stats = totals(url, key, 2)
    bill = stats["bill"]
    assert bill["calls"]["turn"]["tokens"] == {
        "uncached": 70,
        "cache_read": 19500,
        "cache_write_5m": 700,
        "cache_write_1h": 1000,
        "output": 120,
    }
    expected = usd(model, uncached=70, cache_read=19500, cache_write_5m=700, cache_write_1h=1000, output=120)
    assert bill["usd"]["total"] == round(expected, 6) and stats["cost_billed_usd"] == round(expected, 6)
    price = PRICES.price(model)
    assert bill["usd"]["cache_write_1h"] == round(1000 * price.input * 2 / 1e6, 6)  # Anthropic's 2× premium
    assert bill["models"] == [{"model": model, "usd": round(expected, 6), "tokens": 21390}]
    # nothing was offloaded: the raw history is what went, its estimate the bill itself
    assert stats["counterfactual"]["turns"] == 2 and stats["counterfactual"]["usd"]["total"] == round(expected, 6)


def test_an_answer_without_usage_is_counted_never_guessed(make_proxy, upstream):
    answers = iter([{"prompt_tokens": "lots"}, None, chat_usage(10, 0, 1), {"prompt_tokens": -5}])

    async def handler(request, rec):
        usage = next(answers)
        body = {**completion("hi"), "usage": usage}
        if usage is None:
            del body["usage"]
        return JSONResponse(body)

    upstream.handler = handler
    key = f"sk-{uuid.uuid4().hex}"
    with make_proxy(admin_token=ADMIN) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)
        for _ in range(4):
            # the client gets the upstream's answer as it came, whatever its usage
            raw = client.chat.completions.with_raw_response.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
            )
            assert raw.http_response.status_code == 200
        stats = totals(url, key, 4)
        metrics = httpx2.get(f"{url}/metrics", headers={"authorization": f"Bearer {ADMIN}"}, timeout=10).text
    bill = stats["bill"]
    assert bill["turns_without_usage"] == 3 and bill["calls"]["turn"]["answers"] == 1
    assert bill["tokens"]["uncached"] == 10 and stats["counterfactual"]["turns"] == 1
    assert 'offload_turns_without_usage_total{call="turn"} 3.0' in metrics
    assert 'offload_billed_tokens_total{call="turn",kind="uncached"} 10.0' in metrics


def _with_ids(events: list[bytes]) -> list[bytes]:
    """The events with an `id:` line each (valid SSE: a client reads the same data)."""
    return [b"id: %d\n" % i + e for i, e in enumerate(events)]


def _split_data(events: list[bytes]) -> list[bytes]:
    """Each JSON event's data on two `data:` lines (SSE joins them with a newline)."""
    out = []
    for e in events:
        data = e[len(b"data: ") : -2]
        cut = data.find(b",")
        out.append(e if cut < 0 else b"data: " + data[: cut + 1] + b"\ndata: " + data[cut + 1 :] + b"\n\n")
    return out


def test_odd_sse_framing_never_shows_the_client_what_asking_added(make_proxy, upstream):
    """The usage a chat stream was asked for is taken out however the upstream frames its events:
    an `id:` line before each, data split over lines, a media type in capitals. A client that did
    not ask never gets a chunk without choices (code reading `chunk.choices[0]` would fail)."""
    framings = [
        ("id lines", _with_ids, "text/event-stream"),
        ("split data", _split_data, "text/event-stream"),
        ("capitals", lambda events: events, "Text/Event-Stream; charset=utf-8"),
    ]
    bodies: list[dict] = []

    async def handler(request, rec):
        body = rec.json()
        bodies.append(body)
        _, frame, media = framings[(len(bodies) - 1) // 2]
        events = frame(openai_stream(body, chat_usage(60, 0, 3)))
        return StreamingResponse(iter(events), headers={"content-type": media})

    upstream.handler = handler
    key = f"sk-{uuid.uuid4().hex}"
    history = [{"role": "user", "content": "hi"}]
    with make_proxy(admin_token=ADMIN) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)
        for name, frame, _ in framings:
            chunks = list(client.chat.completions.create(model="gpt-4o", messages=history, stream=True))
            assert chunks and all(c.usage is None and c.choices for c in chunks), name
            raw = httpx2.post(
                f"{url}/v1/chat/completions",
                json={"model": "gpt-4o", "messages": history, "stream": True},
                headers={"authorization": f"Bearer {key}"},
                timeout=30,
            )
            sent = frame(openai_stream({"stream_options": {"include_usage": True}}, chat_usage(60, 0, 3)))
            expected = [e.replace(b',"usage":null', b"") for e in sent if b'"usage":{' not in e]
            assert raw.content == b"".join(expected), name  # byte for byte, but for what asking added
            assert b'"usage"' not in raw.content, name
        assert all(b["stream_options"] == {"include_usage": True} for b in bodies)
        bill = totals(url, key, 6)["bill"]
    assert bill["calls"]["turn"]["answers"] == 6 and bill["turns_without_usage"] == 0


def test_a_large_chunk_of_a_stream_not_asked_for_usage_is_rewritten_off_the_event_loop(
    make_proxy, upstream, monkeypatch
):
    """A chunk of megabytes (one delta of a long tool call's arguments) carrying `"usage":null`
    is parsed and written again off the event loop, as the bill of a relayed stream is read."""
    import threading

    from proxy.http import accounting as billing

    seen: list[tuple[int, str]] = []
    real = billing._without_asked

    def spy(block, reading, usage):
        seen.append((len(block), threading.current_thread().name))
        return real(block, reading, usage)

    monkeypatch.setattr(billing, "_without_asked", spy)
    big = "x" * (2 * 1024 * 1024)

    async def handler(request, rec):
        body = rec.json()
        events = openai_stream(body, chat_usage(60, 0, 3), content=big)
        return StreamingResponse(iter(events), media_type="text/event-stream")

    upstream.handler = handler
    with make_proxy() as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=f"sk-{uuid.uuid4().hex}", max_retries=0, timeout=60)
        chunks = list(
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True)
        )
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == big + " "
    assert all(c.usage is None for c in chunks)
    large = [thread for size, thread in seen if size > billing.ON_LOOP_BYTES]
    assert large and all(thread.startswith("offload-cpu") for thread in large), seen


def test_a_background_summarys_bill_is_in_its_derived_sessions_bill(make_proxy, upstream):
    """A client naming no session (Claude Code, Codex, most SDK code) has one derived from its
    conversation: a summary made in the background for that conversation is in the session's
    bill, as its turns are (not in the tenant's alone)."""
    from tests.harness.servers import SNAPSHOT

    summaries: list = []

    async def handler(request, rec):
        if is_summary_call(rec):
            summaries.append(rec)
            return JSONResponse({**completion(SNAPSHOT), "usage": chat_usage(3000, 2048, 40)})
        return JSONResponse({**completion("ok"), "usage": chat_usage(100, 0, 5)})

    upstream.handler = handler
    key = f"sk-{uuid.uuid4().hex}"
    ahead = {
        "X-Offload-Mode": "compress",
        "X-Offload-Max-Total-Tokens": "3000",
        "X-Offload-Precompress-Ratio": "0.8",
        "X-Offload-Hard-Max-Tokens": "100000",
    }
    auth = {"authorization": f"Bearer {key}"}
    with make_proxy() as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)
        for n in range(4, 40):
            messages = [{"role": "system", "content": "You are a helpful planner."}]
            for i in range(n):
                messages += [
                    {"role": "user", "content": f"Question {i}: " + "please consider the details " * 20},
                    {"role": "assistant", "content": f"Answer {i}: " + "here is a thorough reply " * 20},
                ]
            client.chat.completions.create(
                model="gpt-4o", messages=[*messages, {"role": "user", "content": "?"}], extra_headers=ahead
            )
            if summaries:
                break
        assert summaries, "no summary was made"
        deadline = time.monotonic() + 20
        while True:
            tenant = totals(url, key, n - 3)["bill"]["calls"]["summary"]
            [session] = httpx2.get(f"{url}/v1/offload/sessions", headers=auth, timeout=10).json()["data"]
            if tenant["answers"] >= 1 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    assert tenant["answers"] == 1 and tenant["tokens"]["cache_read"] == 2048  # billed, in the background
    assert session["turns"] == n - 3
    assert session["bill"]["calls"]["summary"] == tenant  # and in the conversation's own session


def test_an_upstream_that_refuses_stream_options_still_streams(make_proxy, upstream):
    """Some upstreams refuse the field the proxy adds to ask for a stream's usage (Azure OpenAI
    before its 2024-09 API versions, gateways checking every field: 400 "Unknown parameter:
    'stream_options'"). A client that did not ask must get its stream as it would without the
    proxy, directly and through the reload rounds; the turn counts as one without usage."""
    refused: list[dict] = []

    async def handler(request, rec):
        body = rec.json()
        if is_summary_call(rec):
            return snapshot_answer(rec)
        if "stream_options" in body:
            refused.append(body)
            return JSONResponse(
                {
                    "error": {
                        "message": "Unknown parameter: 'stream_options'.",
                        "type": "invalid_request_error",
                        "param": "stream_options",
                        "code": "unknown_parameter",
                    }
                },
                status_code=400,
            )
        return StreamingResponse(iter(stream_chunks("Hello there")), media_type="text/event-stream")

    upstream.handler = handler
    key = f"sk-{uuid.uuid4().hex}"
    with make_proxy(admin_token=ADMIN, mode="compact", max_total_tokens=1000, max_tool_message_tokens=500) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)
        for messages in ([{"role": "user", "content": "hi"}], agent_history(steps=4)):  # forwarded; the rounds
            chunks = list(client.chat.completions.create(model="gpt-4o", messages=messages, stream=True))
            assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello there "
        assert len(refused) == 2
        # a client asking itself gets the upstream's refusal, as it would without the proxy
        try:
            client.chat.completions.create(
                model="gpt-4o",
                messages=[{"role": "user", "content": "hi"}],
                stream=True,
                stream_options={"include_usage": True},
            )
            raise AssertionError("the upstream's 400 was not passed on")
        except openai.BadRequestError as error:
            assert "stream_options" in str(error)
        bill = totals(url, key, 3)["bill"]
    assert bill["turns_without_usage"] == 2 and bill["calls"]["turn"]["answers"] == 0
