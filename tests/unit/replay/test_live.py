"""`replay --live` without a server: the traces and turns chosen, the estimate, the question,
the retries, the records, the figures and the argument checks (a mock transport, no network).

`replay --live`'s journal: records kept by trace, turn, arm and configuration; a rerun finds
them, another configuration's are kept apart, a torn line is skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json

import httpx2
import pytest

from proxy.cli import build_parser
from proxy.replay._cli import live_run, live_usage_error
from proxy.replay._live import (
    FILE,
    Arm,
    Journal,
    LiveError,
    PlannedTrace,
    PlannedTurn,
    Sent,
    arm_config,
    chosen,
    confirm,
    estimate,
    estimate_text,
    plan,
    post,
    raw_url,
    record_of,
    retry_delay,
    setting_headers,
)
from proxy.replay._live_report import figures
from proxy.stats._counters import PriceTable

CONV = {
    "id": "c1",
    "model": "gpt-4o-mini",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "more"},
        {"role": "assistant", "content": "more text"},
        {"role": "user", "content": "bye"},
        {"role": "assistant", "content": "bye"},
    ],
}


def args(*extra: str) -> argparse.Namespace:
    return build_parser().parse_args(["replay", "t.jsonl", *extra])


def test_the_sample_is_reproducible_and_in_file_order():
    assert chosen(5, sample=None, seed=0) == [0, 1, 2, 3, 4] and chosen(5, sample=9, seed=0) == [0, 1, 2, 3, 4]
    picked = chosen(20, sample=4, seed=3)
    assert picked == chosen(20, sample=4, seed=3) == sorted(picked) and len(set(picked)) == 4
    assert any(chosen(20, sample=4, seed=s) != picked for s in range(4, 10))


def test_the_plan_takes_the_traces_model_and_the_first_turns():
    [trace] = plan([CONV], format="chat", model=None, sample=None, seed=0, max_turns=2)
    assert trace.model == "gpt-4o-mini" and [t.number for t in trace.turns] == [1, 2]
    assert trace.turns[1].body == {"model": "gpt-4o-mini", "messages": CONV["messages"][:4]}
    assert all(t.input_tokens > 0 and t.output_tokens > 0 for t in trace.turns)
    [forced] = plan([CONV], format="anthropic", model="claude-sonnet-4", sample=None, seed=0, max_turns=None)
    assert (
        forced.model == "claude-sonnet-4" and len(forced.turns) == 3 and forced.turns[0].body["system"] == "Be brief."
    )
    with pytest.raises(LiveError, match="names no model: pass --model"):
        plan([{**CONV, "model": None}], format="chat", model=None, sample=None, seed=0, max_turns=None)


def test_the_estimate_prices_the_raw_arm_and_skips_what_is_answered(tmp_path):
    trace = PlannedTrace(0, "c1", "gpt-4o", (PlannedTurn(1, {}, 1000, 100), PlannedTurn(2, {}, 2000, 10)))
    journal = Journal.open(tmp_path, {"raw": "r", "proxy": "p"})
    e = estimate([trace], journal, PriceTable())
    assert (e.requests, e.input_tokens, e.output_tokens, e.skipped) == (4, 3000, 110, 0)
    assert e.usd_per_arm == pytest.approx((3000 * 2.5 + 110 * 10) / 1e6)
    journal.append(
        {"kind": "turn", "position": 0, "trace": "c1", "turn": 1, "arm": "raw", "config": "r", "status": 200}
    )
    journal.append(
        {"kind": "turn", "position": 0, "trace": "c1", "turn": 2, "arm": "raw", "config": "r", "status": 503}
    )
    e = estimate([trace], journal, PriceTable())
    assert (e.requests, e.input_tokens, e.skipped) == (3, 2000, 1)  # a failed turn is sent again
    assert (e.proxy_input_tokens, e.proxy_output_tokens) == (3000, 110)  # bounded by the raw history of its turns


def test_a_run_whose_raw_arm_is_answered_still_estimates_the_proxy_arm(tmp_path):
    """A rerun with new proxy settings reuses every raw answer: its cost is the proxy arm's, not $0."""
    trace = PlannedTrace(0, "c1", "gpt-4o", (PlannedTurn(1, {}, 1000, 100),))
    journal = Journal.open(tmp_path, {"raw": "r", "proxy": "p"})
    journal.append(
        {"kind": "turn", "position": 0, "trace": "c1", "turn": 1, "arm": "raw", "config": "r", "status": 200}
    )
    e = estimate([trace], journal, PriceTable())
    assert (e.requests, e.usd_per_arm) == (1, 0.0) and e.proxy_usd == pytest.approx((1000 * 2.5 + 100 * 10) / 1e6)
    text = estimate_text(e, traces=1, turns=1, upstream="u", proxy="p")
    assert "proxy arm: at most about $0.0035" in text


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_question():
    out = io.StringIO()
    confirm("18 requests", yes=True, stdin=io.StringIO(), stdout=out)
    assert out.getvalue() == "18 requests\n"
    confirm("18 requests", yes=False, stdin=Terminal("y\n"), stdout=out)
    assert "Send them? [y/N]" in out.getvalue()
    for answer in ("n\n", "\n", ""):
        with pytest.raises(LiveError, match="not confirmed"):
            confirm("x", yes=False, stdin=Terminal(answer), stdout=io.StringIO())
    with pytest.raises(LiveError, match="pass --yes"):
        confirm("x", yes=False, stdin=io.StringIO("y\n"), stdout=io.StringIO())


