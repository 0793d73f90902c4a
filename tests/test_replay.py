"""The replay command on small conversations of our own."""

from __future__ import annotations

import json

import pytest

from proxy.cli import main
from proxy.replay import common_prefix, prefix_reuse, turns_of
from tests.history import agent_history


def conversation(name: str, steps: int) -> dict:
    messages = agent_history(steps=steps, lines=120)
    for i in range(steps):  # medium chatter that compaction cannot shrink
        messages += [{"role": "user", "content": f"note {i} " + "detail " * 150},
                     {"role": "assistant", "content": f"ack {i} " + "reasoning " * 150}]
    messages.append({"role": "assistant", "content": "done"})
    return {"id": name, "messages": messages, "tools": [{"type": "function", "function": {
        "name": "bash", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}}]}


def test_turns_are_requests_before_each_assistant_message():
    messages = [{"role": "system"}, {"role": "user"}, {"role": "assistant"}, {"role": "tool"}, {"role": "assistant"}]
    assert turns_of(messages) == [messages[:2], messages[:4]]


def test_prefix_reuse_definition():
    a, b, c = {"x": 1}, {"x": 2}, {"x": 3}
    assert common_prefix([a, b], [a, b, c]) == 2
    assert prefix_reuse([[a], [a, b], [a, b, c]], [[10], [10, 5], [10, 5, 1]]) == 1.0  # raw history
    assert prefix_reuse([[a, b], [c]], [[10, 5], [1]]) == 0.0
    assert prefix_reuse([[a, b], [a, c]], [[10, 30], [10, 30]]) == 0.25


def test_replay_writes_report_and_charts(tmp_path, capsys):
    traces = tmp_path / "conversations.jsonl"
    traces.write_text("\n".join(json.dumps(conversation(f"conv-{n}", 8 + n)) for n in range(2)))
    out = tmp_path / "out"
    main(["replay", str(traces), "--out", str(out), "--max-total-tokens", "3000", "--data-dir", str(tmp_path / "d")])
    report = json.loads((out / "report.json").read_text())
    assert len(report["conversations"]) == 2
    for entry in [report["overall"], *report["conversations"]]:
        for key in ("turns", "raw_tokens", "forwarded_tokens", "prefix_reuse", "max_forwarded_turn", "summaries",
                    "reload_exact_fraction", "ms_per_turn_cold", "ms_per_turn_steady"):
            assert key in entry
    o = report["overall"]
    assert o["forwarded_tokens"] < o["raw_tokens"] and o["summaries"] >= 2 and o["refs"] > 2
    assert o["reload_exact_fraction"] == 1.0 and o["turns_over_budget"] == 0
    assert 0.3 < o["prefix_reuse"] <= 1.0
    assert (out / "overall.png").stat().st_size > 1000 and (out / "conv-0.png").exists()
    printed = capsys.readouterr().out
    assert "OVERALL" in printed and "conv-1" in printed


TIMING = ("ms_per_turn_cold", "ms_per_turn_steady")


def without_timing(report: dict) -> dict:
    strip = lambda entry: {k: v for k, v in entry.items() if k not in TIMING}  # noqa: E731
    return {**report, "overall": strip(report["overall"]), "conversations": [strip(c) for c in report["conversations"]]}


def test_two_runs_give_identical_figures(tmp_path, capsys):
    traces = tmp_path / "conversations.jsonl"
    traces.write_text("\n".join(json.dumps(conversation(f"conv-{n}", 8 + n)) for n in range(2)))
    reports = []
    for run in range(2):
        out = tmp_path / f"out{run}"
        main(["replay", str(traces), "--out", str(out), "--max-total-tokens", "3000"])
        reports.append(json.loads((out / "report.json").read_text()))
    first, second = map(without_timing, reports)
    assert first["overall"]["refs"] > 2 and first["overall"]["summaries"] >= 2  # refs appear in the figures
    assert first == second
    for timing in TIMING:  # kept in the report, just not compared
        assert timing in reports[0]["overall"] and timing in reports[0]["conversations"][0]
    assert "already holds" not in capsys.readouterr().err


def test_rerun_on_the_same_data_dir_says_the_store_was_not_fresh(tmp_path, capsys):
    traces = tmp_path / "conversations.jsonl"
    traces.write_text(json.dumps(conversation("conv-0", 8)))
    reports = []
    for run in range(2):
        main(["replay", str(traces), "--out", str(tmp_path / f"out{run}"), "--max-total-tokens", "3000",
              "--data-dir", str(tmp_path / "d")])
        reports.append(json.loads((tmp_path / f"out{run}" / "report.json").read_text()))
    assert reports[0]["conversations"][0]["store_was_fresh"] is True
    assert reports[1]["conversations"][0]["store_was_fresh"] is False
    # the forwarded payloads are the same (same refs, same summaries, reused this time) ...
    assert reports[0]["conversations"][0]["forwarded_per_turn"] == reports[1]["conversations"][0]["forwarded_per_turn"]
    assert "already holds a replay of 'conv-0'" in capsys.readouterr().err


GOOD = json.dumps({"id": "ok", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})


@pytest.mark.parametrize("bad, expected", [
    ('{"id": "x", "turns": []}', 'line 3: the object has no "messages"'),
    ('[{"role": "user", "content": "hi"}]', 'line 3: expected a JSON object with a "messages" list, got a list'),
    ('{"messages": [', "line 3: not valid JSON"),
    ('{"messages": "hello"}', 'line 3: "messages" is a string, expected a list'),
    ('{"messages": [], "tools": {"a": 1}}', 'line 3: "tools" is an object, expected a list'),
])
def test_bad_line_is_a_one_line_error_naming_it(tmp_path, bad, expected):
    traces = tmp_path / "c.jsonl"
    traces.write_text(f"{GOOD}\n\n{bad}\n{GOOD}\n")  # line 2 is blank: numbers are the file's own
    with pytest.raises(SystemExit) as info:
        main(["replay", str(traces), "--out", str(tmp_path / "out")])
    message = str(info.value.code)
    assert message.startswith("offload-proxy replay: ") and f"c.jsonl {expected}" in message, message
    assert "\n" not in message
    assert not (tmp_path / "out").exists()


def test_bad_file_from_the_command_line_exits_non_zero_without_traceback(tmp_path):
    import subprocess
    import sys

    traces = tmp_path / "c.jsonl"
    traces.write_text(f"{GOOD}\n[1, 2]\n")
    done = subprocess.run([sys.executable, "-m", "proxy", "replay", str(traces), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith("line 2: expected a JSON object with a \"messages\" "
                                                         "list, got a list")
    missing = subprocess.run([sys.executable, "-m", "proxy", "replay", str(tmp_path / "nope.jsonl")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode != 0 and "Traceback" not in missing.stderr and "nope.jsonl" in missing.stderr
