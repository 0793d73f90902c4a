"""`replay --live`'s journal: records kept by trace, turn, arm and configuration; a rerun finds
them, another configuration's are kept apart, a torn line is skipped."""

from __future__ import annotations

import json

from proxy.replay.live_journal import FILE, Journal, arm_config


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
    from proxy.replay.live_report import figures

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