def test_retry_after_is_honoured_and_capped():
    def response(value: str | None) -> httpx2.Response:
        return httpx2.Response(429, headers={"retry-after": value} if value is not None else {})

    assert retry_delay(response("2"), 0) == 2.0 and retry_delay(response("9999"), 0) == 60.0
    assert (
        retry_delay(response("soon"), 1) == 2.0
        and retry_delay(None, 5) == 4.0
        and retry_delay(response(None), 0) == 1.0
    )


def test_post_retries_429_and_5xx_then_gives_the_last_answer():
    statuses = iter([429, 503, 200])
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    async def go(handler) -> Sent:
        async with httpx2.AsyncClient(transport=httpx2.MockTransport(handler)) as client:
            return await post(client, "http://up/v1/chat/completions", body={}, headers={}, sleep=sleep)

    sent = asyncio.run(go(lambda request: httpx2.Response(next(statuses), json={})))
    assert (sent.response.status_code, sent.attempts, waits) == (200, 3, [1.0, 2.0])
    waits.clear()
    sent = asyncio.run(go(lambda request: httpx2.Response(500, json={})))
    assert (sent.response.status_code, sent.attempts, len(waits)) == (500, 4, 3)
    sent = asyncio.run(go(lambda request: httpx2.Response(400, json={})))
    assert sent.attempts == 1  # not retried

    def refuse(request):
        raise httpx2.ConnectError("refused")

    sent = asyncio.run(go(refuse))
    assert sent.response is None and sent.unreachable and "ConnectError" in sent.error


def test_a_record_holds_the_action_the_bill_and_the_proxys_headers():
    trace = PlannedTrace(0, "c1", "gpt-4o", (PlannedTurn(1, {}, 10, 1),))
    arm = Arm("proxy", "http://p/v1/chat/completions", {}, "cfg")
    answer = {
        "choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 100, "prompt_tokens_details": {"cached_tokens": 400}},
    }
    response = httpx2.Response(200, json=answer, headers={"x-offload-action": "compact"})
    record = record_of(
        Sent(response, 1), arm=arm, trace=trace, turn=trace.turns[0], format="chat", price=PriceTable().price("gpt-4o")
    )
    assert record["action"] == {"calls": [], "text": "hi", "finish": "stop"} and record["offload_action"] == "compact"
    assert record["bill"]["uncached"] == 600 and record["bill"]["cache_read"] == 400
    assert record["usd"] == pytest.approx((600 * 2.5 + 400 * 1.25 + 100 * 10) / 1e6)
    bad = record_of(
        Sent(httpx2.Response(200, json={"choices": []}), 1),
        arm=arm,
        trace=trace,
        turn=trace.turns[0],
        format="chat",
        price=PriceTable().price("gpt-4o"),
    )
    assert bad["status"] == -1 and "unreadable answer" in bad["error"]
    refused = record_of(
        Sent(httpx2.Response(401, json={"error": {"message": "bad key"}}), 1),
        arm=arm,
        trace=trace,
        turn=trace.turns[0],
        format="chat",
        price=PriceTable().price("gpt-4o"),
    )
    assert refused["status"] == 401 and refused["error"] == "HTTP 401: bad key"


