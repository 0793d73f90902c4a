"""Attacks on the managed `POST /v1/responses`: tenancy, hostile upstream events, bad input,
hidden injected calls, a failing store. Each test states what an attacker tries and shows it fails."""

from __future__ import annotations

import itertools
import json
import re
import socket
import time

import httpx2
import pytest
from starlette.responses import JSONResponse, Response, StreamingResponse

from tests.harness.requests import post, streamed
from tests.harness.responses import (
    answer,
    answering,
    events,
    function_call,
    function_call_output,
    input_items,
    message,
    parse_sse,
    reasoning,
    refs_in_input,
    response,
    usage,
)
from tests.harness.servers import is_responses_create, is_summary_call, scripted, snapshot_answer

HEADERS = {
    "X-Offload-Max-Total-Tokens": "1000",
    "X-Offload-Max-Tool-Message-Tokens": "500",
    "X-Offload-Max-Reload-Tokens": "50000",
}
NEEDLE = "SECRET-OF-TENANT-A 7f3c9e deploy-7 disk quota exceeded"
LOG = "\n".join(
    NEEDLE if i == 377 else f"2024-05-01T12:{i // 60:02d}:{i % 60:02d}Z INFO worker-{i % 7} GET /x/{i} 200"
    for i in range(480)
)
CALL_ID = "call_read_logs_1"
TOOLS = [{"type": "function", "name": "read_logs", "parameters": {"type": "object", "properties": {}}}]


def history(log: str = LOG) -> list[dict]:
    return [
        {"role": "user", "content": "Why did the deploy fail?"},
        function_call("read_logs", {"path": "/var/log/deploy.log"}, call_id=CALL_ID, id="fc_read_logs_1"),
        function_call_output(CALL_ID, log),
        {"role": "user", "content": "Summarise."},
    ]


def outputs_sent(rec) -> list[str]:
    """The outputs of the function_call_output items a recorded request carries."""
    return [
        i["output"] if isinstance(i.get("output"), str) else json.dumps(i.get("output"))
        for i in input_items(rec)
        if i.get("type") == "function_call_output"
    ]


# ---------------------------------------------------------------- 1. whose content can it read?


def offload_as(url: str, upstream, key: str, log: str = LOG) -> str:
    """`key` sends the history with `log`: the ref its namespace stored it under."""
    upstream.handler = scripted(answering(message("ok")))
    r = post(
        url, "/v1/responses", body={"model": "gpt-5", "input": history(log), "tools": TOOLS}, key=key, headers=HEADERS
    )
    assert r.status_code == 200, r.text
    [ref] = refs_in_input(upstream.responses_requests()[-1])
    upstream.requests.clear()
    return ref


def calling(*calls: dict):
    """Round 1: the model calls the injected tools with `calls` (name, arguments); round 2 answers."""
    items = [
        function_call(c["name"], c["arguments"], call_id=f"call_inj_{i}", id=f"fc_inj_{i}") for i, c in enumerate(calls)
    ]
    return scripted(answering(*items, id="resp_b_1"), answering(message("done"), id="resp_b_2"))


def test_another_credential_cannot_reload_or_search_a_ref_by_name(make_proxy, upstream):
    with make_proxy() as url:
        ref_a = offload_as(url, upstream, "sk-tenant-a-000000")
        other = LOG.replace(NEEDLE, "nothing to see").replace("INFO", "WARN")
        # B: its own offloaded output, and A's marker pasted into its input (a leaked transcript)
        marker = f"[offloaded tool result: 9000 tokens, ref={ref_a}]"
        body = {
            "model": "gpt-5",
            "tools": TOOLS,
            "input": [
                *history(other),
                {"role": "user", "content": marker},
                function_call("read_logs", {}, call_id="call_pasted", id="fc_pasted"),
                function_call_output("call_pasted", marker),
            ],
        }
        upstream.handler = calling(
            {"name": "context_reload", "arguments": {"ref": ref_a}},
            {"name": "context_reload", "arguments": {"ref": ref_a, "offset": 370, "limit": 20}},
            {"name": "context_search", "arguments": {"pattern": "SECRET", "ref": ref_a}},
            {"name": "context_search", "arguments": {"pattern": "SECRET"}},
        )
        r = post(url, "/v1/responses", body=body, key="sk-tenant-b-111111", headers=HEADERS)
        assert r.status_code == 200, r.text
        first, second = upstream.responses_requests()
        assert ref_a in json.dumps(first.json())  # A's ref did reach B's model, tools offered
        results = outputs_sent(second)[-4:]
        assert len(results) == 4
        for result in results:
            assert "7f3c9e" not in result and "quota exceeded" not in result, result[:300]
        assert ref_a in results[0] and ref_a in results[2]  # "not available" naming the ref
        # the same ref still reloads for A
        upstream.requests.clear()
        upstream.handler = calling({"name": "context_reload", "arguments": {"ref": ref_a}})
        r = post(
            url,
            "/v1/responses",
            body={"model": "gpt-5", "input": history(), "tools": TOOLS},
            key="sk-tenant-a-000000",
            headers=HEADERS,
        )
        assert r.status_code == 200
        assert outputs_sent(upstream.responses_requests()[1])[-1] == LOG


