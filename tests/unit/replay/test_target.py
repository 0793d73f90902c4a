"""`replay --target`: URLs, headers, session ids, the bodies sent, reading the proxy's answers,
the report and the argument checks, on a mock transport (no server)."""

from __future__ import annotations

import json
import re

import httpx2
import pytest

from proxy.cli import build_parser
from proxy.core.settings import IDENT_PATTERN
from proxy.replay._cli import target_usage_error
from proxy.replay._runner import request_body, requests_of
from proxy.replay._target import (
    TargetError,
    api_root,
    endpoint,
    report_of,
    send_all,
    session_id,
    session_ids,
    table,
    turn_headers,
    turn_result,
)

CONV = {
    "id": "c1",
    "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}],
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "bye"},
        {"role": "assistant", "content": "bye"},
    ],
}


@pytest.mark.parametrize(
    "target",
    [
        "http://127.0.0.1:8080",
        "http://127.0.0.1:8080/",
        "http://127.0.0.1:8080/v1",
        "http://127.0.0.1:8080/v1/",
        " http://127.0.0.1:8080/v1// ",
    ],
)
def test_the_root_is_taken_with_or_without_v1(target):
    assert api_root(target) == "http://127.0.0.1:8080"
    assert endpoint(target, "chat") == "http://127.0.0.1:8080/v1/chat/completions"
    assert endpoint(target, "responses") == "http://127.0.0.1:8080/v1/responses"
    assert endpoint(target, "anthropic") == "http://127.0.0.1:8080/v1/messages"


def test_a_path_prefix_stays():
    assert endpoint("https://gw.example/offload/v1", "chat") == "https://gw.example/offload/v1/chat/completions"


def test_headers_by_format():
    assert turn_headers("chat", "sk-1", "s") == {"Authorization": "Bearer sk-1", "X-Offload-Session": "s"}
    assert turn_headers("responses", "sk-1", "s") == {"Authorization": "Bearer sk-1", "X-Offload-Session": "s"}
    assert turn_headers("anthropic", "sk-1", "s") == {
        "x-api-key": "sk-1",
        "anthropic-version": "2023-06-01",
        "X-Offload-Session": "s",
    }


def test_session_ids_fit_the_header_pattern():
    pattern = re.compile(IDENT_PATTERN)
    assert session_id("oh-61322748c69f") == "oh-61322748c69f"
    assert session_id("a/b:c@d.e_f-1") == "a/b:c@d.e_f-1"
    cleaned = [session_id(s) for s in ("conv beta/1", "conv_beta/1", "é", "", "x" * 300, "x" * 129, "tab\there")]
    assert all(pattern.match(s) for s in cleaned), cleaned
    assert cleaned[0].startswith("conv_beta/1-") and cleaned[0] != cleaned[1] == "conv_beta/1"
    assert len(cleaned[4]) == 128 and cleaned[4] != cleaned[5]
    assert session_id("conv beta/1") == cleaned[0]  # stable from run to run


def test_repeated_ids_are_separate_sessions():
    assert session_ids(["a", "b", "a", "a"]) == ["a", "b", "a-2", "a-3"]
    long = session_ids(["y" * 128, "y" * 128])
    assert long[1] == "y" * 126 + "-2" and all(re.match(IDENT_PATTERN, s) for s in long)


def test_the_bodies_are_the_in_process_replays_requests():
    requests, tools = requests_of(CONV, "anthropic")
    body = request_body(requests[1], format="anthropic", model="claude-x", tools=tools, system="Be brief.")
    assert body["system"] == "Be brief." and body["max_tokens"] == 4096 and body["model"] == "claude-x"
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["tools"][0]["name"] == "bash"
    chat_body = request_body(CONV["messages"][:2], format="chat", model="gpt-4o")
    assert chat_body == {"model": "gpt-4o", "messages": CONV["messages"][:2]}
    responses_body = request_body(requests_of(CONV, "responses")[0][0], format="responses", model="gpt-4o")
    assert set(responses_body) == {"model", "input"}


