"""Attacks on the response chains of `POST /v1/responses` (`proxy.offload.records`): the record
first id -> last id, the answers of injected calls the client never saw (carried into its next
request), the chained DELETE, and the small-body fast path.

Each test states what an attacker (or an unlucky client) tries and shows what the proxy does."""

from __future__ import annotations

import json
import os
import signal

import httpx2
import pytest

from tests.harness.requests import post, streamed
from tests.harness.responses import (
    answer,
    answering,
    function_call,
    function_call_output,
    input_items,
    message,
    parse_sse,
    refs_in_input,
)
from tests.harness.servers import RedisProcess, default_handler, scripted

HEADERS = {
    "X-Offload-Max-Total-Tokens": "1000",
    "X-Offload-Max-Tool-Message-Tokens": "500",
    "X-Offload-Max-Reload-Tokens": "50000",
}
NEEDLE = "SECRET-OF-TENANT-A 41d7 disk quota exceeded"
LOG = "\n".join(
    NEEDLE if i == 377 else f"2024-05-01T12:{i // 60:02d}:{i % 60:02d}Z INFO worker-{i % 7} GET /y/{i} 200"
    for i in range(480)
)
CALL_ID = "call_read_logs_1"
TOOLS = [{"type": "function", "name": "read_logs", "parameters": {"type": "object", "properties": {}}}]
A, B = "sk-chain-tenant-a-0000", "sk-chain-tenant-b-1111"


def history(log: str = LOG) -> list[dict]:
    return [
        {"role": "user", "content": "Why did the deploy fail?"},
        function_call("read_logs", {"path": "/var/log/deploy.log"}, call_id=CALL_ID, id="fc_read_logs_1"),
        function_call_output(CALL_ID, log),
        {"role": "user", "content": "Summarise."},
    ]


def mixed(first_id: str, *, last_id: str | None = None):
    """Round 1 (`first_id`): the client's read_logs and context_reload of the input's ref at once.
    With `last_id`, round 1 only reloads and round 2 (`last_id`) is the mixed one."""

    def mixed_round(rec, response_id):
        ref = refs_in_input(rec)[0] if refs_in_input(rec) else "nothing"
        return answer(
            rec,
            function_call("read_logs", {"path": "/b"}, call_id="call_client", id="fc_client"),
            function_call("context_reload", {"ref": ref}, call_id="call_inj", id="fc_inj"),
            id=response_id,
        )

    def reload_only(rec):
        return answer(
            rec,
            function_call("context_reload", {"ref": refs_in_input(rec)[0]}, call_id="call_r1", id="fc_r1"),
            id=first_id,
        )

    if last_id is None:
        return scripted(lambda rec: mixed_round(rec, first_id), answering(message("later")))
    return scripted(reload_only, lambda rec: mixed_round(rec, last_id), answering(message("later")))


def make_mixed(url: str, upstream, first_id: str, *, key: str = A, stream: bool = False, headers=None, **extra) -> dict:
    """`key` sends the history; the model mixes calls; the client's answer (the final response)."""
    upstream.handler = mixed(first_id, last_id=extra.pop("last_id", None))
    body = {"model": "gpt-5", "input": history(), "tools": TOOLS, **extra}
    if stream:
        r, text = streamed(url, "/v1/responses", body=body, key=key, headers={**HEADERS, **(headers or {})})
        got = parse_sse(text)
        assert r.status_code == 200
        final = got[-1]["response"]
    else:
        r = post(url, "/v1/responses", body=body, key=key, headers={**HEADERS, **(headers or {})})
        assert r.status_code == 200, r.text
        final = r.json()
    assert final["id"] == first_id
    assert [(o["type"], o.get("call_id")) for o in final["output"]] == [("function_call", "call_client")]
    assert NEEDLE not in json.dumps(final)
    upstream.requests.clear()
    upstream.handler = default_handler
    return final


def follow(url: str, upstream, key: str = A, headers=None, **state) -> tuple[httpx2.Response, dict]:
    """The client answers its call, continuing `state`: what the proxy answered, what went upstream."""
    upstream.requests.clear()
    r = post(
        url,
        "/v1/responses",
        body={"model": "gpt-5", "tools": TOOLS, "input": [function_call_output("call_client", "no file")], **state},
        key=key,
        headers={**HEADERS, **(headers or {})},
    )
    sent = upstream.responses_requests()
    return r, (sent[-1].json() if sent else {})


def carried(sent: dict) -> list[str]:
    return [i["call_id"] for i in sent.get("input", []) if isinstance(i, dict) and i.get("call_id") == "call_inj"]


# ---------------------------------------------------------------- 1. cross-tenant