def test_an_error_quoting_the_key_where_the_message_is_cut_keeps_no_part_of_it():
    from proxy.replay._target import MAX_ERROR

    trace = PlannedTrace(0, "c1", "gpt-4o", (PlannedTurn(1, {}, 10, 1),))
    arm = Arm("raw", "http://u/v1/chat/completions", {}, "cfg")
    key = "sk-" + "S" * 60
    message = "x" * (MAX_ERROR - 40) + f" key: {key}"  # the cut falls inside the key
    record = record_of(
        Sent(httpx2.Response(401, json={"error": {"message": message}}), 1),
        arm=arm,
        trace=trace,
        turn=trace.turns[0],
        format="chat",
        price=PriceTable().price("gpt-4o"),
        api_key=key,
    )
    assert "sk-SSS" not in record["error"] and "SSSSS" not in record["error"]


def rec(arm: str, *, status: int = 200, calls=(), text: str = "", finish: str = "stop", usd: float = 0.01) -> dict:
    return {
        "arm": arm,
        "trace": "t",
        "turn": 1,
        "status": status,
        "usd": usd,
        "error": None if status == 200 else "x",
        "bill": {"uncached": 100, "output": 10, "answers": 1},
        "action": {"calls": [{"name": n, "arguments": a} for n, a in calls], "text": text, "finish": finish}
        if status == 200
        else None,
    }


def test_figures_count_failed_turns_and_compare_the_rest():
    same = (
        rec("raw", calls=[("read", '{"p": 1}')], finish="tool_calls"),
        rec("proxy", calls=[("read", '{"p": 1}')], finish="tool_calls", usd=0.005),
    )
    other = (
        rec("raw", calls=[("read", '{"p": 1}')], finish="tool_calls"),
        rec("proxy", calls=[("read", '{"p": 2}')], finish="tool_calls", usd=0.005),
    )
    failed = (rec("raw"), {**rec("proxy", status=500), "reload_rounds": "x"})
    same[1]["reload_rounds"] = "2"
    f = figures([same, other, failed, (None, None)], measured={"turn": 0.008, "summary": 0.002, "keepalive": 0.0})
    assert (f["turns"], f["compared"], f["failed"], f["failed_raw"], f["failed_proxy"]) == (4, 2, 2, 1, 2)
    assert f["agreement"] == 0.5 and f["same_tools"] == 1.0 and f["argument_similarity"] == 0.5
    assert f["text_similarity"] is None and f["errors_by_status"] == {"500": 1}
    assert f["raw"]["usd"] == 0.03 and f["proxy"]["usd"] == 0.01  # what the answers reported
    assert f["proxy"]["measured"] and f["proxy"]["total_usd"] == 0.01 and f["proxy"]["summaries_usd"] == 0.002
    unmeasured = figures([same, other, failed])["proxy"]
    assert not unmeasured["measured"] and unmeasured["total_usd"] == 0.01 and unmeasured["summaries_usd"] is None
    assert f["cost_ratio"] == pytest.approx(0.3333, abs=1e-4)
    assert f["raw"]["input_tokens"] == 300 and f["proxy"]["reload_rounds"] == 2