def test_reading_an_answer():
    ok = turn_result(
        httpx2.Response(
            200,
            headers={"X-Offload-Tokens-Before": "120", "X-Offload-Tokens-After": "80", "X-Offload-Action": "compact"},
            json={},
        )
    )
    assert (ok.status, ok.tokens_before, ok.tokens_after, ok.action, ok.error) == (200, 120, 80, "compact", None)
    openai = turn_result(
        httpx2.Response(
            401, json={"error": {"message": "Incorrect API key\nprovided", "type": "invalid_request_error"}}
        )
    )
    assert openai.error == "HTTP 401: Incorrect API key provided" and openai.tokens_before is None
    anthropic = turn_result(
        httpx2.Response(529, json={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    )
    assert anthropic.error == "HTTP 529: Overloaded"
    text = turn_result(httpx2.Response(502, text="bad gateway " * 100))
    assert text.error.startswith("HTTP 502: bad gateway") and len(text.error) < 320


def _proxy(seen: list[httpx2.Request], fail_on: str | None = None):
    """A mock proxy: `/healthz` answers; a turn gets headers from the size of its body."""

    def handle(request: httpx2.Request) -> httpx2.Response:
        if request.url.path == "/healthz":
            return httpx2.Response(200, json={"status": "ok"})
        seen.append(request)
        if fail_on and request.headers["x-offload-session"] == fail_on:
            return httpx2.Response(500, json={"error": {"message": "upstream broke"}})
        size = len(request.content)
        return httpx2.Response(
            200,
            json={},
            headers={
                "x-offload-tokens-before": str(size),
                "x-offload-tokens-after": str(size // 2),
                "x-offload-action": "compact" if size > 400 else "none",
                "x-offload-reload-rounds": "2",
            },
        )

    return httpx2.MockTransport(handle)


@pytest.mark.anyio
@pytest.mark.parametrize("format", ["chat", "responses", "anthropic"])
async def test_every_turn_goes_to_the_endpoint_in_order(format):
    seen: list[httpx2.Request] = []
    convs = [CONV, {**CONV, "id": "second one"}]
    sent = await send_all(
        convs,
        target="http://proxy.test/v1",
        format=format,
        model="m",
        api_key="sk-k",
        concurrency=2,
        transport=_proxy(seen),
    )
    assert [s.id for s in sent] == ["c1", "second one"] and sent[1].session == session_id("second one")
    assert len(seen) == 4 and {r.url.path for r in seen} == {endpoint("http://x", format)[len("http://x") :]}
    for s in sent:
        mine = [r for r in seen if r.headers["x-offload-session"] == s.session]
        bodies = [json.loads(r.content) for r in mine]
        requests, tools = requests_of(CONV, format)
        system = "Be brief." if format == "anthropic" else None
        assert bodies == [request_body(r, format=format, model="m", tools=tools, system=system) for r in requests]
        assert all(b.get("stream") is None for b in bodies)
        key = mine[0].headers.get("x-api-key") if format == "anthropic" else mine[0].headers["authorization"]
        assert key == ("sk-k" if format == "anthropic" else "Bearer sk-k")
    report = report_of(sent, target="http://proxy.test/v1", format=format, model="m", concurrency=2)
    o = report["overall"]
    assert o["turns"] == 4 and o["answered"] == 4 and o["errors"] == 0
    assert o["raw_tokens"] == sum(len(r.content) for r in seen)
    assert o["forwarded_tokens"] == sum(len(r.content) // 2 for r in seen)
    assert sum(o["actions"].values()) == 4 and report["target"] == "http://proxy.test"
    assert o["reload_rounds"] == 8  # X-Offload-Reload-Rounds: 2 on each of the 4 turns
    assert f"reload rounds the model ran through the proxy: {o['reload_rounds']}" in table(report)


@pytest.mark.anyio
async def test_turns_answered_without_offload_headers_are_counted_apart():
    """Observe mode and a holdout's control arm answer 200 with no X-Offload-* header: said, not a silent 0."""

    def handle(request: httpx2.Request) -> httpx2.Response:
        if request.url.path == "/healthz":
            return httpx2.Response(200, json={"status": "ok"})
        if request.headers["x-offload-session"] == "control":
            return httpx2.Response(200, json={})
        return httpx2.Response(
            200,
            json={},
            headers={"x-offload-tokens-before": "100", "x-offload-tokens-after": "40", "x-offload-action": "compact"},
        )

    sent = await send_all(
        [CONV, {**CONV, "id": "control"}],
        target="http://proxy.test",
        format="chat",
        model="m",
        api_key="k",
        concurrency=1,
        transport=httpx2.MockTransport(handle),
    )
    report = report_of(sent, target="http://proxy.test", format="chat", model="m", concurrency=1)
    o = report["overall"]
    assert (o["answered"], o["unmanaged"], o["raw_tokens"], o["forwarded_tokens"]) == (4, 2, 200, 80)
    assert report["conversations"][0]["unmanaged"] == 0 and report["conversations"][1]["unmanaged"] == 2
    assert "unmanaged: 2 of 4 answered turns carried no X-Offload-* headers" in table(report)


@pytest.mark.anyio
async def test_a_failing_turn_is_counted_and_the_rest_go_on():
    seen: list[httpx2.Request] = []
    sent = await send_all(
        [CONV, {**CONV, "id": "bad"}],
        target="http://proxy.test",
        format="chat",
        model="m",
        api_key="k",
        concurrency=1,
        transport=_proxy(seen, fail_on="bad"),
    )
    report = report_of(sent, target="http://proxy.test", format="chat", model="m", concurrency=1)
    o = report["overall"]
    assert (o["turns"], o["answered"], o["errors"], o["errors_by_status"]) == (4, 2, 2, {"500": 2})
    assert o["first_error"] == "bad turn 1: HTTP 500: upstream broke"
    assert report["conversations"][1]["per_turn"][0] == {"status": 500, "error": "HTTP 500: upstream broke"}
    assert o["reload_rounds"] == 4  # the 2 answered turns' (a failed one has no header)
    printed = table(report)
    assert "errors: 2 of 4 turns (HTTP 500 × 2); first: bad turn 1: HTTP 500: upstream broke" in printed
    assert f"raw tokens {o['raw_tokens']}, forwarded tokens {o['forwarded_tokens']}" in printed


@pytest.mark.anyio
async def test_an_unreachable_proxy_is_one_target_error():
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("All connection attempts failed\n(refused)", request=request)

    with pytest.raises(TargetError) as info:
        await send_all(
            [CONV],
            target="http://proxy.test/v1",
            format="chat",
            model="m",
            api_key="k",
            concurrency=1,
            transport=httpx2.MockTransport(refuse),
        )
    assert str(info.value) == ("cannot reach the proxy at http://proxy.test (All connection attempts failed (refused))")


def _args(*extra: str):
    return build_parser().parse_args(["replay", "t.jsonl", *extra])


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--target", "http://h:1", "--api-key", "k"], None),
        (
            [
                "--target",
                "http://h:1",
                "--api-key",
                "k",
                "--format",
                "anthropic",
                "--model",
                "claude",
                "--concurrency",
                "8",
                "--out",
                "d",
            ],
            None,
        ),
        (
            ["--target", "http://h:1", "--api-key", "k", "--redis-url", "redis://x", "--max-total-tokens", "3000"],
            "--target cannot be combined with --redis-url, --max-total-tokens",
        ),
        (
            [
                "--target",
                "http://h:1",
                "--api-key",
                "k",
                "--data-dir",
                "d",
                "--upstream",
                "http://u",
                "--summary-delay-ms",
                "5",
                "--inline-summaries",
                "--turn-latency-ms",
                "1",
                "--summary-request",
                "transcript",
            ],
            "--target cannot be combined with --data-dir, --upstream, --summary-delay-ms, --turn-latency-ms, "
            "--inline-summaries, --summary-request",
        ),
        (
            ["--target", "http://h:1", "--api-key", "k", "--pricing", "anthropic"],
            "--target cannot be combined with --pricing",
        ),
        (["--concurrency", "2"], "--concurrency applies to --target only"),
        ([], None),
    ],
)
def test_argument_checks(extra, expected, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    problem = target_usage_error(_args(*extra))
    assert (problem if expected is None else problem.split(":")[0]) == expected


def test_a_key_is_needed(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert "needs --api-key KEY (or $OPENAI_API_KEY)" in target_usage_error(_args("--target", "http://h"))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "a")
    assert target_usage_error(_args("--target", "http://h", "--format", "anthropic")) is None
    assert "$OPENAI_API_KEY" in target_usage_error(_args("--target", "http://h"))


@pytest.mark.parametrize(
    "bad", [["--target", "127.0.0.1:8080"], ["--target", "ftp://h"], ["--target", "http://h", "--concurrency", "0"]]
)
def test_bad_values_are_argparse_errors(bad, capsys):
    with pytest.raises(SystemExit) as info:
        _args(*bad)
    assert info.value.code == 2 and "error:" in capsys.readouterr().err