@pytest.mark.parametrize("stream", [False, True])
def test_another_credential_or_sub_tenant_never_gets_the_carried_output(make_proxy, upstream, stream):
    """A's injected reload (A's log) waits for A's next request. B naming A's response id, and a
    sub-tenant of A's own credential, get nothing of it, and do not use it up."""
    with make_proxy() as url:
        make_mixed(url, upstream, "resp_x_1", stream=stream)
        for key, headers in ((B, None), (A, {"X-Offload-Tenant": "sub-1"})):
            r, sent = follow(url, upstream, key=key, headers=headers, previous_response_id="resp_x_1")
            assert r.status_code == 200
            assert sent["previous_response_id"] == "resp_x_1" and carried(sent) == []
            assert NEEDLE not in json.dumps(sent) and NEEDLE not in r.text
        r, sent = follow(url, upstream, previous_response_id="resp_x_1")
        assert carried(sent) == ["call_inj"] and NEEDLE in json.dumps(sent)


def test_another_credential_cannot_take_a_conversations_carried_output(make_proxy, upstream):
    with make_proxy() as url:
        make_mixed(url, upstream, "resp_c_1", conversation="conv_shared_name")
        for key, headers in ((B, None), (A, {"X-Offload-Tenant": "sub-1"})):
            for conversation in ("conv_shared_name", {"id": "conv_shared_name"}):
                r, sent = follow(url, upstream, key=key, headers=headers, conversation=conversation)
                assert r.status_code == 200 and carried(sent) == [] and NEEDLE not in json.dumps(sent)
        r, sent = follow(url, upstream, conversation={"id": "conv_shared_name"})  # A's: still there, once
        assert carried(sent) == ["call_inj"] and NEEDLE in json.dumps(sent)
        r, sent = follow(url, upstream, conversation="conv_shared_name")
        assert carried(sent) == []


def test_another_credential_or_sub_tenant_cannot_delete_the_hidden_last_response(make_proxy, upstream):
    with make_proxy() as url:
        make_mixed(url, upstream, "resp_d_1", last_id="resp_d_2")
        for key, headers in ((B, {}), (A, {"X-Offload-Tenant": "sub-1"})):
            upstream.requests.clear()
            r = httpx2.delete(f"{url}/v1/responses/resp_d_1", headers={"authorization": f"Bearer {key}", **headers})
            assert r.status_code == 200
            assert [(q.method, q.path) for q in upstream.requests] == [("DELETE", "/v1/responses/resp_d_1")]
        upstream.requests.clear()
        r = httpx2.delete(f"{url}/v1/responses/resp_d_1", headers={"authorization": f"Bearer {A}"})
        assert [(q.method, q.path) for q in upstream.requests] == [
            ("DELETE", "/v1/responses/resp_d_1"),
            ("DELETE", "/v1/responses/resp_d_2"),
        ]
        assert upstream.requests[1].headers["authorization"] == f"Bearer {A}"


# ---------------------------------------------------------------- 2. where a carried output goes


def test_every_branch_from_the_id_gets_the_output_and_store_false_keeps_nothing(make_proxy, upstream):
    """The record of a response id is not used up: each branch continuing from it needs the output
    (the stored response has the call). A store:false exchange leaves no record."""
    with make_proxy() as url:
        make_mixed(url, upstream, "resp_b_1")
        for _ in range(2):
            r, sent = follow(url, upstream, previous_response_id="resp_b_1")
            assert r.status_code == 200 and carried(sent) == ["call_inj"]
            assert [i["call_id"] for i in sent["input"]] == ["call_inj", "call_client"]  # carried first
        make_mixed(url, upstream, "resp_b_2", store=False)
        r, sent = follow(url, upstream, previous_response_id="resp_b_2")
        assert carried(sent) == [] and sent["previous_response_id"] == "resp_b_2"


def test_a_carried_output_is_never_offloaded_again(make_proxy, upstream):
    """The carried output (30 KB, far over the thresholds) goes up whole; a new large output of the
    same request is offloaded as usual."""
    with make_proxy() as url:
        make_mixed(url, upstream, "resp_n_1")
        other = LOG.replace(NEEDLE, "b").replace("INFO", "WARN")
        r = post(
            url,
            "/v1/responses",
            body={
                "model": "gpt-5",
                "tools": TOOLS,
                "previous_response_id": "resp_n_1",
                "input": [function_call_output("call_client", other), {"role": "user", "content": "go"}],
            },
            key=A,
            headers=HEADERS,
        )
        assert r.status_code == 200 and r.headers["x-offload-action"] == "compact"
        [sent] = upstream.responses_requests()
        inj, own, _ = input_items(sent)
        assert inj["call_id"] == "call_inj" and inj["output"] == LOG
        assert own["call_id"] == "call_client" and own["output"] != other and "ref=" in own["output"]