def test_a_sub_tenant_cannot_reload_its_parents_ref(make_proxy, upstream):
    with make_proxy() as url:
        ref_a = offload_as(url, upstream, "sk-tenant-a-000000")
        upstream.handler = calling({"name": "context_reload", "arguments": {"ref": ref_a}})
        other = LOG.replace(NEEDLE, "nothing").replace("INFO", "DEBUG")
        r = post(
            url,
            "/v1/responses",
            body={"model": "gpt-5", "input": history(other), "tools": TOOLS},
            key="sk-tenant-a-000000",
            headers={**HEADERS, "X-Offload-Tenant": "sub-1"},
        )
        assert r.status_code == 200
        assert "7f3c9e" not in outputs_sent(upstream.responses_requests()[1])[-1]


def reload_rounds(first_id: str, last_id: str):
    """Round 1 (id `first_id`): context_reload of the ref in the input; round 2 (`last_id`): the answer."""

    def first(rec):
        refs = refs_in_input(rec)
        if not refs:
            return answer(rec, message("plain"), id=f"{first_id}_plain")
        return answer(
            rec, function_call("context_reload", {"ref": refs[0]}, call_id="call_r1", id="fc_r1"), id=first_id
        )

    return scripted(first, answering(message("answer"), id=last_id))


def previous_sent(upstream) -> str | None:
    return upstream.responses_requests()[-1].json().get("previous_response_id")


def continue_from(url: str, upstream, previous: str, key: str, wait: float = 0.0, **extra) -> str | None:
    """A small follow-up naming `previous`: the previous_response_id the upstream got."""
    upstream.handler = scripted(answering(message("next")))
    deadline = time.monotonic() + wait
    while True:
        upstream.requests.clear()
        r = post(
            url,
            "/v1/responses",
            body={
                "model": "gpt-5",
                "previous_response_id": previous,
                "input": [{"role": "user", "content": "and then?"}],
                **extra,
            },
            key=key,
            headers=HEADERS,
        )
        assert r.status_code == 200, r.text
        sent = previous_sent(upstream)
        if sent != previous or time.monotonic() >= deadline:  # the mapping is written after the answer
            return sent
        time.sleep(0.05)


@pytest.mark.parametrize("stream", [False, True])
def test_response_id_aliases_are_per_credential(make_proxy, upstream, stream):
    """A's reload rounds map resp_a_1 → resp_a_2. B naming resp_a_1 is not rewritten to A's hidden
    last round, and B's own rounds (which the upstream happens to give the same first id) cannot
    redirect A's alias."""
    a, b = "sk-tenant-a-000000", "sk-tenant-b-111111"
    with make_proxy() as url:
        upstream.handler = reload_rounds("resp_a_1", "resp_a_2")
        r = post(
            url,
            "/v1/responses",
            body={"model": "gpt-5", "input": history(), "tools": TOOLS, "stream": stream},
            key=a,
            headers=HEADERS,
        )
        assert r.status_code == 200 and "resp_a_2" not in r.text and "resp_a_1" in r.text
        assert continue_from(url, upstream, "resp_a_1", a, wait=5) == "resp_a_2"
        assert continue_from(url, upstream, "resp_a_1", b) == "resp_a_1"
        assert continue_from(url, upstream, "resp_a_1", a, headers=None) == "resp_a_2"
        # B's rounds: first id resp_a_1 (same name), last resp_evil, remembered in B's namespace only
        upstream.handler = reload_rounds("resp_a_1", "resp_evil")
        other = LOG.replace(NEEDLE, "b's log").replace("INFO", "NOTE")
        r = post(
            url,
            "/v1/responses",
            body={"model": "gpt-5", "input": history(other), "tools": TOOLS, "stream": stream},
            key=b,
            headers=HEADERS,
        )
        assert r.status_code == 200
        assert continue_from(url, upstream, "resp_a_1", b, wait=5) == "resp_evil"
        assert continue_from(url, upstream, "resp_a_1", a) == "resp_a_2"
        # a sub-tenant of A is another namespace too
        r = post(
            url,
            "/v1/responses",
            body={"model": "gpt-5", "previous_response_id": "resp_a_1", "input": "x"},
            key=a,
            headers={**HEADERS, "X-Offload-Tenant": "sub-1"},
        )
        assert r.status_code == 200 and previous_sent(upstream) == "resp_a_1"


def test_store_false_rounds_leave_no_alias(make_proxy, upstream):
    with make_proxy() as url:
        upstream.handler = reload_rounds("resp_s_1", "resp_s_2")
        r = post(
            url,
            "/v1/responses",
            body={"model": "gpt-5", "input": history(), "tools": TOOLS, "store": False},
            key="sk-tenant-a-000000",
            headers=HEADERS,
        )
        assert r.status_code == 200
        time.sleep(0.3)
        assert continue_from(url, upstream, "resp_s_1", "sk-tenant-a-000000") == "resp_s_1"


