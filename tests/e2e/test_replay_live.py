"""`python -m proxy replay … --live` against the fake upstream in its attentive mode
(`tests.harness.attentive`: its next tool call names what the tool results showed, so a proxy
that hides one changes it): both arms sent, answers compared, billed cost of both, the estimate
and the question before anything is sent, resumed runs, errors in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from starlette.responses import JSONResponse

from tests.harness.attentive import attentive_handler
from tests.harness.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
TRACES = Path(__file__).parent / "fixtures" / "replay_target.jsonl"  # 3 conversations: 4, 3 and 2 turns
TURNS = {"conv-alpha": 4, "conv beta/1": 3, "conv-gamma": 2}
KEY = "sk-live-test-do-not-print-0123456789"


@pytest.fixture
def model(upstream):
    upstream.handler = attentive_handler
    return upstream


def live(
    upstream_url: str,
    out: Path,
    *args: str,
    yes: bool = True,
    stdin=subprocess.DEVNULL,
    key: str = KEY,
    trace: Path = TRACES,
    env_extra: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    env.update(env_extra or {})
    argv = [
        sys.executable,
        "-m",
        "proxy",
        "replay",
        str(trace),
        "--live",
        "--upstream",
        upstream_url,
        "--api-key",
        key,
        "--out",
        str(out),
        *args,
        *(["--yes"] if yes else []),
    ]
    if "--model" not in args:
        argv += ["--model", "gpt-4o"]
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, stdin=stdin)


def report_of(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def model_requests(upstream, format: str = "chat") -> list:
    return (
        upstream.messages_requests()
        if format == "anthropic"
        else (upstream.responses_requests() if format == "responses" else upstream.chat_requests())
    )


def arms(requests: list, report: dict) -> tuple[list, list]:
    """(the raw arm's requests, the proxy arm's), each turn's pair split: the raw arm goes first
    on a trace's odd turns, the proxy arm on its even ones (`proxy.replay._live.send_all`)."""
    numbers = [row["turn"] for trace in report["traces"] for row in trace["per_turn"]]
    assert len(requests) == 2 * len(numbers)
    pairs = [requests[2 * i : 2 * i + 2] if k % 2 else requests[2 * i : 2 * i + 2][::-1] for i, k in enumerate(numbers)]
    return [raw for raw, _ in pairs], [proxy for _, proxy in pairs]


def assert_key_kept(run: subprocess.CompletedProcess, out: Path) -> None:
    assert KEY not in run.stdout and KEY not in run.stderr
    for path in out.glob("*.json*"):
        assert KEY not in path.read_text(), path


@pytest.mark.parametrize(
    "settings",
    [("--mode", "off"), ("--max-total-tokens", "1000000", "--max-tool-message-tokens", "1000000")],
    ids=["mode-off", "thresholds-high"],
)
def test_a_proxy_that_changes_nothing_agrees_on_every_turn(model, tmp_path, settings):
    # the in-process proxy takes the settings given, never the environment's (which its configuration would not see)
    run = live(
        f"{model.url}/v1",
        tmp_path,
        *settings,
        env_extra={"OFFLOAD_UPSTREAM_API_KEY": "sk-operator", "OFFLOAD_MAX_TOTAL_TOKENS": "500"},
    )
    assert run.returncode == 0, run.stderr
    o = report_of(tmp_path)["overall"]
    assert (o["turns"], o["compared"], o["failed"]) == (9, 9, 0)
    assert o["agreement"] == o["same_tools"] == o["argument_similarity"] == o["same_finish"] == 1.0
    assert o["text_similarity"] == 1.0
    # every turn went to the upstream twice (raw and through the proxy), with the caller's key
    seen = model_requests(model)
    assert len(seen) == 18 and all(r.headers["authorization"] == f"Bearer {KEY}" for r in seen)
    assert o["raw"]["usd"] > 0 and o["proxy"]["usd"] > 0  # billed from the usage the fake reported
    assert o["raw"]["answered"] == o["proxy"]["answered"] == 9
    assert "OVERALL" in run.stdout and "billed" in run.stdout
    assert_key_kept(run, tmp_path)
    if settings == ("--mode", "off"):  # the noise floor's arm: the raw history forwarded as it is
        raw, proxied = arms(seen, report_of(tmp_path))
        assert [r.json() for r in proxied] == [r.json() for r in raw]