# ---------------------------------------------------------------- 3. the next request, at once, and failing


def failing(status: int = 500):
    from starlette.responses import JSONResponse

    return scripted(
        lambda rec: JSONResponse(
            {"error": {"message": "overloaded", "type": "server_error", "param": None, "code": None}},
            status_code=status,
        )
    )


@pytest.mark.parametrize("stream", [False, True])
def test_the_record_is_there_when_the_client_has_its_answer(make_proxy, upstream, stream):
    """No waiting: the request sent the moment the answer (or the stream's last event) arrived
    already continues from the last id, with the carried output."""
    with make_proxy() as url:
        for n in range(3):
            make_mixed(url, upstream, f"resp_r_{n}", last_id=f"resp_r_{n}_last", stream=stream)
            _, sent = follow(url, upstream, previous_response_id=f"resp_r_{n}")
            assert sent["previous_response_id"] == f"resp_r_{n}_last" and carried(sent) == ["call_inj"]


def test_a_failed_continuation_can_be_retried_with_a_response_id(make_proxy, upstream):
    with make_proxy() as url:
        make_mixed(url, upstream, "resp_f_1", last_id="resp_f_2")
        upstream.handler = failing()
        r, sent = follow(url, upstream, previous_response_id="resp_f_1")
        assert r.status_code == 500 and carried(sent) == ["call_inj"]
        assert "resp_f_2" not in r.text
        upstream.handler = default_handler
        r, sent = follow(url, upstream, previous_response_id="resp_f_1")
        assert r.status_code == 200 and carried(sent) == ["call_inj"] and sent["previous_response_id"] == "resp_f_2"


# ---------------------------------------------------------------- 4. odd ids


def test_odd_conversation_ids_round_trip_and_oversized_ones_are_not_remembered(make_proxy, upstream):
    """Conversation ids are the client's text (newlines, slashes, dot-segments, NUL, a lone
    surrogate): hashed into the key, never used raw; the record still works. Past 256 characters
    nothing is remembered and the request goes up as sent."""
    with make_proxy() as url:
        for n, conversation in enumerate(
            ("conv\n/../../x", "conv_\udfff\ud800", "conv\u0000chain:x", "../responses/resp_x", "\u202e\ufeffconv")
        ):
            make_mixed(url, upstream, f"resp_o_{n}", conversation=conversation)
            r, sent = follow(url, upstream, conversation=f"{conversation} ")  # another id: nothing
            assert r.status_code == 200 and carried(sent) == []
            r, sent = follow(url, upstream, conversation=conversation)
            assert r.status_code == 200 and carried(sent) == ["call_inj"] and sent["conversation"] == conversation
        make_mixed(url, upstream, "resp_o_big", conversation="c" * 257)
        r, sent = follow(url, upstream, conversation="c" * 257)
        assert r.status_code == 200 and carried(sent) == [] and sent["conversation"] == "c" * 257


def test_a_response_id_cannot_name_a_conversations_record_of_another_tenant(make_proxy, upstream):
    """Conversation records live under "conversation\\0{id}": B naming that as a response id reads
    nothing (another namespace)."""
    with make_proxy() as url:
        make_mixed(url, upstream, "resp_k_1", conversation="conv_k")
        r, sent = follow(url, upstream, key=B, previous_response_id="conversation\u0000conv_k")
        assert r.status_code == 200 and carried(sent) == [] and NEEDLE not in json.dumps(sent)
        r, sent = follow(url, upstream, conversation="conv_k")
        assert carried(sent) == ["call_inj"]


@pytest.mark.parametrize(
    ("path", "chained"),
    [
        ("responses/resp_p_1%2F..%2Fresp_p_2", False),
        ("responses/%2e%2e", False),
        ("responses/resp_p_1/", False),
        ("responses//resp_p_1", False),
        ("responses/resp_p_1/input_items", False),
        ("responses/resp_p_1?x=1#y", True),
        ("responses/resp%5Fp%5F1", True),
    ],
)
def test_delete_paths_only_chain_the_exact_id(make_proxy, upstream, path, chained):
    """Only `DELETE /v1/responses/{first id}` (percent-encoded or with a query, the same id)
    deletes the hidden last response too; a dot-segment is refused before anything goes upstream."""
    with make_proxy() as url:
        make_mixed(url, upstream, "resp_p_1", last_id="resp_p_2")
        r = httpx2.delete(f"{url}/v1/{path}", headers={"authorization": f"Bearer {A}"})
        assert r.status_code in (200, 400, 404)
        if ".." in path or "%2e" in path:
            assert r.status_code == 400 and not upstream.requests
        assert ("/v1/responses/resp_p_2" in [q.path for q in upstream.requests]) is chained