def test_the_arguments(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert live_usage_error(args("--max-turns", "2")) == "--max-turns apply to --live only"
    assert live_usage_error(args("--live")).startswith("--live needs --api-key")
    assert "--redis-url" in live_usage_error(args("--live", "--api-key", "k", "--redis-url", "redis://x"))
    assert "--upstream" in live_usage_error(
        args("--live", "--api-key", "k", "--upstream", "http://x/v1/chat/completions")
    )
    assert "--prices" in live_usage_error(args("--live", "--api-key", "k", "--prices", "gpt-4o=x"))
    assert (
        live_usage_error(args("--live", "--api-key", "k", "--target", "http://127.0.0.1:1", "--max-total-tokens", "9"))
        is None
    )
    with pytest.raises(SystemExit):
        args("--live", "--sample", "0")
    run = live_run(args("--live", "--api-key", "k", "--format", "anthropic", "--max-total-tokens", "3000"))
    assert run.upstream == "https://api.anthropic.com" and run.model is None and run.out.name == "replay-live"
    assert run.settings == {"X-Offload-Max-Total-Tokens": "3000"}
    assert live_run(args("--live", "--api-key", "k")).upstream == "https://api.openai.com/v1"
    priced = live_run(args("--live", "--api-key", "k", "--prices", "gpt-4o=1/0.1/2")).prices.price("gpt-4o-2024-08-06")
    assert (priced.input, priced.cached, priced.output) == (1.0, 0.1, 2.0)
    other = live_run(args("--live", "--api-key", "k2", "--max-total-tokens", "4000"))
    assert other.configs()["raw"] == live_run(args("--live", "--api-key", "k")).configs()["raw"]  # the key is not in it
    assert other.configs()["proxy"] != live_run(args("--live", "--api-key", "k")).configs()["proxy"]


def test_settings_are_checked_as_the_proxy_checks_them():
    with pytest.raises(LiveError, match="invalid offload setting"):
        setting_headers(args("--live", "--mode", "sometimes"))
    assert setting_headers(args("--reload-tools", "off")) == {"X-Offload-Reload-Tools": "off"}


def test_the_raw_arms_endpoints():
    assert raw_url("https://api.openai.com/v1", "chat") == "https://api.openai.com/v1/chat/completions"
    assert raw_url("https://api.openai.com", "responses") == "https://api.openai.com/v1/responses"
    assert raw_url("https://openrouter.ai/api/v1", "chat") == "https://openrouter.ai/api/v1/chat/completions"
    assert raw_url("https://api.anthropic.com", "anthropic") == "https://api.anthropic.com/v1/messages"


def test_an_output_that_is_a_file_is_refused_before_anything_is_sent(tmp_path):
    from proxy.replay._live import LiveRun, run_live

    traces = tmp_path / "t.jsonl"
    traces.write_text(json.dumps(CONV) + "\n")
    (tmp_path / "out").write_text("not a folder")
    run = LiveRun(
        file=traces,
        out=tmp_path / "out",
        format="chat",
        upstream="http://127.0.0.1:9/v1",
        target=None,
        api_key="k",
        model=None,
        settings={},
        sample=None,
        seed=0,
        max_turns=None,
        yes=True,
        prices=PriceTable(),
    )
    with pytest.raises(LiveError, match="--out .*cannot use it"):
        asyncio.run(run_live(run, stdin=io.StringIO(), stdout=io.StringIO()))


def test_a_huge_or_endless_answer_is_a_failed_turn_not_a_run_out_of_memory_or_time(monkeypatch):
    import proxy.replay._live as live_module

    monkeypatch.setattr(live_module, "MAX_ANSWER_BYTES", 1000)
    monkeypatch.setattr(live_module, "ANSWER_SECONDS", 0.5)

    class Endless(httpx2.AsyncByteStream):
        def __init__(self, pause: float) -> None:
            self.pause, self.sent = pause, 0

        async def __aiter__(self):
            while True:
                self.sent += 1
                yield b" " * 100
                await asyncio.sleep(self.pause)

    async def go(stream: Endless) -> Sent:
        def handler(request):
            return httpx2.Response(200, stream=stream, headers={"content-type": "application/json"})

        async with httpx2.AsyncClient(transport=httpx2.MockTransport(handler)) as client:
            return await post(client, "http://up/v1/chat/completions", body={}, headers={})

    fast = Endless(0)
    sent = asyncio.run(go(fast))
    assert sent.response is None and not sent.unreachable and "larger than 1000 bytes" in sent.error
    assert fast.sent <= 12  # stopped at the bound
    sent = asyncio.run(go(Endless(0.05)))
    assert sent.response is None and not sent.unreachable and "0.5 s" in sent.error
    ok = asyncio.run(_answer_of(b'{"choices": []}'))
    assert ok.response is not None and ok.response.json() == {"choices": []}


async def _answer_of(raw: bytes) -> Sent:
    import gzip

    def handler(request):
        return httpx2.Response(200, content=gzip.compress(raw), headers={"content-encoding": "gzip"})

    async with httpx2.AsyncClient(transport=httpx2.MockTransport(handler)) as client:
        return await post(client, "http://up/v1/chat/completions", body={}, headers={})


def test_a_trace_id_with_dot_segments_never_moves_the_session_bill_off_its_path():
    from proxy.replay._live import session_bill

    seen: list[str] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.url.raw_path.decode())
        return httpx2.Response(200, json={"turns": 1, "bill": {"calls": {}}})

    async def go() -> None:
        async with httpx2.AsyncClient(transport=httpx2.MockTransport(handler)) as client:
            await session_bill(
                client,
                "http://proxy.test/prefix",
                session="live-x-0-/../../../../../admin",
                headers={"authorization": "Bearer sk-k"},
                turns=1,
            )

    asyncio.run(go())
    assert seen[0] == "/prefix/v1/offload/sessions/live-x-0-%2F..%2F..%2F..%2F..%2F..%2Fadmin"


