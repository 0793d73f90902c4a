"""The benchmarks run end to end on tiny inputs (their numbers are not asserted: no timed tests)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.harness.history import agent_history

BENCH = Path(__file__).resolve().parents[2] / "bench"


def run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=120, cwd=BENCH.parent
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_passthrough():
    out = run("passthrough.py", "--requests", "5", "--concurrency", "2")
    assert "total ratio" in out and "first chunk" in out and "concurrent" in out


def test_concurrency():
    out = run("concurrency.py", "--concurrency", "3", "--requests", "6", "--repeats", "2", "--sequential", "4")
    assert "throughput ratio" in out and "0 errors" in out and "sequential" in out and "first chunk" in out


def test_big_history(tmp_path):
    traces = tmp_path / "traces.jsonl"
    traces.write_text("\n".join(json.dumps({"id": f"t{i}", "messages": agent_history(steps=4 + i)}) for i in range(2)))
    out = run("big_history.py", "--tokens", "30000", "--rounds", "1", "--repeats", "2", "--traces", str(traces))
    assert "back to back" in out and "compact" in out
    assert "[responses] conversation" in out and "responses/chat steady per-turn CPU" in out
    assert "[messages] conversation" in out and "messages/chat steady per-turn CPU" in out


def test_request_path(tmp_path):
    traces = tmp_path / "traces.jsonl"
    traces.write_text("\n".join(json.dumps({"id": f"t{i}", "messages": agent_history(steps=4 + i)}) for i in range(2)))
    out = run("request_path.py", "--tokens", "8000", "--format", "chat", "--traces", str(traces))
    counts = re.search(r"chat: (\d+) proxy modules ran code, (\d+) distinct module-to-module calls", out)
    assert counts and int(counts[1]) > 10 and int(counts[2]) > 10, out


def test_big_history_sweep_on_redis(tmp_path):
    traces = tmp_path / "traces.jsonl"
    traces.write_text("\n".join(json.dumps({"id": f"t{i}", "messages": agent_history(steps=4 + i)}) for i in range(2)))
    out = run(
        "big_history.py",
        "--sweep",
        "8000,60000",
        "--store",
        "redis",
        "--rounds",
        "1",
        "--repeats",
        "2",
        "--format",
        "both",
        "--traces",
        str(traces),
    )
    assert "store: Redis at redis://127.0.0.1:" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(("chat ", "responses "))]
    assert [r[0] for r in rows] == ["chat", "responses"] * 2
    assert len(rows[0]) == 7 and len(rows[2]) == 8  # the slope from the second size on


def test_scale():
    out = run("scale.py", "--streams", "10", "--chunks", "2", "--delay-ms", "1")
    assert "0 errors" in out and "peak RSS" in out


def test_worst_cases():
    out = run("worst_cases.py", "--repeats", "1", "--scale", "0.01", "--ranked", "200", "--deadline", "0.5")
    assert out.count("ratio") == 8 + 1 + 2 and "ranked pages of 200" in out and "runaway search" in out


def test_body_decoding():
    out = run("body_decoding.py", "--megabytes", "1")
    assert all(coding in out for coding in ("gzip", "deflate", "br", "zstd")) and "event-loop gap" in out


def test_computer_use(tmp_path):
    out = run(
        "computer_use.py",
        "--steps",
        "5",
        "--sessions",
        "1",
        "--rounds",
        "1",
        "--batches",
        "1",
        "--formats",
        "chat,anthropic",
        "--out",
        str(tmp_path),
    )
    assert "1 sessions x 5 steps" in out and "/healthz meanwhile" in out
    for fmt in ("chat", "anthropic"):  # every turn sent to a real serve too
        assert f"/healthz while the sessions are served ({fmt})" in out
        assert re.search(rf"  {fmt}: 5 turns served in .*, 0 errors, 0 summaries made", out)
    rows = [line.split() for line in out.splitlines() if line.split()[:2] in (["chat", "1"], ["anthropic", "1"])]
    assert len(rows) == 2 and all(row[6] == "1.00" for row in rows)  # reload exact
    assert all(0 < float(row[4]) and 0 < float(row[5]) for row in rows)  # the cache cost at both pricings
    assert "cheapest chat       anthropic  batch   1" in out and "cheapest over formats and pricings: batch 1" in out


def test_large_bodies():
    out = run(
        "large_bodies.py",
        "--messages",
        "3",
        "--parts",
        "3",
        "--huge-mb",
        "1",
        "--values",
        "1000",
        "--clients",
        "2",
        "--max-body-mb",
        "2",
        "--inflate-mb",
        "3",
        "--compact-mb",
        "0.05,0.2",
    )
    assert "/healthz while sending" in out and " -> 200 " in out
    for path in ("/offload", "/chat/completions", "/responses", "/messages"):
        for coding in ("br", "gzip", "zstd"):
            assert f"  {path} {coding}: 2 bodies of" in out and f"/healthz during {path} {coding} (" in out
    assert out.count("-> [413]") == 12  # past the limit once inflated
    assert "compact of a 0.2 MB message: 0.2" in out and "-> 200" in out and "(emulated-compaction)" in out
    assert "input_tokens: 2 x" in out and "-> [200]" in out
    assert out.count("(emulated-compaction)") == 4  # the two compacts, the threshold compactions streamed and not
    assert out.count("/healthz during") == 12 + 2 + 1 + 2 and "p99" in out


def test_fleet():
    out = run(
        "fleet.py",
        "--turns",
        "5",
        "--delays",
        "0",
        "--replicas",
        "1,2",
        "--gap",
        "0",
        "--synthetic",
        "--max-total-tokens",
        "3000",
    )
    rows = [line.split() for line in out.splitlines() if line.split()[:1] == ["0"]]
    assert "summary calls" in out and [row[1] for row in rows] == ["1", "2"]


def test_websocket():
    out = run("websocket.py", "--turns", "3", "--sessions", "3", "--history", "3")
    assert "websocket/http mean ratio" in out and "per connection" in out and "conversation" in out


def test_websocket_attacks():
    out = run(
        "websocket_attacks.py", "--frames", "2", "--mb", "2", "--clients", "2", "--items", "30000", "--parts", "2"
    )
    assert all(f"/healthz during {campaign}" in out for campaign in ("bomb", "warmup", "items", "held", "http"))
    assert "no extension (uncompressed)" in out and "too_many_messages" in out and "proxy RSS" in out


def test_fold_stall():
    out = run("fold_stall.py", "--rounds", "1", "--results", "4", "--lines", "200", "--other-mb", "0.05")
    assert out.count("plan of ") == 3 and "folded [0]" in out
    assert out.count("/healthz during") == 5 and "p99" in out
    assert "three at once: [200, 200, 200]" in out and "the other tenant's request meanwhile: 200" in out


def test_cache_control(tmp_path):
    traces = tmp_path / "traces.jsonl"
    traces.write_text(
        "\n".join(
            json.dumps({"id": f"t{i}", "framework": f"f{i}", "messages": agent_history(steps=3 + i)}) for i in range(2)
        )
    )
    out = run("cache_control.py", "--traces", str(traces), "--out", str(tmp_path / "out"), "--gaps", "mix:30s,0.5@10m")
    assert "OVERALL" in out and "targets (proxy <= 0.12" in out and "keep-alive and cold cuts" in out
    assert out.count("leave one framework out") == 2 and "keep-alive min tokens 4096" in out
    report = json.loads((tmp_path / "out" / "cache_control.json").read_text())
    assert set(report["bills"]["t0"]) == {"uncut", "cut"} and "4096" in report["bills"]["t0"]["cut"]["keepalive_sweep"]


def test_observe(tmp_path):
    traces = tmp_path / "traces.jsonl"
    traces.write_text(json.dumps({"id": "t0", "messages": agent_history(steps=3)}))
    out = run("observe.py", "--traces", str(traces), "--first", "1", "--rounds", "1", "--gap-ms", "0")
    assert out.count("ms/turn   to the last byte") == 3 and "observed plan / managed turn, CPU" in out
