"""`serve` and `replay` find the offline tiktoken encodings themselves, and replay says loudly when it
counts by estimate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from proxy.core import tokens
from proxy.core.tokens import discover_tiktoken_cache, tiktoken_cache_candidates

REPO = Path(__file__).resolve().parents[2]


def test_unset_cache_dir_is_discovered_and_exported(tmp_path):
    shared = tmp_path / "shared" / "tiktoken"
    shared.mkdir(parents=True)
    environ: dict[str, str] = {}
    assert discover_tiktoken_cache(environ, [tmp_path / "missing", shared]) == str(shared)
    assert environ == {"TIKTOKEN_CACHE_DIR": str(shared)}  # exported: uvicorn workers inherit it


def test_explicit_cache_dir_wins(tmp_path):
    shared = tmp_path / "shared" / "tiktoken"
    shared.mkdir(parents=True)
    environ = {"TIKTOKEN_CACHE_DIR": "/somewhere/else"}
    assert discover_tiktoken_cache(environ, [shared]) == "/somewhere/else"
    assert environ == {"TIKTOKEN_CACHE_DIR": "/somewhere/else"}
    environ = {"DATA_GYM_CACHE_DIR": "/gym"}  # tiktoken's other variable is respected too
    assert discover_tiktoken_cache(environ, [shared]) == "/gym" and "TIKTOKEN_CACHE_DIR" not in environ


def test_nothing_found_leaves_tiktoken_default(tmp_path):
    environ: dict[str, str] = {}
    assert discover_tiktoken_cache(environ, [tmp_path / "missing"]) is None and environ == {}


def test_default_candidate_is_shared_next_to_the_repo():
    assert tiktoken_cache_candidates() == [REPO.parent / "shared" / "tiktoken"]


def small_conversation() -> dict:
    return {
        "id": "tiny",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "hi " * 50},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "again"},
            {"role": "assistant", "content": "yes"},
        ],
    }


def test_python_m_proxy_replay_finds_the_encodings_like_serve(tmp_path):
    """As documented: no TIKTOKEN_CACHE_DIR, run from anywhere."""
    traces = tmp_path / "c.jsonl"
    traces.write_text(json.dumps(small_conversation()) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "replay", str(traces), "--out", str(tmp_path / "out")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    counting = json.loads((tmp_path / "out" / "report.json").read_text())["token_counting"]
    shared = REPO.parent / "shared" / "tiktoken"
    if shared.is_dir():  # the layout of the development machines and CI
        assert counting["method"] == "tiktoken", counting
        assert counting["encodings"][0]["cache_dir"] == str(shared.resolve())
        assert "ESTIMATE" not in done.stderr and "o200k_base via tiktoken" in done.stdout
    else:  # elsewhere: whichever it is, report.json and stderr agree
        assert (counting["method"] == "estimate") == ("ESTIMATE" in done.stderr)


def test_replay_says_loudly_when_it_counts_by_estimate(tmp_path, monkeypatch, capsys):
    from proxy.cli import main

    monkeypatch.setattr(tokens, "load_encoder", lambda name: tokens.EstimateEncoder())
    monkeypatch.setattr(tokens, "_counters", {})
    monkeypatch.setattr(tokens, "_cache", tokens._CountCache(1000))  # keep estimates out of the real cache
    traces = tmp_path / "c.jsonl"
    traces.write_text(json.dumps(small_conversation()) + "\n")
    main(["replay", str(traces), "--out", str(tmp_path / "out"), "--data-dir", str(tmp_path / "d")])
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["token_counting"]["method"] == "estimate"
    assert report["token_counting"]["encodings"][0]["encoding"] == "o200k_base"
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if "ESTIMATES" in line]
    assert warnings and "o200k_base" in warnings[0] and "TIKTOKEN_CACHE_DIR" in warnings[0]
    assert "tokens: ESTIMATES" in captured.out


def test_replay_reports_tiktoken_when_loaded(tmp_path, capsys):
    from proxy.cli import main
    from proxy.core.tokens import EstimateEncoder, counter_for_encoding

    traces = tmp_path / "c.jsonl"
    traces.write_text(json.dumps(small_conversation()) + "\n")
    main(["replay", str(traces), "--out", str(tmp_path / "out"), "--data-dir", str(tmp_path / "d")])
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    loaded = not isinstance(counter_for_encoding("o200k_base").encoder, EstimateEncoder)
    assert report["token_counting"]["method"] == ("tiktoken" if loaded else "estimate")
    assert ("ESTIMATES" in capsys.readouterr().err) == (not loaded)


def test_replay_by_estimate_says_it_once_and_its_charts_say_so(tmp_path):
    """The estimate was said three times (the counter's log line, before and after the table), and
    the chart's axis still read o200k_base. An empty cache and a proxy that refuses every
    download make the encoding unloadable anywhere."""
    traces = tmp_path / "c.jsonl"
    traces.write_text(json.dumps(small_conversation()) + "\n")
    (tmp_path / "empty").mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TIKTOKEN_CACHE_DIR": str(tmp_path / "empty"),
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "",
    }
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "replay", str(traces), "--out", str(tmp_path / "out")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "estimat" in line.lower()]
    assert len(said) == 1 and "ESTIMATES" in said[0] and "TIKTOKEN_CACHE_DIR" in said[0], said
    assert "tokens: ESTIMATES" in done.stdout  # the table's own line
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    from proxy.replay._report import counted_as

    assert counted_as(report) == "estimated, ~4 bytes each"
    assert (
        counted_as({"token_counting": {"method": "tiktoken", "encodings": [{"encoding": "o200k_base"}]}})
        == "o200k_base"
    )