def turn(arm: str, config: str, turn: int = 1, **extra) -> dict:
    return {
        "kind": "turn",
        "position": 0,
        "trace": "t",
        "turn": turn,
        "arm": arm,
        "config": config,
        "status": 200,
        **extra,
    }


def test_the_configuration_hash_is_stable_and_sees_every_value():
    assert arm_config({"a": 1, "b": [2]}) == arm_config({"b": [2], "a": 1})
    assert arm_config({"a": 1}) != arm_config({"a": 2}) and len(arm_config({})) == 16


def test_a_rerun_finds_what_was_appended(tmp_path):
    configs = {"raw": "r1", "proxy": "p1"}
    journal = Journal.open(tmp_path, configs)
    journal.append(turn("raw", "r1"))
    journal.append(turn("proxy", "p1", usd=0.5))
    calls = {"turn": {"uncached": 10, "output": 1}, "summary": {"uncached": 3}, "keepalive": {}}
    journal.append({"kind": "session", "position": 0, "trace": "t", "arm": "proxy", "config": "p1", "calls": calls})
    again = Journal.open(tmp_path, configs)
    assert again.done(position=0, trace="t", turn=1, arm="proxy")["usd"] == 0.5
    assert again.done(position=0, trace="t", turn=2, arm="raw") is None
    assert again.done(position=1, trace="t", turn=1, arm="raw") is None  # another trace of the same id
    assert again.sessions[(0, "t", "p1")]["calls"] == calls
    assert (again.other_configs, again.unreadable) == (0, 0)


def test_another_configurations_answers_are_kept_apart(tmp_path):
    Journal.open(tmp_path, {"raw": "r1", "proxy": "p1"}).append(turn("proxy", "p1"))
    other = Journal.open(tmp_path, {"raw": "r1", "proxy": "p2"})
    assert other.done(position=0, trace="t", turn=1, arm="proxy") is None and other.other_configs == 1


def test_the_last_record_of_a_turn_wins_and_torn_lines_are_skipped(tmp_path):
    path = tmp_path / FILE
    lines = [
        json.dumps(turn("raw", "r1", status=503)),
        json.dumps(turn("raw", "r1", status=200)),
        '{"kind": "tu',
        json.dumps({"kind": "turn"}),
        json.dumps({"kind": "other", "arm": "raw", "config": "r1"}),
        json.dumps(turn("raw", "r1", turn=2, action={"calls": 3})),
        "[1]",
        json.dumps(
            {
                "kind": "session",
                "position": 0,
                "trace": "t",
                "arm": "proxy",
                "config": "p1",
                "calls": {"turn": {"uncached": "many"}},
            }
        ),
    ]
    path.write_text("\n".join(lines) + "\n")
    journal = Journal.open(tmp_path, {"raw": "r1", "proxy": "p1"})
    assert journal.done(position=0, trace="t", turn=1, arm="raw")["status"] == 200
    assert (
        journal.unreadable == 6
        and journal.sessions == {}
        and journal.done(position=0, trace="t", turn=2, arm="raw") is None
    )


def test_a_turn_record_whose_figures_are_of_the_wrong_type_is_unreadable_not_a_failed_report(tmp_path):
    from proxy.replay._live_report import figures

    good = {
        "action": {"calls": [], "text": "hi", "finish": "stop"},
        "bill": {"uncached": 5, "output": 1, "answers": 1},
        "usd": 0.25,
    }
    bad = [
        {"usd": "lots"},
        {"usd": True},
        {"bill": "x"},
        {"bill": {"uncached": "many"}},
        {"offload_action": ["a"]},
        {"reload_rounds": {"n": 1}},
        {"status": "200"},
        {"error": {"no": 1}},
        {"usd": float("nan")},
    ]
    path = tmp_path / FILE
    path.write_text(
        "\n".join(json.dumps(turn("raw", "r1", turn=i + 1, **{**good, **b})) for i, b in enumerate(bad))
        + "\n"
        + json.dumps(turn("proxy", "p1", turn=1, **good))
        + "\n"
    )
    journal = Journal.open(tmp_path, {"raw": "r1", "proxy": "p1"})
    assert journal.unreadable == len(bad)
    pairs = [
        (
            journal.done(position=0, trace="t", turn=i + 1, arm="raw"),
            journal.done(position=0, trace="t", turn=i + 1, arm="proxy"),
        )
        for i in range(len(bad))
    ]
    result = figures(pairs)
    assert result["proxy"]["usd"] == 0.25 and result["failed_raw"] == len(bad)