def test_an_oversized_or_odd_previous_response_id_goes_up_as_sent(make_proxy, upstream):
    with make_proxy() as url:
        for previous in ("r" * 100_000, "resp_\u0000\n}:chain:x", "../../admin", "*"):
            raw = json.dumps({"model": "gpt-5", "previous_response_id": previous, "input": "hi"}).encode()
            upstream.requests.clear()
            r = post(url, "/v1/responses", body=raw, key="sk-tenant-a-000000", headers=HEADERS)
            assert r.status_code == 200
            assert upstream.responses_requests()[-1].body == raw


# ---------------------------------------------------------------- shared server key

KEY_A, KEY_B = "pk-team-a-secret-0001", "pk-team-b-secret-0002"


def shared_key_tenants(tmp_path):
    path = tmp_path / "tenants.toml"
    path.write_text(f'[tenants.team-a]\napi_keys = ["{KEY_A}"]\n[tenants.team-b]\napi_keys = ["{KEY_B}"]\n')
    return path


def test_shared_key_refuses_stored_response_endpoints_and_never_leaks_credentials(make_proxy, upstream, tmp_path):
    with make_proxy(upstream_api_key="sk-server", tenants_file=shared_key_tenants(tmp_path)) as url:
        h = {"authorization": f"Bearer {KEY_B}"}
        for method, path in (
            ("GET", "responses/resp_a_1"),
            ("DELETE", "responses/resp_a_1"),
            ("GET", "responses/resp_a_1/input_items"),
            ("POST", "responses/resp_a_1/cancel"),
            ("GET", "responses/resp_a_1/"),
            ("GET", "responses/resp_a_1?stream=true"),
            ("GET", "responses%2Fresp_a_1"),
            ("GET", "Responses/resp_a_1"),
            ("GET", "conversations/conv_1"),
            ("GET", "conversations/conv_1/items"),
            ("POST", "conversations"),
            ("GET", "responses"),
        ):
            r = httpx2.request(method, f"{url}/v1/{path}", headers=h)
            assert r.status_code in (400, 403), (method, path, r.status_code)
            assert set(r.json()["error"]) == {"message", "type", "param", "code"}
        assert not upstream.requests
        # the managed route: the proxy key and X-Offload-* never go upstream, the server key does
        upstream.handler = reload_rounds("resp_k_1", "resp_k_2")
        r = post(
            url,
            "/v1/responses",
            body={"model": "gpt-5", "input": history(), "tools": TOOLS},
            key=KEY_A,
            headers={**HEADERS, "x-api-key": KEY_A, "api-key": KEY_A, "X-Offload-Session": "s1"},
        )
        assert r.status_code == 200, r.text
        assert len(upstream.responses_requests()) == 2
        # and the summariser's calls (on /responses, made for a Responses request) the same
        from tests.unit.formats.test_responses_attacks import agent_history

        async def handler(request, rec):
            if is_summary_call(rec):
                return snapshot_answer(rec, "<state_snapshot>so far</state_snapshot>")
            return answer(rec, message("fine"))

        upstream.handler = handler
        items = [i for i in agent_history(11, turns=10) if i.get("type") != "item_reference"]  # refused: shared key
        r = post(
            url,
            "/v1/responses",
            body={"model": "gpt-5", "input": items},
            key=KEY_A,
            headers={**HEADERS, "x-api-key": KEY_A, "X-Offload-Mode": "compress", "X-Offload-Max-Total-Tokens": "2000"},
        )
        assert r.status_code == 200 and "compress" in r.headers["x-offload-action"]
        assert len(upstream.summary_requests()) == 1
        assert len([r for r in upstream.requests if is_responses_create(r) and not is_summary_call(r)]) == 3
        assert upstream.summary_requests()[0].path == "/v1/responses"
        for rec in upstream.requests:
            sent = json.dumps(rec.header_list)
            assert KEY_A not in sent and "x-offload" not in sent.lower()
            assert rec.all("authorization") == ["Bearer sk-server"] and not rec.all("x-api-key")


# ---------------------------------------------------------------- 2. hostile upstream events


def raw_stream(*chunks: bytes, media_type: str = "text/event-stream"):
    """A scripted step answering with these bytes as they are."""
    return lambda rec: StreamingResponse(iter(chunks), media_type=media_type)


def data(event: dict) -> bytes:
    """An event as `data:` only (the `event:` line is optional; a hostile one may carry anything)."""
    return b"data: " + json.dumps(event).encode() + b"\n\n"


def round_one_events(rec, *, ref: str | None = None) -> list[dict]:
    """The events of a round calling context_reload of the input's ref (ids fixed)."""
    ref = ref or refs_in_input(rec)[0]
    return events(
        response(
            function_call("context_reload", {"ref": ref}, call_id="call_r1", id="fc_r1"), id="resp_ev_1", usage=usage()
        )
    )


RELOAD_ROUNDS = re.compile(r": x-offload-reload-rounds: \d+")


