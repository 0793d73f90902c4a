"""`python -m proxy replay … --target URL` against a real proxy (in front of the fake upstream):
every turn reaches the upstream, each conversation is a session in the proxy's statistics, the
printed totals are the sum of the proxy's headers, and failures are one line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx2
import pytest
from starlette.responses import JSONResponse

from proxy.replay._target import session_id
from tests.harness.servers import default_handler, free_port, is_summary_call, snapshot_answer

ROOT = Path(__file__).resolve().parents[2]
TRACES = Path(__file__).parent / "fixtures" / "replay_target.jsonl"  # 3 conversations: 4, 3 and 2 turns
TURNS = {"conv-alpha": 4, "conv beta/1": 3, "conv-gamma": 2}


@pytest.fixture(scope="module")
def target(make_proxy):
    """A proxy whose trigger is low enough for the fixture's big tool result to be compacted."""
    with make_proxy(max_total_tokens=3000) as url:
        yield url


@pytest.fixture
def answering(upstream):
    """The fake upstream: summaries get a snapshot, every other request its default answer."""

    async def handler(request, rec):
        return snapshot_answer(rec) if is_summary_call(rec) else await default_handler(request, rec)

    upstream.handler = handler
    return upstream


def replay(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    return subprocess.run(
        [sys.executable, "-m", "proxy", "replay", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def auth(format: str, key: str) -> dict[str, str]:
    return (
        {"x-api-key": key, "anthropic-version": "2023-06-01"}
        if format == "anthropic"
        else {"Authorization": f"Bearer {key}"}
    )


def sessions_of(proxy: str, format: str, key: str, expected: int) -> dict[str, dict]:
    """The key's sessions by id, once `expected` of them hold all their turns (the recorder
    writes about once a second)."""
    deadline = time.monotonic() + 10
    while True:
        answer = httpx2.get(f"{proxy}/v1/offload/sessions", headers=auth(format, key), timeout=5)
        assert answer.status_code == 200, answer.text
        rows = {row["id"]: row for row in answer.json()["data"]}
        if len(rows) >= expected and sum(r["turns"] for r in rows.values()) >= sum(TURNS.values()):
            return rows
        assert time.monotonic() < deadline, f"sessions not recorded: {rows}"
        time.sleep(0.2)


def printed_totals(stdout: str) -> tuple[int, int]:
    match = re.search(r"raw tokens (\d+), forwarded tokens (\d+)", stdout)
    assert match, stdout
    return int(match[1]), int(match[2])


@pytest.mark.parametrize("format", ["chat", "anthropic"])
def test_a_trace_lands_on_the_proxys_statistics(target, answering, tmp_path, format):
    key = f"sk-replay-{format}-{uuid.uuid4().hex[:8]}"  # a namespace of this test's own
    run = replay(
        str(TRACES),
        "--target",
        f"{target}/v1/",
        "--api-key",
        key,
        "--format",
        format,
        "--concurrency",
        "2",
        "--out",
        str(tmp_path / "out"),
    )
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr

    # (a) the upstream got every turn, with the caller's key and without the X-Offload headers
    seen = answering.messages_requests() if format == "anthropic" else answering.chat_requests()
    assert len(seen) == sum(TURNS.values())
    for rec in seen:
        assert not any(name.startswith("x-offload") for name in rec.headers)
        assert (rec.headers.get("x-api-key") if format == "anthropic" else rec.headers["authorization"]) == (
            key if format == "anthropic" else f"Bearer {key}"
        )
    bodies = [rec.json() for rec in seen]
    assert any("ref=" in json.dumps(body) for body in bodies)  # the big tool result was offloaded

    # (b) one session per conversation, with its turns
    rows = sessions_of(target, format, key, len(TURNS))
    assert {session_id(cid): n for cid, n in TURNS.items()} == {sid: row["turns"] for sid, row in rows.items()}
    assert session_id("conv beta/1") != "conv beta/1"  # an id outside the header's pattern, cleaned up

    # (c) printed totals = Σ the proxy's headers (report.json, per turn) = its own statistics
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    turns = [t for conv in report["conversations"] for t in conv["per_turn"]]
    assert len(turns) == sum(TURNS.values()) and all(t["status"] == 200 for t in turns)
    raw, forwarded = printed_totals(run.stdout)
    assert (raw, forwarded) == (sum(t["tokens_before"] for t in turns), sum(t["tokens_after"] for t in turns))
    assert (raw, forwarded) == (
        sum(r["tokens_before"] for r in rows.values()),
        sum(r["tokens_after"] for r in rows.values()),
    )
    assert forwarded < raw
    actions: dict[str, int] = {}
    for row in rows.values():
        for name, n in row["actions"].items():
            actions[name] = actions.get(name, 0) + n
    assert report["overall"]["actions"] == {name: n for name, n in actions.items() if n}
    assert "compact" in report["overall"]["actions"]
    assert "errors: 0" in run.stdout and report["overall"]["errors"] == 0


def test_failed_turns_are_counted_not_fatal(target, upstream, tmp_path):
    async def handler(request, rec):
        if b"List the files." in rec.body:  # conv-gamma's two turns
            return error_answer(500, "the upstream broke")
        return await default_handler(request, rec)

    upstream.handler = handler
    run = replay(str(TRACES), "--target", target, "--api-key", "sk-replay-errors", "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    o = report["overall"]
    assert (o["turns"], o["answered"], o["errors"]) == (9, 7, 2) and o["errors_by_status"] == {"500": 2}
    assert o["first_error"].startswith("conv-gamma turn 1: HTTP 500: ") and "the upstream broke" in o["first_error"]
    assert "errors: 2 of 9 turns (HTTP 500 × 2); first: conv-gamma turn 1: HTTP 500" in run.stdout


def test_every_turn_failing_exits_non_zero(target, upstream):
    async def handler(request, rec):
        return error_answer(503, "down for maintenance")

    upstream.handler = handler
    run = replay(str(TRACES), "--target", target, "--api-key", "sk-replay-down")
    assert run.returncode == 1
    assert "errors: 9 of 9 turns" in run.stdout
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("offload-proxy replay: every turn failed (9 of 9); first: conv-alpha turn 1: HTTP 503")
    assert "Traceback" not in run.stderr


def test_an_unreachable_proxy_is_one_line():
    port = free_port()  # nothing listens there
    run = replay(str(TRACES), "--target", f"http://127.0.0.1:{port}/v1", "--api-key", "k", timeout=60)
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.startswith(f"offload-proxy replay: cannot reach the proxy at http://127.0.0.1:{port} (")
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--redis-url", "redis://127.0.0.1:1/0"], "--target cannot be combined with --redis-url"),
        (
            ["--inline-summaries", "--max-total-tokens", "3000"],
            "--target cannot be combined with --inline-summaries, --max-total-tokens",
        ),
        (
            ["--upstream", "http://x", "--data-dir", "d", "--summary-delay-ms", "5"],
            "--target cannot be combined with --data-dir, --upstream, --summary-delay-ms",
        ),
    ],
)
def test_in_process_options_with_target_are_argparse_errors(extra, message):
    run = replay(str(TRACES), "--target", "http://127.0.0.1:9", "--api-key", "k", *extra, timeout=60)
    assert run.returncode == 2 and "usage:" in run.stderr and message in run.stderr, run.stderr


def error_answer(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "server_error"}}, status_code=status)