def test_the_proxy_arm_pays_for_its_summary_calls(model, tmp_path):
    run = live(f"{model.url}/v1", tmp_path, "--mode", "compress", "--max-total-tokens", "1500")
    assert run.returncode == 0, run.stderr
    calls = model.summary_requests()
    assert calls  # each answered with a usage of 300 input and 40 output tokens (`snapshot_answer`)
    o = report_of(tmp_path)["overall"]
    p = o["proxy"]
    assert p["measured"] and o["unmeasured_traces"] == 0
    assert p["summaries_usd"] == pytest.approx(len(calls) * (300 * 2.5 + 40 * 10) / 1e6)
    assert p["total_usd"] == pytest.approx(p["turns_usd"] + p["summaries_usd"] + p["keepalive_usd"], abs=1e-5)
    # its turns as measured: what the upstream reported for the forwarded requests (bytes / 4 in, 12 out)
    forwarded = arms(model.chat_requests(), report_of(tmp_path))[1]
    assert p["turns_usd"] == pytest.approx(sum((len(r.body) // 4) * 2.5 + 12 * 10 for r in forwarded) / 1e6, abs=1e-5)


def test_compaction_that_hides_a_tool_result_changes_the_next_action(model, tmp_path):
    run = live(f"{model.url}/v1", tmp_path, "--max-total-tokens", "3000")
    assert run.returncode == 0, run.stderr
    report = report_of(tmp_path)
    o = report["overall"]
    assert o["compared"] == 9 and o["agreement"] < 1.0 and o["argument_similarity"] < 1.0
    assert o["text_similarity"] < 1.0 and o["same_tools"] == 1.0
    assert o["proxy_actions"].get("compact", 0) >= 1
    assert o["proxy"]["total_usd"] < o["raw"]["usd"]  # the forwarded history is smaller, and billed so
    traces = {t["id"]: t for t in report["traces"]}
    assert traces["conv-alpha"]["agreement"] < 1.0
    assert traces["conv beta/1"]["agreement"] == traces["conv-gamma"]["agreement"] == 1.0  # nothing to hide
    disagreeing = [t for t in traces["conv-alpha"]["per_turn"] if not t["agree"]]
    assert disagreeing and all(t["argument_similarity"] < 1.0 and t["offload_action"] == "compact" for t in disagreeing)
    assert f"{o['agreement']:.3f}" in run.stdout.split("OVERALL", 1)[1].splitlines()[0]


def test_the_estimate_comes_first_and_nothing_goes_without_yes_off_a_terminal(model, tmp_path):
    run = live(f"{model.url}/v1", tmp_path, yes=False)
    assert run.returncode == 1
    assert "18 requests to send" in run.stdout and "estimate, raw arm: $" in run.stdout
    assert "not a terminal" in run.stderr and "--yes" in run.stderr and "Traceback" not in run.stderr
    assert model.requests == []


def test_on_a_terminal_the_question_is_asked_and_no_means_nothing_sent(model, tmp_path):
    master, child = os.openpty()
    os.write(master, b"n\n")
    try:
        run = live(f"{model.url}/v1", tmp_path, yes=False, stdin=child)
    finally:
        os.close(child)
        os.close(master)
    assert run.returncode == 1, run.stderr
    assert "Send them? [y/N]" in run.stdout and "not confirmed" in run.stderr
    assert model.requests == []


def test_a_rerun_skips_the_turns_answered_and_a_changed_config_is_kept_apart(model, tmp_path):
    first = live(f"{model.url}/v1", tmp_path, "--max-turns", "1")
    assert first.returncode == 0, first.stderr
    assert len(model_requests(model)) == 6  # 3 traces × 1 turn × 2 arms
    assert report_of(tmp_path)["overall"]["turns"] == 3

    second = live(f"{model.url}/v1", tmp_path)
    assert second.returncode == 0, second.stderr
    assert len(model_requests(model)) == 6 + 12  # only the 6 turns not answered yet
    assert "6 already answered in the journal: skipped" in second.stdout
    assert "12 requests to send" in second.stdout
    assert report_of(tmp_path)["overall"]["compared"] == 9

    third = live(f"{model.url}/v1", tmp_path)
    assert third.returncode == 0, third.stderr
    assert len(model_requests(model)) == 18 and "nothing to send" in third.stdout
    assert report_of(tmp_path)["overall"]["compared"] == 9

    # other proxy settings: the raw arm's answers are reused, the proxy arm's are sent again
    changed = live(f"{model.url}/v1", tmp_path, "--max-total-tokens", "3000")
    assert changed.returncode == 0, changed.stderr
    assert len(model_requests(model)) == 18 + 9
    assert "9 answers of another configuration: kept apart" in changed.stdout  # the first config's proxy arm
    report = report_of(tmp_path)
    assert report["overall"]["compared"] == 9 and report["kept_apart"] == 9
    assert report["overall"]["agreement"] < 1.0


def test_max_turns_and_a_reproducible_sample(model, tmp_path):
    run = live(f"{model.url}/v1", tmp_path / "a", "--sample", "2", "--seed", "7", "--max-turns", "2")
    assert run.returncode == 0, run.stderr
    report = report_of(tmp_path / "a")
    ids = [t["id"] for t in report["traces"]]
    assert len(ids) == 2 and set(ids) <= set(TURNS)
    assert [t["turns"] for t in report["traces"]] == [min(2, TURNS[i]) for i in ids]
    assert len(model_requests(model)) == 2 * sum(min(2, TURNS[i]) for i in ids)
    again = live(f"{model.url}/v1", tmp_path / "b", "--sample", "2", "--seed", "7", "--max-turns", "1")
    assert again.returncode == 0, again.stderr
    assert [t["id"] for t in report_of(tmp_path / "b")["traces"]] == ids  # the same seed, the same traces


def test_a_refused_key_stops_in_one_line(upstream, tmp_path):
    async def handler(request, rec):
        key = rec.headers["authorization"].removeprefix("Bearer ")  # quoted back whole: never printed
        return JSONResponse(
            {"error": {"message": f"Incorrect API key provided: {key}", "type": "invalid_request_error"}},
            status_code=401,
        )

    upstream.handler = handler
    run = live(f"{upstream.url}/v1", tmp_path)
    assert run.returncode == 1
    # (without tiktoken's encodings, as on a clean clone, replay says so first: a line of its own)
    lines = [line for line in run.stderr.strip().splitlines() if not line.startswith("tiktoken encoding ")]
    assert len(lines) == 1 and "key was refused" in lines[0] and "HTTP 401" in lines[0], run.stderr
    assert "Incorrect API key provided: [the key]" in lines[0] and KEY not in run.stderr
    assert len(upstream.requests) == 1  # the first turn's raw request, then nothing
    journal = tmp_path / "live.jsonl"
    assert not journal.exists() or journal.read_text() == ""  # a refused turn is not recorded: a rerun sends it


def test_rate_limits_are_retried_and_server_errors_counted_as_failed(upstream, tmp_path):
    limited = {"left": 2}

    async def handler(request, rec):
        if b"List the files." in rec.body:  # conv-gamma's turns: the upstream keeps failing
            return JSONResponse({"error": {"message": "overloaded"}}, status_code=503, headers={"retry-after": "0"})
        if rec.path.endswith("/chat/completions") and limited["left"]:
            limited["left"] -= 1
            return JSONResponse({"error": {"message": "slow down"}}, status_code=429, headers={"retry-after": "0"})
        return await attentive_handler(request, rec)

    upstream.handler = handler
    run = live(f"{upstream.url}/v1", tmp_path, "--mode", "off")
    assert run.returncode == 0, run.stderr
    o = report_of(tmp_path)["overall"]
    assert (o["turns"], o["compared"], o["failed"], o["failed_raw"]) == (9, 7, 2, 2)
    assert "503" in o["errors_by_status"] and o["first_error"].startswith("conv-gamma turn 1 (raw): HTTP 503")
    assert o["agreement"] == 1.0  # over the compared turns; the failed ones are counted apart
    records = [json.loads(line) for line in (tmp_path / "live.jsonl").read_text().splitlines()]
    first = next(r for r in records if r["kind"] == "turn")
    assert first["status"] == 200 and first["attempts"] == 3  # two 429s, then the answer
    failed = [r for r in records if r["kind"] == "turn" and r["trace"] == "conv-gamma" and r["arm"] == "raw"]
    assert all(r["status"] == 503 and r["attempts"] == 4 for r in failed)
    assert "failed: 2 raw" in run.stdout


@pytest.mark.parametrize("format", ["anthropic", "responses"])
def test_the_other_formats(model, tmp_path, format):
    upstream, name = (model.url, "claude-sonnet-4") if format == "anthropic" else (f"{model.url}/v1", "gpt-4o")
    run = live(upstream, tmp_path, "--format", format, "--max-total-tokens", "3000", "--model", name)
    assert run.returncode == 0, run.stderr
    seen = model_requests(model, format)
    assert len(seen) == 18 and all(
        r.headers["x-api-key"] == KEY if format == "anthropic" else r.headers["authorization"] == f"Bearer {KEY}"
        for r in seen
    )
    o = report_of(tmp_path)["overall"]
    assert o["compared"] == 9 and o["agreement"] < 1.0 and o["raw"]["usd"] > o["proxy"]["total_usd"] > 0
    assert_key_kept(run, tmp_path)


def test_through_a_running_proxy(model, make_proxy, tmp_path):
    with make_proxy(mode="off") as proxy:
        run = live(f"{model.url}/v1", tmp_path, "--target", f"{proxy}/v1/")
    assert run.returncode == 0, run.stderr
    report = report_of(tmp_path)
    assert report["proxy"] == f"{proxy}/v1/" and report["overall"]["agreement"] == 1.0
    assert all(t["proxy"]["measured"] for t in report["traces"]) and report["overall"]["unmeasured_traces"] == 0
    assert len(model_requests(model)) == 18


def test_an_upstream_nobody_answers_is_one_line(tmp_path):
    run = live(f"http://127.0.0.1:{free_port()}/v1", tmp_path)
    assert run.returncode == 1
    assert "cannot reach the upstream" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (("--upstream", "api.openai.com/v1"), "--upstream"),
        (("--concurrency", "2"), "--live cannot be combined with --concurrency"),
        (("--compare",), "--live cannot be combined with --compare"),
    ],
)
def test_bad_arguments_are_usage_errors(tmp_path, args, message):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "proxy",
            "replay",
            str(TRACES),
            "--live",
            "--api-key",
            KEY,
            "--out",
            str(tmp_path),
            *args,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2 and message in run.stderr and "Traceback" not in run.stderr


def test_an_upstream_quoting_the_key_back_in_an_answer_never_gets_it_written(upstream, tmp_path):
    """A 200 answer holding the key (in its text, a tool call's arguments, a header the record
    reads): every record is written with the key replaced."""

    async def handler(request, rec):
        key = rec.headers["authorization"].removeprefix("Bearer ")
        answer = {
            "id": "c",
            "object": "chat.completion",
            "model": "gpt-4o",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": f"your key is {key}",
                        "tool_calls": [
                            {
                                "id": "t",
                                "type": "function",
                                "function": {"name": "echo", "arguments": json.dumps({"key": key})},
                            }
                        ],
                    },
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2},
        }
        return JSONResponse(answer, headers={"x-offload-action": key, "x-offload-tokens-before": key})

    upstream.handler = handler
    run = live(f"{upstream.url}/v1", tmp_path, "--mode", "off", "--max-turns", "1")
    assert run.returncode == 0, run.stderr
    assert_key_kept(run, tmp_path)
    records = [json.loads(line) for line in (tmp_path / "live.jsonl").read_text().splitlines()]
    assert any("[the key]" in r["action"]["text"] for r in records if r["kind"] == "turn")
