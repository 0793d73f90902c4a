"""`replay --compare` on small conversations of our own: the proxy beside observation masking and
middle-out truncation, with the replay's own figures, printed and in report.json."""

from __future__ import annotations

import json

import pytest

from proxy.cli import main
from tests.harness.history import agent_history

PROXY = "offload proxy (mode auto)"
MASKING, MIDDLE_OUT = "observation masking (last 3)", "middle-out (3000 tokens)"


def conversation(name: str, steps: int) -> dict:
    """An agent that names, in each step, a value only the previous tool result showed."""
    messages = agent_history(steps=steps, lines=60)
    out = messages[:2]
    for k in range(steps):
        call, result = messages[2 + 2 * k], messages[3 + 2 * k]
        if k:
            call = {**call, "content": f"step{k - 1}/mod{k}.py had value={k * 7}: next"}
        out += [call, result]
    out.append({"role": "assistant", "content": f"done: step{steps - 1}/mod3.py fixed"})
    return {"id": name, "messages": out}


@pytest.mark.parametrize("format", ["chat", "anthropic"])
def test_compare_prints_and_writes_the_strategies_side_by_side(tmp_path, capsys, format):
    traces = tmp_path / "conversations.jsonl"
    traces.write_text("\n".join(json.dumps(conversation(f"conv-{n}", 12 + n)) for n in range(2)))
    out = tmp_path / "out"
    main(
        [
            "replay",
            str(traces),
            "--compare",
            "--mask-keep",
            "3",
            "--format",
            format,
            "--out",
            str(out),
            "--max-total-tokens",
            "3000",
        ]
    )
    report = json.loads((out / "report.json").read_text())
    rows = report["compare"]
    assert list(rows) == ["raw history", PROXY, MASKING, MIDDLE_OUT]
    raw = rows["raw history"]
    assert (raw["forwarded_ratio"], raw["prefix_reuse"], raw["cache_cost_ratio"], raw["recall"]) == (1, 1, 1, 1)
    assert raw["raw_tokens"] == report["overall"]["raw_tokens"]  # counted as the replay counts
    for figure in ("forwarded_ratio", "prefix_reuse", "cache_cost_ratio", "recall"):
        assert rows[PROXY][figure] == report["overall"][figure]  # the proxy's row is the replay's own
    for name in (MASKING, MIDDLE_OUT):
        assert rows[name]["raw_tokens"] == raw["raw_tokens"]
        assert 0 < rows[name]["forwarded_ratio"] < 0.8, name
        assert rows[name]["recall_identifiers"] == raw["recall_identifiers"] > 0
    assert rows[MASKING]["prefix_reuse"] < rows[PROXY]["prefix_reuse"]  # the mask slides every turn
    printed = capsys.readouterr().out
    table = printed[printed.index("strategy ") :]
    for name in rows:
        assert name in table
    line = next(line for line in table.splitlines() if line.startswith(MIDDLE_OUT))
    assert line.split()[-3:] == [str(rows[MIDDLE_OUT]["recall_found"]), "of", str(raw["recall_identifiers"])]


def test_compare_is_refused_with_target(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["replay", "x.jsonl", "--target", "http://127.0.0.1:9", "--api-key", "k", "--compare"])
    assert exit.value.code == 2 and "--compare" in capsys.readouterr().err


def test_mask_keep_must_be_a_count(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["replay", "x.jsonl", "--compare", "--mask-keep", "-1"])
    assert exit.value.code == 2 and "expected a number of tool results" in capsys.readouterr().err


def test_mask_keep_needs_compare(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["replay", "x.jsonl", "--mask-keep", "5"])
    assert exit.value.code == 2 and "--mask-keep applies to --compare only" in capsys.readouterr().err


def test_without_the_replay_extra_the_missing_charts_are_said_once_naming_it(tmp_path):
    """matplotlib and tqdm (the `replay` extra) absent, as in the server's own install: the
    figures, report.json and the comparison all there, and one line saying how to get charts."""
    import subprocess
    import sys

    traces = tmp_path / "conversations.jsonl"
    traces.write_text(json.dumps(conversation("conv-0", 12)))
    out = tmp_path / "out"
    run = (
        "import sys; sys.modules['matplotlib'] = sys.modules['tqdm'] = None  # not installed\n"
        "from proxy.cli import main; main(sys.argv[1:])"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            run,
            "replay",
            str(traces),
            "--compare",
            "--out",
            str(out),
            "--max-total-tokens",
            "3000",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("matplotlib is not installed") == 1, done.stderr
    assert (
        "pip install 'offload-proxy[replay]'" in done.stderr and ".venv/bin/pip install -e '.[replay]'" in done.stderr
    )
    assert "strategy " in done.stdout and json.loads((out / "report.json").read_text())["compare"]
    assert not list(out.glob("*.png"))
