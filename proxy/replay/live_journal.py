"""`replay --live`'s journal: one JSON line per turn and arm, appended as each answer comes.

Each record is keyed by the trace (its position in the file and its id), the turn (1-based), the
arm ("raw" or "proxy") and that arm's configuration (`arm_config`: a short hash of what decides
its answers: format, upstream, model, and for the proxy arm its settings or target; never the
key). A rerun with the same output folder skips the turns whose key is there; a record of
another configuration is kept in the file, apart: not skipped, not counted, reported. A line that
is not a record (a run killed mid-write) is skipped and counted.

Beside the turns, a "session" record per trace holds the tokens the proxy's statistics billed
in that trace's session, per call (`turn`, `summary`, `keepalive`; the last one read wins).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy.replay.live_compare import Action

FILE = "live.jsonl"
ARMS = ("raw", "proxy")


def arm_config(values: dict[str, Any]) -> str:
    """A short, stable hash of an arm's configuration (a JSON object of plain values)."""
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:16]


def turn_key(record: dict[str, Any]) -> tuple[int, str, int, str, str]:
    return (
        int(record["position"]),
        str(record["trace"]),
        int(record["turn"]),
        str(record["arm"]),
        str(record["config"]),
    )


TEXTS = ("error", "offload_action", "tokens_before", "tokens_after", "reload_rounds")  # as `record_of` writes them


def _number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _check_figures(record: dict[str, Any]) -> None:
    """ValueError unless a turn record's figures are of the types the report reads."""
    bill, usd = record.get("bill"), record.get("usd")
    if type(record.get("status")) is not int or (usd is not None and not _number(usd)):
        raise ValueError("not a status or a cost")
    if bill is not None and not (isinstance(bill, dict) and all(type(n) is int for n in bill.values())):
        raise ValueError("not token counts")
    if not all(record.get(name) is None or isinstance(record[name], str) for name in TEXTS):
        raise ValueError("not text")


@dataclass
class Journal:
    """The records of one output folder: those of the configurations of this run, by key."""

    path: Path
    configs: dict[str, str]  # arm → its configuration hash in this run
    turns: dict[tuple[int, str, int, str, str], dict[str, Any]] = field(default_factory=dict)
    sessions: dict[tuple[int, str, str], dict[str, Any]] = field(default_factory=dict)
    other_configs: int = 0  # answers (turn records) of another configuration, kept apart
    unreadable: int = 0  # lines that are not a record

    @classmethod
    def open(cls, out: Path, configs: dict[str, str]) -> Journal:
        journal = cls(out / FILE, configs)
        if journal.path.exists():
            for line in journal.path.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.strip():
                    journal._read(line)
        return journal

    def _read(self, line: str) -> None:
        try:
            record = json.loads(line)
            kind, arm, config = record["kind"], record["arm"], record["config"]
            if self.configs.get(arm) != config:
                self.other_configs += kind == "turn"
            elif kind == "turn":
                if record.get("action") is not None:
                    Action.from_dict(record["action"])  # what the report reads back
                _check_figures(record)
                self.turns[turn_key(record)] = record
            elif kind == "session":
                calls = record["calls"]
                if not all(isinstance(n, int) for c in calls.values() for n in c.values()):
                    raise ValueError("not token counts")
                self.sessions[(int(record["position"]), str(record["trace"]), str(config))] = record
            else:
                self.unreadable += 1
        except (ValueError, KeyError, TypeError, AttributeError):
            self.unreadable += 1

    def done(self, *, position: int, trace: str, turn: int, arm: str) -> dict[str, Any] | None:
        """The record of this turn and arm in this run's configuration, if any."""
        return self.turns.get((position, trace, turn, arm, self.configs[arm]))

    def append(self, record: dict[str, Any]) -> None:
        """Write one record (a line, flushed) and keep it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
        if record["kind"] == "turn":
            self.turns[turn_key(record)] = record
        else:
            self.sessions[(int(record["position"]), str(record["trace"]), str(record["config"]))] = record
