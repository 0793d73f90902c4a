"""Attacks on the Anthropic Messages API of the proxy (`POST /v1/messages`, `…/count_tokens`):
hostile and malformed bodies, credentials and namespaces, paths and upstreams, an upstream
that misbehaves. Every bad input gets an Anthropic-shaped 4xx, never a 500 nor a silent change."""

from __future__ import annotations

import json
import uuid

import httpx2
import pytest

from proxy.formats.messages import with_caching
from tests.e2e.test_anthropic_compression import (
    INLINE,
    SNAPSHOT,
    SYSTEM,
    conversation,
    tool_pairs_whole,
)
from tests.harness.anthropic import answer, message, parse_sse, text, tool_use
from tests.harness.requests import post
from tests.harness.servers import scripted

MODEL = "claude-sonnet-4-5"
HEADERS = {
    "X-Offload-Max-Total-Tokens": "1000",
    "X-Offload-Max-Tool-Message-Tokens": "500",
    "anthropic-version": "2023-06-01",
}
BIG = "\n".join(f"line {i}: " + "lorem ipsum dolor sit amet " * 3 for i in range(600))


def key() -> str:
    return f"sk-ant-attack-{uuid.uuid4().hex}"


def assert_anthropic_error(r: httpx2.Response, status: int) -> dict:
    assert r.status_code == status, (r.status_code, r.text[:500])
    body = r.json()
    assert set(body) == {"type", "error"} and body["type"] == "error", body
    assert set(body["error"]) == {"type", "message"} and body["error"]["message"], body
    return body["error"]


def base(messages, **extra) -> dict:
    return {"model": MODEL, "max_tokens": 64, "messages": messages, **extra}


BAD_BODIES = [
    ("messages-string", base("hello")),
    ("messages-object", base({"role": "user"})),
    ("message-number", base([1])),
    ("message-null", base([None])),
    ("role-number", base([{"role": 1, "content": "x"}])),
    ("content-number", base([{"role": "user", "content": 5}])),
    ("content-object", base([{"role": "user", "content": {"type": "text", "text": "x"}}])),
    ("block-number", base([{"role": "user", "content": [1]}])),
    ("block-null", base([{"role": "user", "content": [None]}])),
    ("block-list", base([{"role": "user", "content": [[{"type": "text", "text": "x"}]]}])),
    ("block-type-number", base([{"role": "user", "content": [{"type": 3, "text": "x"}]}])),
    ("block-text-list", base([{"role": "user", "content": [{"type": "text", "text": ["x"]}]}])),
    (
        "tool-result-number",
        base([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": 5}]}]),
    ),
    (
        "tool-result-object",
        base(
            [
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t", "content": {"type": "text", "text": "x"}}],
                }
            ]
        ),
    ),
    (
        "tool-result-inner-number",
        base([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [1]}]}]),
    ),
    (
        "tool-result-inner-text-number",
        base(
            [
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": 5}]}],
                }
            ]
        ),
    ),
    (
        "tool-use-id-number",
        base([{"role": "assistant", "content": [{"type": "tool_use", "id": 5, "name": "x", "input": {}}]}]),
    ),
    ("private-part", base([{"role": "user", "content": "x", "x-offload-part": 1}])),
    ("private-summary", base([{"role": "user", "content": "x", "x-offload-summary": True}])),
    ("stream-string", base([{"role": "user", "content": "x"}], stream="true")),
    ("stream-number", base([{"role": "user", "content": "x"}], stream=1)),
    ("system-number", base([{"role": "user", "content": "x"}], system=5)),
    ("system-block-number", base([{"role": "user", "content": "x"}], system=[5])),
    ("tools-object", base([{"role": "user", "content": "x"}], tools={"name": "x"})),
    ("tools-number-entry", base([{"role": "user", "content": "x"}], tools=[5])),
    ("model-number", {**base([{"role": "user", "content": "x"}]), "model": 5}),
    ("body-array", [base([{"role": "user", "content": "x"}])]),
    (
        "deep",
        base(
            [{"role": "user", "content": [{"type": "text", "text": "x", "extra": json.loads("[" * 300 + "]" * 300)}]}]
        ),
    ),
]


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens", "/v1/messages?beta=true"])
@pytest.mark.parametrize("name,body", BAD_BODIES, ids=[n for n, _ in BAD_BODIES])
def test_bad_bodies_are_anthropic_400s(proxy_url, upstream, name, body, path):
    r = post(proxy_url, path, body=body, key=key(), headers=HEADERS)
    assert_anthropic_error(r, 400)
    assert not upstream.requests


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{",
        b"not json",
        b"\xff\xfe",
        b'{"messages": [}',
        b"null",
        b"1e400",
        b'{"model": NaN}',
        b'{"a": "\\ud800"',
        b"[" * 5000 + b"]" * 5000,
    ],
)
def test_unparsable_bodies(proxy_url, upstream, raw):
    assert_anthropic_error(post(proxy_url, "/v1/messages", body=raw, key=key(), headers=HEADERS), 400)
    assert not upstream.requests