def assert_sane_stream(text: str, terminal: str | None = None) -> list[dict]:
    """Well framed (every `event:` line names its data's type, on a line of its own), one terminal
    event and last, sequence numbers strictly increasing ints, contiguous output indexes, and no
    trace of the injected tools."""
    for block in text.split("\n\n"):
        for line in block.split("\n"):
            assert line == "" or line.startswith(("event: ", "data: ")) or RELOAD_ROUNDS.fullmatch(line), repr(
                line[:200]
            )  # the proxy's own comment (reload rounds run) the only other line
    got = parse_sse(text)
    kinds = [e.get("type") for e in got]
    terminals = [k for k in kinds if k in ("response.completed", "response.failed", "response.incomplete")]
    assert len(terminals) == 1 and kinds[-1] == terminals[0], kinds
    if terminal:
        assert terminals == [terminal], (terminals, got[-1])
    numbers = [e["sequence_number"] for e in got]
    assert all(type(n) is int for n in numbers) and all(a < b for a, b in itertools.pairwise(numbers)), numbers
    added = [e["output_index"] for e in got if e.get("type") == "response.output_item.added"]
    assert added == list(range(len(added))), added
    assert "context_reload" not in text and "context_search" not in text
    return got


@pytest.mark.parametrize(
    "hostile",
    [
        {"type": "response.output_text.delta\nevent: response.completed\ndata: {}", "delta": "x"},
        {"type": "x\r\nevent: injected", "delta": "x"},
        {"type": "x\u2028\u0085event: injected"},
        {"type": 5, "sequence_number": "abc"},
        {"type": None, "output_index": True},
        {"no_type": True},
    ],
)
def test_event_types_cannot_inject_sse_lines(make_proxy, upstream, hostile):
    def first(rec):
        evs = round_one_events(rec)
        return raw_stream(*map(data, evs[:2]), data(hostile), *map(data, evs[2:]))(rec)

    upstream.handler = scripted(first, lambda rec: answer(rec, message("final"), id="resp_ev_2"))
    with make_proxy() as url:
        r, text = streamed(
            url,
            "/v1/responses",
            body={"model": "gpt-5", "input": history(), "tools": TOOLS},
            key="sk-tenant-a-000000",
            headers=HEADERS,
        )
    assert r.status_code == 200
    got = assert_sane_stream(text, "response.completed")
    assert got[-1]["response"]["output"][0]["content"][0]["text"] == "final"
    for line in text.split("\n"):
        if line.startswith("event: "):
            assert line[7:].startswith("response.") and line[7:].isprintable(), repr(line)


@pytest.mark.parametrize("first_number", [2**70, -5, 1e308, True, "7", None])
def test_sequence_numbers_stay_increasing_integers(make_proxy, upstream, first_number):
    def first(rec):
        evs = round_one_events(rec)
        evs[0]["sequence_number"] = first_number
        return raw_stream(*map(data, evs))(rec)

    def second(rec):
        evs = events(response(message("final"), id="resp_ev_2", usage=usage()))
        for e in evs:
            e["sequence_number"] = -1  # a later round's numbers never go backwards for the client
        return raw_stream(*map(data, evs))(rec)

    upstream.handler = scripted(first, second)
    with make_proxy() as url:
        r, text = streamed(
            url,
            "/v1/responses",
            body={"model": "gpt-5", "input": history(), "tools": TOOLS},
            key="sk-tenant-a-000000",
            headers=HEADERS,
        )
    assert r.status_code == 200
    assert_sane_stream(text, "response.completed")


@pytest.mark.parametrize(
    "garbage",
    [
        b"data: not json\n\n",
        b"data: [1, 2]\n\n",
        b"data: \xff\xfe\n\n",
        b'data: {"type": "response.output_text.delta"',  # cut mid-event
        b"data: " + b"[" * 5000 + b"\n\n",
    ],
)
@pytest.mark.parametrize("where", ["first", "second"])
def test_garbage_midstream_ends_with_one_failed_event(make_proxy, upstream, garbage, where):
    def good_first(rec):
        return raw_stream(*map(data, round_one_events(rec)))(rec)

    def bad(rec):
        evs = (
            round_one_events(rec, ref="x" * 8)
            if where == "first"
            else events(response(message("final"), id="resp_ev_2"))
        )
        return raw_stream(*map(data, evs[:3]), garbage, *map(data, evs[3:]))(rec)

    upstream.handler = scripted(bad) if where == "first" else scripted(good_first, bad)
    with make_proxy() as url:
        r, text = streamed(
            url,
            "/v1/responses",
            body={"model": "gpt-5", "input": history(), "tools": TOOLS},
            key="sk-tenant-a-000000",
            headers=HEADERS,
        )
    assert r.status_code == 200
    got = assert_sane_stream(text, "response.failed")
    assert got[-1]["response"]["id"] == ("resp_ev_1" if where == "second" else got[0]["response"]["id"])


