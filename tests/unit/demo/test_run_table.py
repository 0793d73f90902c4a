"""The demo's tables: one row per turn (every format's forwarded tokens), the totals per format."""

from __future__ import annotations

from proxy.demo._run import FormatRun, steps, totals, totals_table, turn_table
from proxy.replay._target import TurnResult

MESSAGES = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": "fix it"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "run", "arguments": '{"command": "pytest -v"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "1 failed"},
    {"role": "assistant", "content": "done"},
]


def runs() -> list[FormatRun]:
    turns = [TurnResult(200, 100, 100, "none"), TurnResult(200, 1000, 400, "compact")]
    return [
        FormatRun("chat", "/v1/chat/completions", "s-chat", turns, [0, 1]),
        FormatRun("anthropic", "/v1/messages", "s-anthropic", [turns[0], TurnResult(502, error="x")], [0]),
    ]


def two_formats(*runs: tuple[str, str, list[TurnResult]]) -> str:
    """The turn table of two turns in each format given (format, path, its turns), no reloads."""
    return turn_table(
        [FormatRun(name, path, f"s-{name}", turns, [0, 0]) for name, path, turns in runs], steps(MESSAGES)
    )


def test_steps_name_what_the_agent_had_just_run():
    assert steps(MESSAGES) == ["(the user's message)", "run pytest -v"]


def test_one_row_per_turn_with_each_formats_forwarded_tokens():
    table = turn_table(runs(), steps(MESSAGES)).splitlines()
    assert table[3].split() == ["1", "(the", "user's", "message)", "100", "100", "100", "1.000", "none", "0/0"]
    assert table[4].split() == [
        "2",
        "run",
        "pytest",
        "-v",
        "1000",
        "400",
        "0",
        "0.400",
        "compact",
        "|",
        "HTTP",
        "502",
        "1/?",
    ]


def test_totals_per_format_and_unknown_reloads():
    chat, anthropic = map(totals, runs())
    assert (chat["raw"], chat["forwarded"], chat["ratio"], chat["compacted"], chat["reloads"]) == (
        1100,
        500,
        "0.455",
        1,
        1,
    )
    assert anthropic["errors"] == 1 and anthropic["reloads"] == "?"  # a turn's statistics were not read
    table = totals_table(
        runs(),
        {
            "requests": 4,
            "tokens_saved": 600,
            "summaries": {"made": 1, "reused": 2},
            "reload_rounds": 1,
            "prefix_reuse": 0.9,
        },
    )
    assert "summaries made 1 (reused 2), reload rounds 1" in table


def test_the_ratio_column_says_whose_it_is():
    header = turn_table(runs(), steps(MESSAGES)).splitlines()[1]
    assert header.split()[-4:] == ["anthropic", "chat/raw", "action", "reloads"]
    assert "ratio" not in header


def test_the_legend_explains_the_actions_shown_and_only_those():
    pending = [TurnResult(200, 100, 100, "compress-pending"), TurnResult(200, 1000, 300, "compact+compress")]
    landed = [TurnResult(200, 100, 40, "compress"), TurnResult(200, 1000, 300, "compact+compress")]
    table = two_formats(("chat", "/v1/chat/completions", pending), ("responses", "/v1/responses", landed))
    lines = table.splitlines()
    assert "compress-pending | compress" in lines[3]
    legend = " ".join(line.strip() for line in lines[5:])
    assert legend.startswith("raw, chat/raw: the chat format's raw tokens and its forwarded / raw")
    assert (
        "compress-pending = a summary of older turns being made in the background, the turn forwarded "
        "without it" in legend
    )
    assert "compress = older turns forwarded as their summary" in legend
    assert "compact = large tool results stored" in legend and "a+b = both" in legend
    assert "a | b = the formats' actions differ at that turn (in the order chat, responses, each once)" in legend
    assert "reloads: the reload rounds the (fake) model ran, per format (chat/responses)" in legend
    for unseen in ("none =", "emulated-compaction", "context-edits", "HTTP ="):
        assert unseen not in legend
    assert max(map(len, lines[5:])) <= 112


def test_the_reloads_column_stays_aligned_when_the_formats_actions_differ():
    wide = [TurnResult(200, 100, 100, "none"), TurnResult(200, 1000, 400, "compact+compress-pending")]
    other = [TurnResult(200, 100, 100, "none"), TurnResult(200, 1000, 400, "compress")]
    table = two_formats(("chat", "/v1/chat/completions", wide), ("anthropic", "/v1/messages", other)).splitlines()
    header, first, second = table[1], table[3], table[4]
    assert "compact+compress-pending | compress" in second
    assert {row.rindex(" ") for row in (first, second)} == {header.rindex(" ")}  # reloads starts where its header does
