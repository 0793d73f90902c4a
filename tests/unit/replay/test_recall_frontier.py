"""bench/recall_frontier.py end to end on a tiny trace (its figures are the replay's: not asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from proxy.core import summary_index
from proxy.core.settings import OffloadSettings
from tests.unit.replay.test_runner import conversation

ROOT = Path(__file__).resolve().parents[3]


def test_recall_frontier_writes_its_chart_and_table(tmp_path):
    traces = tmp_path / "traces.jsonl"
    traces.write_text(
        "".join(
            json.dumps({**conversation(), "id": f"t{i}", "framework": framework}) + "\n"
            for i, framework in enumerate(["agent-a", "agent-b"])
        )
    )
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "recall_frontier.py"),
            "--traces",
            str(traces),
            "--out",
            str(tmp_path / "out"),
            "--first",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    written = json.loads((tmp_path / "out" / "recall_frontier.json").read_text())
    rows = written["settings"]
    assert [r["setting"].split(" (")[0] for r in rows][:2] == ["auto", "compact only"]
    assert "default" in rows[0]["setting"] and rows[0]["settings"]["index_chars"] == summary_index.INDEX_CHARS
    defaults = OffloadSettings()  # the rows marked default are the defaults
    for row in rows[:2]:
        assert row["settings"]["max_total_tokens"] == defaults.max_total_tokens
        chosen = OffloadSettings(**{k: v for k, v in row["settings"].items() if k != "index_chars"})
        assert chosen.tool_result_limit() == defaults.tool_result_limit()
    assert all(0 <= r["recall"] <= 1 and 0 < r["forwarded_ratio"] <= 1 for r in rows)
    assert (tmp_path / "out" / "recall_frontier.png").stat().st_size > 1000
    assert "fwd/raw" in done.stdout and "compact only" in done.stdout
    assert len(rows) == 3 and set(rows[0]["by_framework"]) == {"agent-a", "agent-b"}
    held = written["leave_one_framework_out"]["auto"]
    assert [h["framework"] for h in held["held_out"]] == ["agent-a", "agent-b"] and "recall" in held["pooled"]
    assert "leave one framework out, auto:" in done.stdout and "pooled" in done.stdout