@pytest.mark.parametrize("stream", [False, True])
def test_a_round_that_never_completes(make_proxy, upstream, stream):
    """The first round ends (connection closed) after its call, without response.completed: the
    call is not run, the client gets one failed terminal event / a 502, never a hang."""

    def first(rec):
        if not rec.json().get("stream"):
            return Response(b'{"id": "resp_ev_1", "output": [', media_type="application/json")
        return raw_stream(*map(data, round_one_events(rec)[:-1]))(rec)

    upstream.handler = scripted(first)
    with make_proxy() as url:
        if stream:
            r, text = streamed(
                url,
                "/v1/responses",
                body={"model": "gpt-5", "input": history(), "tools": TOOLS},
                key="sk-tenant-a-000000",
                headers=HEADERS,
            )
            assert r.status_code == 200
            assert_sane_stream(text, "response.failed")
        else:
            r = post(
                url,
                "/v1/responses",
                body={"model": "gpt-5", "input": history(), "tools": TOOLS},
                key="sk-tenant-a-000000",
                headers=HEADERS,
            )
            assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_error"
    assert len(upstream.responses_requests()) == 1


def test_a_stalled_upstream_stream_times_out_into_failed(make_proxy, upstream):
    import asyncio

    async def stalled(request, rec):
        async def body():
            evs = round_one_events(rec)
            for e in evs[:2]:
                yield data(e)
            await asyncio.sleep(30)

        return StreamingResponse(body(), media_type="text/event-stream")

    upstream.handler = stalled
    with make_proxy(read_timeout=1.0) as url:  # the stream is silent for 30 s: its read timeout ends it
        r, text = streamed(
            url,
            "/v1/responses",
            body={"model": "gpt-5", "input": history(), "tools": TOOLS},
            key="sk-tenant-a-000000",
            headers=HEADERS,
        )
    assert r.status_code == 200
    assert_sane_stream(text, "response.failed")


@pytest.mark.parametrize("stream", [False, True])
def test_a_model_asking_reload_forever_is_bounded(make_proxy, upstream, stream):
    n = {"rounds": 0}

    def forever(rec):
        n["rounds"] += 1
        ref = (refs_in_input(rec) or ["nothing0"])[0]
        return answer(
            rec,
            reasoning("again"),
            function_call("context_reload", {"ref": ref}, call_id=f"call_{n['rounds']}"),
            id=f"resp_f_{n['rounds']}",
        )

    upstream.handler = scripted(forever)
    with make_proxy() as url:
        body = {"model": "gpt-5", "input": history(), "tools": TOOLS}
        h = {"X-Offload-Max-Reload-Rounds": "3"}
        if stream:
            r, text = streamed(url, "/v1/responses", body=body, key="sk-tenant-a-000000", headers={**HEADERS, **h})
            assert_sane_stream(text)
        else:
            r = post(url, "/v1/responses", body=body, key="sk-tenant-a-000000", headers={**HEADERS, **h})
            text = r.text
            assert "context_reload" not in text
        assert r.status_code == 200
    sent = upstream.responses_requests()
    assert len(sent) == 4  # 3 rounds with the tools, then one without
    assert "context_reload" not in json.dumps(sent[-1].json().get("tools"))
    assert all("context_reload" in json.dumps(rec.json()["tools"]) for rec in sent[:3])


@pytest.mark.parametrize(
    "arguments",
    [
        "{" * 100_000,
        json.dumps({"ref": "a" * 5_000_000}),
        "[" * 3000 + "]" * 3000,
        json.dumps({"ref": None, "offset": 1e400}).replace("1e+400", "1e400"),
        '{"ref": "\\ud800"}',
        "null",
        json.dumps({"pattern": "(a+)+$" * 40}),
    ],
)
def test_hostile_arguments_are_answered_to_the_model(make_proxy, upstream, arguments):
    def first(rec):
        return answer(
            rec,
            function_call("context_reload", arguments, call_id="call_h1"),
            function_call("context_search", arguments, call_id="call_h2"),
            id="resp_h_1",
        )

    upstream.handler = scripted(first, answering(message("final"), id="resp_h_2"))
    with make_proxy() as url:
        r = post(
            url,
            "/v1/responses",
            body={"model": "gpt-5", "input": history(), "tools": TOOLS},
            key="sk-tenant-a-000000",
            headers=HEADERS,
        )
    assert r.status_code == 200 and r.json()["output"][0]["content"][0]["text"] == "final"
    results = outputs_sent(upstream.responses_requests()[1])[-2:]
    assert len(results) == 2 and all(0 < len(x) < 2000 for x in results), [x[:200] for x in results]


# ---------------------------------------------------------------- 3. bad input: a clear 400


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