def test_a_delete_the_upstream_refuses_chains_nothing(make_proxy, upstream):
    from starlette.responses import JSONResponse

    with make_proxy() as url:
        make_mixed(url, upstream, "resp_q_1", last_id="resp_q_2")

        async def refuse(request, rec):
            return JSONResponse({"error": {"message": "not found"}}, status_code=404)

        upstream.handler = refuse
        r = httpx2.delete(f"{url}/v1/responses/resp_q_1", headers={"authorization": f"Bearer {A}"})
        assert r.status_code == 404 and [q.path for q in upstream.requests] == ["/v1/responses/resp_q_1"]


# ---------------------------------------------------------------- 5. a store failing while the chain is settled


@pytest.mark.parametrize(("stream", "how"), [(False, "kill"), (True, "kill"), (False, "stop"), (True, "stop")])
def test_a_store_dying_before_the_chain_is_settled_never_fails_the_request(make_proxy, upstream, stream, how):
    """Redis dies (or hangs) between the offload and the end of the last round: running the
    injected call and remembering the chain both fail; the client still gets its call, soon, and
    its next request goes up as sent."""
    redis = RedisProcess().start()
    try:
        # a store timeout no healthy Redis reaches on a loaded machine; a stopped one reaches it
        with make_proxy(redis_url=redis.url, store_timeout=2.0) as url:

            def mixed_round_then_die(rec):
                if how == "kill":
                    redis.proc.kill()
                    redis.proc.wait()
                else:
                    os.kill(redis.proc.pid, signal.SIGSTOP)
                return answer(
                    rec,
                    function_call("read_logs", {"path": "/b"}, call_id="call_client", id="fc_client"),
                    function_call("context_reload", {"ref": refs_in_input(rec)[0]}, call_id="call_inj", id="fc_inj"),
                    id="resp_z_1",
                )

            upstream.handler = scripted(mixed_round_then_die)
            body = {"model": "gpt-5", "input": history(), "tools": TOOLS}
            if stream:
                r, text = streamed(url, "/v1/responses", body=body, key=A, headers=HEADERS)
                got = parse_sse(text)
                final = got[-1]["response"]
                assert got[-1]["type"] == "response.completed"
            else:
                r = post(url, "/v1/responses", body=body, key=A, headers=HEADERS)
                final = r.json()
            assert r.status_code == 200 and final["id"] == "resp_z_1"
            assert [o.get("call_id") for o in final["output"]] == ["call_client"]
            upstream.handler = default_handler
            r, sent = follow(url, upstream, previous_response_id="resp_z_1")
            assert r.status_code == 200 and sent["previous_response_id"] == "resp_z_1" and carried(sent) == []
    finally:
        if redis.proc and redis.proc.poll() is None:
            os.kill(redis.proc.pid, signal.SIGCONT)
        redis.stop()


# ---------------------------------------------------------------- 6. the small-body fast path


SMALL = [
    [{"role": "user", "content": "hi"}],
    [{"role": "user", "content": "日本語のテキスト🙂" * 8}],
    [function_call("read_logs", {}, call_id="c_s", id="fc_s"), function_call_output("c_s", "x" * 380)],
    [function_call("read_logs", {}, call_id="c_u", id="fc_u"), function_call_output("c_u", "\u0000\ud800🙂" * 25)],
    [{"role": "user", "content": "[offloaded tool result: 9 tokens, ref: abc]"}],
]
SMALL_LIMITS = {"X-Offload-Max-Total-Tokens": "2000", "X-Offload-Max-Tool-Message-Tokens": "1000"}


@pytest.mark.parametrize("items", SMALL)
def test_a_small_body_is_treated_as_the_pipeline_would(proxy_url, upstream, items):
    """The same small body without and with `ref=` (in metadata, which nothing reads): the same
    headers, the same bytes upstream (raw, not re-encoded), no reload tools, nothing offloaded."""
    got = []
    for metadata in ({}, {"metadata": {"k": "ref="}}):
        body = {"model": "gpt-5", "input": items, **metadata}
        try:
            raw = json.dumps(body, ensure_ascii=False).encode()  # UTF-8: the most tokens for the bytes
        except UnicodeEncodeError:  # a lone surrogate: only as an escape
            raw = json.dumps(body).encode()
        assert len(raw) <= 1000
        upstream.requests.clear()
        r = post(proxy_url, "/v1/responses", body=raw, key=A, headers={**HEADERS, **SMALL_LIMITS})
        assert r.status_code == 200
        [sent] = upstream.responses_requests()
        assert sent.body == raw and "tools" not in sent.json()
        got.append({k: v for k, v in r.headers.items() if k.startswith("x-offload")})
    assert got[0] == got[1] and got[0]["x-offload-action"] == "none" and got[0]["x-offload-refs"] == "0"