def shape(messages: list) -> list:
    """Each message's role and block types, in order."""
    return [
        (
            m.get("role"),
            [b.get("type") if isinstance(b, dict) else type(b).__name__ for b in m["content"]]
            if isinstance(m.get("content"), list)
            else type(m.get("content")).__name__,
        )
        for m in messages
    ]


def odd_history() -> list:
    """A history the proxy must offload in, full of shapes it must carry through unchanged."""
    big = {"type": "tool_result", "tool_use_id": "toolu_a", "content": BIG, "cache_control": {"type": "ephemeral"}}
    return [
        {"role": "system", "content": "Environment: linux"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}},
                {"type": "mystery_block", "payload": {"n": 10**30}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_a", "name": "Bash", "input": {"c": 1}},
                {"type": "tool_use", "id": "toolu_b", "name": "Bash", "input": "raw"},
                {"type": "tool_use", "name": "NoId", "input": None},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "before"},
                big,
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": [{"type": "text", "text": BIG + "B"}, {"type": "text", "text": "tail"}],
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": [
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
                    ],
                },
                {"type": "tool_result", "tool_use_id": "missing", "is_error": True, "content": []},
                {"type": "tool_result", "content": BIG + "C"},
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": None},
                {"type": "text", "text": "<system-reminder>after</system-reminder>"},
            ],
        },
        {"role": "assistant", "content": "ok"},
        {"role": "system", "content": [{"type": "text", "text": "mid system"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": BIG + "D"}] * 3},
        {"role": "assistant", "content": []},
        {"role": "user", "content": "last \ud83d question"},
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_odd_histories_keep_their_shape(proxy_url, upstream, stream):
    upstream.handler = scripted(lambda rec: answer(rec, message(text("fine"))))
    sent = odd_history()
    # Room for what compaction leaves (its odd 4-byte image is billed as an unreadable one: 1,399 tokens), so
    # that the history is compacted, not summarised
    r = post(
        proxy_url,
        "/v1/messages",
        body=base(sent, stream=stream, tools=[{"name": "Bash", "input_schema": {"type": "object"}}]),
        key=key(),
        headers={**HEADERS, "X-Offload-Max-Total-Tokens": "3000"},
    )
    assert r.status_code == 200, r.text[:500]
    assert r.headers["x-offload-action"] != "none"
    [rec] = upstream.messages_requests()
    got = rec.json()["messages"]
    assert shape(got) == shape(sent)
    assert got[0] == sent[0] and got[1] == sent[1] and got[2] == sent[2] and got[5] == sent[5]
    assert got[3]["content"][0] == sent[3]["content"][0]
    assert got[3]["content"][-1] == sent[3]["content"][-1]
    assert got[3]["content"][1]["cache_control"] == {"type": "ephemeral"}
    assert [b.get("tool_use_id") for b in got[3]["content"]] == [b.get("tool_use_id") for b in sent[3]["content"]]
    assert got[-1] == sent[-1]
    assert got[3]["content"][1]["content"].startswith("[offloaded tool result")
    assert len(json.dumps(got[3]["content"][1])) < len(json.dumps(sent[3]["content"][1])) // 4


def test_count_tokens_of_odd_histories(proxy_url, upstream):
    upstream.handler = scripted(lambda rec: answer(rec, message(text("fine"))))
    upstream.handler = lambda request, rec: _count(rec)
    r = post(proxy_url, "/v1/messages/count_tokens", body=base(odd_history()), key=key(), headers=HEADERS)
    assert r.status_code == 200, r.text[:500]
    [rec] = [q for q in upstream.requests if q.path.endswith("/count_tokens")]
    assert shape(rec.json()["messages"]) == shape(odd_history())


async def _count(rec):
    from tests.harness.anthropic import count_answer

    return count_answer(rec)


OAUTH_BETA = "oauth-2025-04-20"


def test_an_oauth_token_is_checked_the_way_the_api_accepts_it(proxy_url, upstream):
    """Claude Code on a subscription sends `Authorization: Bearer <oauth token>` with
    `anthropic-beta: oauth-2025-04-20`; the API refuses such a token without the beta (401).
    The proxy's one-time check of a new credential (`GET /v1/models`) carries the beta too, so
    the first request of an OAuth client is offloaded like any other."""

    async def handler(request, rec):
        if (
            rec.method == "GET"
            and rec.path.endswith("/v1/models")
            and OAUTH_BETA not in rec.headers.get("anthropic-beta", "")
        ):
            return _json(
                {
                    "type": "error",
                    "error": {
                        "type": "authentication_error",
                        "message": "OAuth authentication is currently not supported.",
                    },
                },
                401,
            )
        return await default(request, rec)

    from tests.harness.servers import default_handler as default

    upstream.handler = handler
    token = f"sk-ant-oat01-{uuid.uuid4().hex}"
    sent = odd_history()
    r = httpx2.post(
        f"{proxy_url}/v1/messages",
        content=json.dumps(base(sent)),
        timeout=20,
        headers={
            **HEADERS,
            "authorization": f"Bearer {token}",
            "content-type": "application/json",
            "anthropic-beta": f"claude-code-20250219,{OAUTH_BETA}",
        },
    )
    assert r.status_code == 200, r.text[:300]
    assert r.headers["x-offload-action"].startswith("compact") and int(r.headers["x-offload-refs-created"]) > 0
    [check] = [q for q in upstream.requests if q.method == "GET"]
    assert check.headers["authorization"] == f"Bearer {token}"


# -- an upstream that misbehaves ------------------------------------------------------------


def the_ref(rec) -> str:
    from proxy.core.texts import REF_RE

    return REF_RE.findall(json.dumps(rec.json()["messages"]))[0]


def reload_first(then):
    """Round 1: the model reloads the first ref it sees; round 2: `then(rec)`."""

    def first(rec):
        return answer(
            rec, message(text("Let me look."), tool_use("context_reload", {"ref": the_ref(rec)}, id="toolu_reload_x"))
        )

    return scripted(first, then)


def sse(*chunks: bytes):
    from starlette.responses import StreamingResponse

    return StreamingResponse(iter(chunks), media_type="text/event-stream")


def ev(kind: str, **data) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def history_to_offload() -> list:
    return [
        {"role": "user", "content": "Run it."},
        {"role": "assistant", "content": [tool_use("Bash", {"c": "x"}, id="toolu_big")]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_big", "content": BIG}]},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "What did it say?"},
    ]


BASH = [{"name": "Bash", "input_schema": {"type": "object"}}]


def test_a_reload_round_answered_with_html(proxy_url, upstream):
    from starlette.responses import HTMLResponse

    upstream.handler = reload_first(lambda rec: HTMLResponse("<html>bad gateway</html>"))
    error = assert_anthropic_error(
        post(proxy_url, "/v1/messages", body=base(history_to_offload(), tools=BASH), key=key(), headers=HEADERS), 502
    )
    assert error["type"] == "api_error"


@pytest.mark.parametrize("second", ["cut", "error", "html", "500", "out-of-order", "no-delta"])
def test_a_streamed_reload_round_that_misbehaves(proxy_url, upstream, second):
    def then(rec):
        from starlette.responses import HTMLResponse, JSONResponse

        start = ev(
            "message_start",
            message={
                "id": "msg_2",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": MODEL,
                "usage": {"input_tokens": 7, "output_tokens": 1},
            },
        )
        if second == "cut":
            return sse(
                start,
                ev("content_block_start", index=0, content_block={"type": "text", "text": ""}),
                ev("content_block_delta", index=0, delta={"type": "text_delta", "text": "half"}),
            )
        if second == "error":
            return sse(start, ev("error", error={"type": "overloaded_error", "message": "Overloaded"}))
        if second == "html":
            return HTMLResponse("<html>oops</html>")
        if second == "500":
            return JSONResponse({"type": "error", "error": {"type": "api_error", "message": "boom"}}, 500)
        if second == "out-of-order":
            return sse(
                ev("content_block_delta", index=0, delta={"type": "text_delta", "text": "early"}),
                start,
                ev("content_block_start", index=0, content_block={"type": "text", "text": ""}),
                ev("content_block_stop", index=0),
                ev("content_block_stop", index=5),
                ev("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 3}),
                ev("message_stop"),
            )
        return sse(
            start,
            ev("content_block_start", index=0, content_block={"type": "text", "text": ""}),
            ev("content_block_stop", index=0),
            ev("message_stop"),
        )

    upstream.handler = reload_first(then)
    r = post(
        proxy_url, "/v1/messages", body=base(history_to_offload(), tools=BASH, stream=True), key=key(), headers=HEADERS
    )
    assert r.status_code == 200
    got = parse_sse(r.content)
    kinds = [e["type"] for e in got]
    assert kinds.count("message_start") == 1 and kinds[0] == "message_start"
    assert not any(e.get("content_block", {}).get("name") == "context_reload" for e in got)
    if second in ("out-of-order", "no-delta"):
        assert kinds[-2:] == ["message_delta", "message_stop"] and "error" not in kinds
        assert got[-2]["usage"]["input_tokens"] >= 7
    else:
        assert kinds[-1] == "error" and "message_stop" not in kinds, kinds
        assert set(got[-1]["error"]) == {"type", "message"}
    blocks = [e for e in got if e["type"].startswith("content_block")]
    starts = [e["index"] for e in blocks if e["type"] == "content_block_start"]
    assert starts == list(range(len(starts)))
    for e in blocks:  # every event of a block carries an index the client was told about
        assert e["index"] in starts or e["type"] != "content_block_start"


# -- paths, upstreams and errors before the route ---------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/v1/messages/./count_tokens",
        "/v1/messages/%2e%2e/files",
        "/v1/messages/batches/%252e%252e%252fx",
        "/v1/messages/batches/..%5Cfiles",
        "/v1/messages/batches/x;/..",
        "/v1/messages/.%2e",
    ],
)
def test_relayed_message_paths_stay_under_v1(proxy_url, upstream, path):
    from tests.harness import rawhttp

    r = rawhttp.send(proxy_url, "GET", path, {**HEADERS, "x-api-key": key()})
    assert r.status == 400, (r.status, r.body[:300])
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"
    assert not upstream.requests


def test_errors_before_the_route_are_anthropic_shaped(make_proxy, upstream):
    with make_proxy(max_body_bytes=2000, body_timeout=0.5) as url:
        too_big = post(
            url, "/v1/messages", body=base([{"role": "user", "content": "x" * 5000}]), key=key(), headers=HEADERS
        )
        assert assert_anthropic_error(too_big, 413)["type"] == "request_too_large"

        def slow():
            yield b'{"model": "x", '
            import time

            time.sleep(2)
            yield b'"messages": []}'

        stalled = httpx2.post(
            f"{url}/v1/messages/count_tokens",
            content=slow(),
            timeout=20,
            headers={"x-api-key": key(), "content-type": "application/json"},
        )
        assert assert_anthropic_error(stalled, 408)["type"] == "timeout_error"
        anonymous = httpx2.post(f"{url}/v1/messages?beta=true", json={}, timeout=20)
        assert assert_anthropic_error(anonymous, 401)["type"] == "authentication_error"
    assert not upstream.requests


def test_shared_anthropic_key_refuses_batches(make_proxy, upstream, tmp_path):
    tenants = tmp_path / "tenants.toml"
    tenants.write_text('[tenants.a]\napi_keys = ["pk-tenant-a-0123456789"]\n')
    with make_proxy(anthropic_api_key="sk-ant-operator-key", tenants_file=str(tenants)) as url:
        for method, path in [
            ("GET", "/v1/messages/batches"),
            ("POST", "/v1/messages/batches"),
            ("GET", "/v1/messages/batches/msgbatch_1/results"),
            ("GET", "/v1/files"),
            ("DELETE", "/v1/messages/batches/msgbatch_1"),
        ]:
            r = httpx2.request(
                method,
                f"{url}{path}",
                timeout=20,
                headers={"x-api-key": "pk-tenant-a-0123456789", "anthropic-version": "2023-06-01"},
            )
            assert assert_anthropic_error(r, 403)["type"] == "permission_error", path
        r = post(
            url,
            "/v1/messages",
            body=base([{"role": "user", "content": "hi"}]),
            key="pk-tenant-a-0123456789",
            headers={**HEADERS, "X-Offload-Upstream": "https://evil.example"},
        )
        assert_anthropic_error(r, 400)
    assert not upstream.requests


def test_thousands_of_tool_results_in_one_message(proxy_url, upstream):
    n = 3000
    chunk = "\n".join(f"row {j}: " + "alpha beta gamma delta " * 4 for j in range(40))
    calls = [{"type": "tool_use", "id": f"toolu_{i}", "name": "Bash", "input": {"i": i}} for i in range(n)]
    results = [
        {
            "type": "tool_result",
            "tool_use_id": f"toolu_{i}",
            "content": f"{i}\n{chunk}" if i % 10 == 0 else f"short {i}",
        }
        for i in range(n)
    ]
    sent = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": calls},
        {"role": "user", "content": [*results, {"type": "text", "text": "all done"}]},
        {"role": "user", "content": "and?"},
    ]
    r = post(proxy_url, "/v1/messages", body=base(sent, tools=BASH), key=key(), headers=HEADERS)
    assert r.status_code == 200, r.text[:300]
    assert r.headers["x-offload-action"].startswith("compact"), dict(r.headers)
    [rec] = upstream.messages_requests()
    got = rec.json()["messages"]
    assert shape(got) == shape(sent) and got[1] == sent[1]
    assert [b.get("tool_use_id") for b in got[2]["content"]] == [b.get("tool_use_id") for b in sent[2]["content"]]


# -- summaries that go wrong, compression around odd messages ----------------------------------


@pytest.fixture
def _fresh_summaries(monkeypatch):
    from proxy.core import compression
    from proxy.offload import records as summary_memo
    from proxy.offload import summaries

    monkeypatch.setattr(summary_memo, "_records", {})
    monkeypatch.setattr(summaries, "_seen", compression.SeenPrefixes())


GARBAGE = {
    "html": lambda: __import__("starlette.responses", fromlist=["HTMLResponse"]).HTMLResponse("<html>hi</html>"),
    "content-string": lambda: _json({"type": "message", "content": "a snapshot?", "usage": {}}),
    "content-null": lambda: _json({"type": "message", "content": None}),
    "tool-use-only": lambda: _json(message(tool_use("bash", {"cmd": "ls"}))),
    "empty-text": lambda: _json(message(text(""))),
    "usage-garbage": lambda: _json({**message(text(SNAPSHOT)), "usage": {"input_tokens": "many", "output_tokens": -5}}),
    "array": lambda: _json([1, 2]),
    "429": lambda: _json({"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}, 429),
}


def _json(value, status: int = 200):
    from starlette.responses import JSONResponse

    return JSONResponse(value, status_code=status)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kind", list(GARBAGE))
def test_a_garbage_summary_never_fails_the_request(proxy_url, upstream, _fresh_summaries, kind, stream):
    from tests.harness.servers import is_summary_call

    async def handler(request, rec):
        if is_summary_call(rec):
            return GARBAGE[kind]()
        return answer(rec, message(text("Nearly there.")))

    upstream.handler = handler
    sent = conversation(8)
    r = post(
        proxy_url,
        "/v1/messages",
        body=base(sent, system=SYSTEM, stream=stream),
        key=key(),
        headers={**HEADERS, **INLINE},
    )
    assert r.status_code == 200, r.text[:300]
    if stream:
        assert [e["type"] for e in parse_sse(r.content)][-1] == "message_stop"
    else:
        assert r.json()["content"][0]["text"] == "Nearly there."
    assert upstream.summary_requests()
    got = upstream.messages_requests()[-1].json()["messages"]
    if kind == "usage-garbage":  # a snapshot with unreadable usage is still a snapshot
        assert SNAPSHOT in json.dumps(got) and "compress" in r.headers["x-offload-action"]
    else:
        assert got == sent  # fail-open: as sent


def test_compression_around_system_messages(proxy_url, upstream, _fresh_summaries):
    """Claude Code's role "system" messages inside `messages` are kept verbatim and in order."""
    from tests.harness.servers import is_summary_call, snapshot_answer

    async def handler(request, rec):
        if is_summary_call(rec):
            return snapshot_answer(rec, SNAPSHOT, usage=(300, 40))
        return answer(rec, message(text("Nearly there.")))

    upstream.handler = handler
    sent = conversation(8)
    notes = [{"role": "system", "content": f"note {i}"} for i in range(3)]
    sent = [sent[0], notes[0], *sent[1:5], notes[1], *sent[5:], notes[2]]
    r = post(proxy_url, "/v1/messages", body=base(sent, system=SYSTEM), key=key(), headers={**HEADERS, **INLINE})
    assert r.status_code == 200, r.text[:300]
    assert "compress" in r.headers["x-offload-action"]
    got = upstream.messages_requests()[-1].json()["messages"]
    assert len(got) < len(sent)
    assert [m for m in got if m["role"] == "system"] == notes
    assert got[-1] == notes[2] and got[-2] == sent[-2]
    tool_pairs_whole(got)
    assert SNAPSHOT in json.dumps(got)


@pytest.mark.parametrize("status", [400, 401, 429, 500, 529])
def test_count_tokens_upstream_errors_are_relayed(proxy_url, upstream, status):
    error = {"type": "error", "error": {"type": "api_error", "message": f"status {status}"}}

    async def handler(request, rec):
        if rec.path.endswith("/count_tokens"):
            return _json(error, status)
        from tests.harness.servers import default_handler

        return await default_handler(request, rec)

    upstream.handler = handler
    r = post(
        proxy_url, "/v1/messages/count_tokens", body=base(history_to_offload(), tools=BASH), key=key(), headers=HEADERS
    )
    assert r.status_code == status and r.json() == error
    assert r.headers["x-offload-action"].startswith("compact")


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
@pytest.mark.parametrize("stream", [False, True])
def test_an_unreachable_anthropic_upstream(make_proxy, upstream, path, stream):
    with make_proxy(anthropic_upstream="http://127.0.0.1:9", connect_timeout=1) as url:
        r = post(url, path, body=base(history_to_offload(), tools=BASH, stream=stream), key=key(), headers=HEADERS)
        assert assert_anthropic_error(r, 502)["type"] == "api_error"


@pytest.mark.parametrize(
    "tool",
    [
        {"name": "context_reload", "input_schema": {"type": "object"}},
        {"type": "function", "function": {"name": "context_search"}},
        {"type": "custom", "name": "context_search", "input_schema": {"type": "object"}},
    ],
)
def test_a_client_tool_named_like_a_reload_tool(proxy_url, upstream, tool):
    """The client's own context_reload/context_search: nothing offloaded nor injected, its calls
    reach it; the request as sent, but for the prompt caching the proxy adds (`--cache-control auto`)."""
    upstream.handler = scripted(
        lambda rec: answer(rec, message(tool_use(tool.get("name") or "context_search", {"ref": "abcdef"})))
    )
    sent = base(history_to_offload(), tools=[*BASH, tool])
    r = post(proxy_url, "/v1/messages", body=sent, key=key(), headers=HEADERS)
    assert r.status_code == 200 and r.json()["stop_reason"] == "tool_use"
    assert [b["type"] for b in r.json()["content"]] == ["tool_use"]
    assert r.headers["x-offload-action"] == "none" and r.headers.get("x-offload-warning")
    [rec] = upstream.messages_requests()
    assert rec.json() == with_caching(sent)


def test_the_client_keeps_its_cache_breakpoints_and_tool_choice(proxy_url, upstream):
    """Breakpoints everywhere (more than the API allows: the upstream's to refuse) stay as sent;
    the proxy adds none; tool_choice is kept."""
    upstream.handler = scripted(lambda rec: answer(rec, message(text("ok"))))
    mark = {"type": "ephemeral"}
    sent = history_to_offload()
    sent[0] = {"role": "user", "content": [{"type": "text", "text": "Run it.", "cache_control": mark}] * 3}
    sent[2]["content"][0]["cache_control"] = mark
    sent[-1] = {"role": "user", "content": [{"type": "text", "text": "What?", "cache_control": mark}]}
    body = base(
        sent,
        tools=[{**BASH[0], "cache_control": mark}],
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        system=[{"type": "text", "text": "sys", "cache_control": mark}],
    )
    r = post(proxy_url, "/v1/messages", body=body, key=key(), headers=HEADERS)
    assert r.status_code == 200
    [rec] = upstream.messages_requests()
    got = rec.json()
    assert json.dumps(got).count("cache_control") == json.dumps(body).count("cache_control") == 7
    assert got["tool_choice"] == body["tool_choice"] and got["system"] == body["system"]
    assert got["messages"][2]["content"][0]["cache_control"] == mark


@pytest.mark.parametrize("stream", [False, True])
def test_a_lone_surrogate_survives_offload_and_reload(proxy_url, upstream, stream):
    """Truncated tool output often ends inside a surrogate pair: offloaded, reloaded and sent
    upstream again, it stays the same escaped character, the JSON always valid UTF-8."""
    upstream.handler = reload_first(lambda rec: answer(rec, message(text("ok"))))
    sent = history_to_offload()
    sent[2]["content"][0]["content"] = [{"type": "text", "text": BIG + " cut \ud83d"}, {"type": "text", "text": "x"}]
    r = post(
        proxy_url,
        "/v1/messages",
        body=base(sent, tools=BASH, stream=stream),
        key=key(),
        headers={**HEADERS, "X-Offload-Max-Reload-Tokens": "50000"},
    )
    assert r.status_code == 200, r.text[:300]
    first, second = upstream.messages_requests()
    for rec in (first, second):
        rec.body.decode("utf-8")  # valid UTF-8
    [result] = second.json()["messages"][-1]["content"]
    assert result["tool_use_id"] == "toolu_reload_x" and "cut \ud83d" in result["content"]


# -- whose content a request can read -----------------------------------------------------------


def offloaded_ref(proxy_url, upstream, headers: dict) -> str:
    upstream.handler = scripted(lambda rec: answer(rec, message(text(the_ref(rec)))))
    r = post(
        proxy_url,
        "/v1/messages",
        json=base(history_to_offload(), tools=BASH),
        headers={**HEADERS, **headers},
        timeout=20,
    )
    assert r.status_code == 200, r.text[:300]
    return r.json()["content"][0]["text"]


def readable(proxy_url, ref: str, headers: list[tuple[str, str]]) -> bool:
    r = httpx2.get(f"{proxy_url}/v1/offload/{ref}", headers=headers, timeout=20)
    assert r.status_code in (200, 401, 404), r.text[:300]
    return r.status_code == 200


def test_namespaces_of_credential_headers(proxy_url, upstream):
    a, b = key(), key()
    ref = offloaded_ref(proxy_url, upstream, {"x-api-key": a, "authorization": f"Bearer {b}"})
    assert readable(proxy_url, ref, [("x-api-key", a), ("authorization", f"Bearer {b}")])
    assert readable(proxy_url, ref, [("x-api-key", b), ("authorization", f"bearer  {a}")])  # the same two
    for alone in (
        [("x-api-key", a)],
        [("authorization", f"Bearer {b}")],
        [("x-api-key", a), ("x-api-key", a)],
        [("x-api-key", a), ("authorization", "Bearer")],
        [("x-api-key", a), ("api-key", b + "x")],
    ):
        assert not readable(proxy_url, ref, alone), alone
    mine = offloaded_ref(proxy_url, upstream, {"x-api-key": a})
    assert readable(proxy_url, mine, [("x-api-key", a), ("x-api-key", a), ("x-api-key", "")])  # empty: nothing
    assert readable(proxy_url, mine, [("authorization", f"Bearer {a}")])
    assert not readable(proxy_url, mine, [("x-api-key", a), ("authorization", f"Bearer {b}")])
    assert not readable(proxy_url, mine, [("x-api-key", a), ("x-offload-tenant", "sub")])
    assert not readable(proxy_url, mine, [("x-api-key", a.upper())])
    assert not readable(proxy_url, mine, [("x-api-key", "")])


def test_a_sub_tenant_only_narrows(proxy_url, upstream):
    a = key()
    ref = offloaded_ref(proxy_url, upstream, {"x-api-key": a, "X-Offload-Tenant": "team-1"})
    assert readable(proxy_url, ref, [("x-api-key", a), ("x-offload-tenant", "team-1")])
    assert not readable(proxy_url, ref, [("x-api-key", a)])
    assert not readable(proxy_url, ref, [("x-api-key", key()), ("x-offload-tenant", "team-1")])