BAD_BODIES = [
    ('{"model": "gpt-5", "input": 5}', "input"),
    ('{"model": "gpt-5", "input": true}', "input"),
    ('{"model": "gpt-5", "input": {"role": "user", "content": "hi"}}', "input"),
    ('{"model": "gpt-5", "input": ["hi", "there"]}', "input[0]"),
    ('{"model": "gpt-5", "input": [null]}', "input[0]"),
    ('{"model": "gpt-5", "input": [{"role": "user", "content": 5}]}', "input[0].content"),
    ('{"model": "gpt-5", "input": [{"role": "user", "content": {"type": "input_text"}}]}', "input[0].content"),
    ('{"model": "gpt-5", "input": [{"role": "user", "content": ["hi"]}]}', "input[0].content[0]"),
    (
        '{"model": "gpt-5", "input": [{"role": "user", "content": [{"type": "input_text", "text": 5}]}]}',
        "input[0].content[0].text",
    ),
    (
        '{"model": "gpt-5", "input": [{"type": "function_call_output", "call_id": 5, "output": "x"}]}',
        "input[0].call_id",
    ),
    (
        '{"model": "gpt-5", "input": [{"type": "function_call_output", "call_id": "c", "output": [1]}]}',
        "input[0].output[0]",
    ),
    (
        '{"model": "gpt-5", "input": [{"type": ["function_call_output"], "call_id": "c", "output": "x"}]}',
        "input[0].type",
    ),
    (
        '{"model": "gpt-5", "input": [{"type": "function_call", "name": "f", "call_id": "c", "arguments": {}}]}',
        "input[0].arguments",
    ),
    ('{"model": "gpt-5", "input": "hi", "tools": {"type": "function"}}', "tools"),
    ('{"model": "gpt-5", "input": "hi", "tools": ["web_search"]}', "tools[0]"),
    ('{"model": "gpt-5", "input": "hi", "stream": "yes"}', "stream"),
    ('{"model": "gpt-5", "input": "hi", "stream": 1}', "stream"),
    ('{"model": "gpt-5", "input": "hi", "store": "false"}', "store"),
    ('{"model": "gpt-5", "input": "hi", "instructions": ["be nice"]}', "instructions"),
    ('{"model": "gpt-5", "input": "hi", "instructions": 5}', "instructions"),
    ('{"model": "gpt-5", "input": "hi", "previous_response_id": 5}', "previous_response_id"),
    ('{"model": 5, "input": "hi"}', "model"),
    ('{"model": "gpt-5", "input": "hi", "include": "reasoning.encrypted_content"}', "include"),
    ('{"model": "gpt-5", "input": ' + nested(200) + "}", None),
    ('{"model": "gpt-5", "input": "hi", "metadata": ' + nested(5000) + "}", None),
    ('{"model": "gpt-5", "input": [{"role": "user", "content": "hi", "x": ' + nested(300) + "}]}", None),
    ('{"model": "gpt-5", "input": "hi", "temperature": 1e400}', None),
    ('{"model": "gpt-5", "input": "hi", "temperature": NaN}', None),
    ('{"model": "gpt-5", "input": "hi"', None),
    ('[{"model": "gpt-5"}]', None),
    ('"hi"', None),
    ("", None),
    ('{"model": "gpt-5", "input": "\xff"}', None),
]


@pytest.mark.parametrize("raw,param", BAD_BODIES)
@pytest.mark.parametrize("headers", [{}, {"X-Offload-Mode": "off"}])
def test_bad_bodies_get_a_400_in_openai_shape(proxy_url, upstream, raw, param, headers):
    content = raw.encode("latin-1") if "\xff" in raw else raw.encode()
    r = post(proxy_url, "/v1/responses", body=content, key="sk-tenant-a-000000", headers={**HEADERS, **headers})
    assert r.status_code == 400, (r.status_code, r.text[:300])
    error = r.json()["error"]
    assert set(error) == {"message", "type", "code", "param"} and error["type"] == "invalid_request_error"
    assert isinstance(error["message"], str) and error["message"]
    assert error["code"] in ("invalid_type", "invalid_json")
    if param:
        assert error["param"] == param, error
    assert not upstream.requests


VERBATIM = [
    # unknown item types, odd keys, key order, whitespace, escapes, big integers, a string input
    b'{"model":"gpt-5","input":"just a string \\u00e9\\ud83d\\ude00","tools":[],"stream":false}',
    (
        b'{ "input" : [ {"type": "future_item_v9", "payload": {"deep": [1, 2.50, 1e2, 123456789012345678901234567890]}},'
        b' {"role": "user", "content": "hi", "zzz": null} ], "model": "gpt-5", "x-unknown": {"a": [true]} }'
    ),
    (
        b'{"model":"gpt-5","input":[{"type":"item_reference","id":"msg_1"},{"id":"rs_1"},'
        b'{"type":"function_call_output","call_id":"c","output":{"type":"screenshot"}}],"text":{"format":{"type":"text"}}}'
    ),
    (
        b'{"model":"gpt-5","input":[{"type":"message","role":"user","content":[{"type":"input_image","image_url":"data:,"}]},'
        b'{"type":"mcp_approval_response","approval_request_id":"a","approve":true}],"instructions":"\\n\\t"}'
    ),
    b'{"model":"gpt-5","conversation":{"id":"conv_1"},"input":"hi","previous_response_id":null,"tools":null}',
]


@pytest.mark.parametrize("raw", VERBATIM)
def test_what_is_not_offloaded_goes_up_byte_for_byte(proxy_url, upstream, raw):
    r = post(proxy_url, "/v1/responses", body=raw, key="sk-tenant-a-000000", headers=HEADERS)
    assert r.status_code == 200, r.text
    [rec] = upstream.responses_requests()
    assert rec.body == raw
    assert rec.headers["content-length"] == str(len(raw))


def test_unknown_items_are_kept_verbatim_and_a_string_input_stays_a_string_beside_an_offload(proxy_url, upstream):
    odd = [
        {"type": "future_item_v9", "payload": {"n": 123456789012345678901234567890, "f": 2.5}},
        {"id": "rs_ref_only"},
        {"type": "message", "role": "critic", "content": [{"type": "weird_part", "x": 1}]},
    ]
    body = {"model": "gpt-5", "tools": TOOLS, "input": [*odd[:2], *history(), odd[2]]}
    r = post(proxy_url, "/v1/responses", body=body, key="sk-tenant-a-000000", headers=HEADERS)
    assert r.status_code == 200
    [rec] = upstream.responses_requests()
    sent = input_items(rec)
    assert len(sent) == len(body["input"]) and refs_in_input(rec)
    assert sent[:2] == odd[:2] and sent[-1] == odd[2]
    assert b"123456789012345678901234567890" in rec.body  # an integer past 64 bits, exact
    upstream.requests.clear()
    big = "word " * 40_000  # a huge string input alone: nothing to offload, still a string
    r = post(
        proxy_url, "/v1/responses", body={"model": "gpt-5", "input": big}, key="sk-tenant-a-000000", headers=HEADERS
    )
    assert r.status_code == 200
    assert upstream.responses_requests()[-1].json()["input"] == big


# ---------------------------------------------------------------- 4. pairing through the proxy


def test_compression_keeps_pairs_and_the_recent_tail_verbatim(proxy_url, upstream):
    from tests.unit.formats.test_responses_attacks import (
        agent_history,
        assert_cut_is_safe,
        links,
    )

    async def handler(request, rec):
        if is_summary_call(rec):  # the summariser
            return snapshot_answer(rec, "<state_snapshot>the story so far</state_snapshot>")
        return answer(rec, message("fine"))

    upstream.handler = handler
    items = agent_history(7, turns=10)
    r = post(
        proxy_url,
        "/v1/responses",
        body={"model": "gpt-5", "input": items, "tools": TOOLS},
        key="sk-tenant-a-000000",
        headers={
            **HEADERS,
            "X-Offload-Mode": "compress",
            "X-Offload-Max-Total-Tokens": "2000",
            "X-Offload-Keep-Recent": "5",
        },
    )
    assert r.status_code == 200, r.text
    assert "compress" in r.headers["x-offload-action"]
    [rec] = [r for r in upstream.responses_requests() if not is_summary_call(r)]
    sent = input_items(rec)
    [at] = [i for i, item in enumerate(sent) if "earlier messages" in json.dumps(item)]
    kept = sent[at + 1 :]
    shape = lambda part: [(i.get("type"), i.get("id"), i.get("call_id")) for i in part]  # noqa: E731
    later_users = 0  # the user messages of the summarised part, kept verbatim right after the summary
    while kept and shape(kept) != shape(items[len(items) - len(kept) :]) and kept[0].get("role") == "user":
        kept, later_users = kept[1:], later_users + 1
    assert later_users >= 1  # the history has several user turns
    tail = [i for i in items[len(items) - len(kept) :]]
    assert shape(kept) == shape(tail)
    assert_cut_is_safe(items, len(items) - len(kept))
    made = set().union(*(links(i)[0] for i in kept))
    assert set().union(*(links(i)[1] for i in kept)) <= made  # no result without its call


# ---------------------------------------------------------------- 5. the client never sees injected calls


def mixed_round(rec):
    ref = refs_in_input(rec)[0]
    return answer(
        rec,
        reasoning("both"),
        function_call("context_reload", {"ref": ref}, call_id="c_inj", id="fc_inj"),
        function_call("read_logs", {"path": "/b"}, call_id="c_client", id="fc_client"),
        id="resp_m_1",
    )


@pytest.mark.parametrize("stream", [False, True])
def test_a_round_mixing_calls_returns_the_clients_call_only(make_proxy, upstream, stream):
    upstream.handler = scripted(mixed_round, answering(message("never")))
    with make_proxy() as url:
        body = {"model": "gpt-5", "input": history(), "tools": TOOLS}
        if stream:
            r, text = streamed(url, "/v1/responses", body=body, key="sk-tenant-a-000000", headers=HEADERS)
            got = assert_sane_stream(text, "response.completed")
            final = got[-1]["response"]
            assert got[0]["response"]["tools"] == TOOLS
        else:
            r = post(url, "/v1/responses", body=body, key="sk-tenant-a-000000", headers=HEADERS)
            text, final = r.text, r.json()
        assert r.status_code == 200
    assert len(upstream.responses_requests()) == 1  # the injected call was not run
    assert [(o["type"], o.get("call_id")) for o in final["output"]] == [
        ("reasoning", None),
        ("function_call", "c_client"),
    ]
    assert final["tools"] == TOOLS
    assert "context_reload" not in text and "context_search" not in text and "c_inj" not in text
    assert refs_in_input(upstream.responses_requests()[0])[0] not in text


# ---------------------------------------------------------------- 6. a failing store or summariser


def closed_port() -> int:
    for port in range(47100, 47200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port  # bound then released: nothing listens there
    raise RuntimeError("no free port in 47100-47199")


@pytest.mark.parametrize("stream", [False, True])
def test_a_dead_store_never_fails_a_responses_request(make_proxy, upstream, stream):
    with make_proxy(redis_url=f"redis://127.0.0.1:{closed_port()}/0", store_timeout=0.3) as url:
        for previous in (None, "resp_prev_1"):
            upstream.requests.clear()
            upstream.handler = scripted(answering(message("fine"), id="resp_ok"))
            body = {"model": "gpt-5", "input": history(), "tools": TOOLS}
            if previous:
                body["previous_response_id"] = previous
            if stream:
                r, text = streamed(url, "/v1/responses", body=body, key="sk-tenant-a-000000", headers=HEADERS)
                assert_sane_stream(text, "response.completed")
            else:
                r = post(url, "/v1/responses", body=body, key="sk-tenant-a-000000", headers=HEADERS)
                assert r.json()["output"][0]["content"][0]["text"] == "fine"
            assert r.status_code == 200
            assert "store unavailable" in r.headers["x-offload-warning"]
            [rec] = upstream.responses_requests()
            assert the_output(rec) == LOG  # the original went through
            assert rec.json()["tools"] == TOOLS  # no reload tools without a store
            assert rec.json().get("previous_response_id") == previous


def the_output(rec) -> str:
    [out] = [i for i in input_items(rec) if i.get("type") == "function_call_output" and i["call_id"] == CALL_ID]
    return out["output"]


def test_a_failing_summariser_never_fails_a_responses_request(proxy_url, upstream):
    from tests.unit.formats.test_responses_attacks import agent_history

    async def handler(request, rec):
        if is_summary_call(rec):
            return JSONResponse({"error": {"message": "boom", "type": "server_error"}}, status_code=500)
        return answer(rec, message("fine"))

    upstream.handler = handler
    items = agent_history(3, turns=10)
    r = post(
        proxy_url,
        "/v1/responses",
        body={"model": "gpt-5", "input": items},
        key="sk-tenant-a-000000",
        headers={**HEADERS, "X-Offload-Mode": "compress", "X-Offload-Max-Total-Tokens": "2000"},
    )
    assert r.status_code == 200 and r.json()["output"][0]["content"][0]["text"] == "fine"
    assert upstream.summary_requests()  # the summariser was asked, and failed
    [rec] = [r for r in upstream.responses_requests() if not is_summary_call(r)]
    assert len(input_items(rec)) == len(items)  # nothing summarised, nothing lost


# ---------------------------------------------------------------- 7. headers


def test_offload_headers_and_client_credentials_go_where_they_should(proxy_url, upstream):
    upstream.handler = reload_rounds("resp_h_1", "resp_h_2")
    r = post(
        proxy_url,
        "/v1/responses",
        body={"model": "gpt-5", "input": history(), "tools": TOOLS},
        key="sk-client-own-key",
        headers={**HEADERS, "X-Offload-Session": "sess-1", "X-Offload-Anything": "x", "OpenAI-Project": "proj_1"},
    )
    assert r.status_code == 200
    recs = upstream.responses_requests()
    assert len(recs) == 2
    for rec in recs:
        assert not [k for k, _ in rec.header_list if k.startswith("x-offload")]
        assert rec.all("authorization") == ["Bearer sk-client-own-key"]  # the client's own key, relayed
        assert rec.headers["openai-project"] == "proj_1"
        assert rec.headers["content-length"] == str(len(rec.body))
    assert r.headers["x-offload-refs"] == "1"


def test_events_and_the_offload_api_stay_per_credential(make_proxy, upstream):
    a, b = "sk-tenant-a-000000", "sk-tenant-b-111111"
    with make_proxy() as url:
        upstream.handler = reload_rounds("resp_e_1", "resp_e_2")
        r = post(
            url,
            "/v1/responses",
            body={"model": "gpt-5", "input": history(), "tools": TOOLS},
            key=a,
            headers={**HEADERS, "X-Offload-Session": "shared-name"},
        )
        assert r.status_code == 200
        [ref_a] = refs_in_input(upstream.responses_requests()[0])

        def listed(key: str) -> list[dict]:
            got = httpx2.get(
                f"{url}/v1/offload/events",
                params={"session": "shared-name"},
                headers={"authorization": f"Bearer {key}"},
                timeout=10,
            )
            assert got.status_code == 200
            return got.json()["data"]

        deadline = time.monotonic() + 5
        while not any(e.get("type") == "reload" or "reload" in json.dumps(e) for e in listed(a)):
            assert time.monotonic() < deadline, listed(a)
            time.sleep(0.05)
        assert listed(b) == []
        own = httpx2.get(f"{url}/v1/offload/{ref_a}", headers={"authorization": f"Bearer {a}"})
        assert own.status_code == 200 and NEEDLE in own.json()["content"]
        other = httpx2.get(f"{url}/v1/offload/{ref_a}", headers={"authorization": f"Bearer {b}"})
        assert other.status_code == 404 and NEEDLE not in other.text
