"""The replay command on small conversations of our own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.cli import main
from proxy.core.summary_index import INDEX_CHARS
from proxy.replay._runner import common_prefix, prefix_reuse, turns_of
from tests.harness.history import agent_history


def conversation(name: str, steps: int) -> dict:
    messages = agent_history(steps=steps, lines=120)
    for i in range(steps):  # medium chatter that compaction cannot shrink
        messages += [
            {"role": "user", "content": f"note {i} " + "detail " * 150},
            {"role": "assistant", "content": f"ack {i} " + "reasoning " * 150},
        ]
    messages.append({"role": "assistant", "content": "done"})
    return {
        "id": name,
        "messages": messages,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "bash",
                    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
                },
            }
        ],
    }


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
        for key in (
            "turns",
            "raw_tokens",
            "forwarded_tokens",
            "prefix_reuse",
            "max_forwarded_turn",
            "summaries",
            "reload_exact_fraction",
            "ms_per_turn_cold",
            "ms_per_turn_steady",
        ):
            assert key in entry
    o = report["overall"]
    assert o["forwarded_tokens"] < o["raw_tokens"] and o["summaries"] >= 2 and o["refs"] > 2
    # summaries made in the background: a turn may go out above the budget while its summary is
    # made (how many depends on how tokens are counted), never above the hard limit
    assert o["reload_exact_fraction"] == 1.0 and o["max_forwarded_turn"] <= 2 * 3000 + 3000
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
        # inline: a background summary the first run made after a turn would be ready for the same
        # turn of the second run (which then forwards less: see the test below)
        main(
            [
                "replay",
                str(traces),
                "--out",
                str(tmp_path / f"out{run}"),
                "--max-total-tokens",
                "3000",
                "--data-dir",
                str(tmp_path / "d"),
                "--inline-summaries",
            ]
        )
        reports.append(json.loads((tmp_path / f"out{run}" / "report.json").read_text()))
    assert reports[0]["conversations"][0]["store_was_fresh"] is True
    assert reports[1]["conversations"][0]["store_was_fresh"] is False
    # the forwarded payloads are the same (same refs, same summaries, reused this time) ...
    assert reports[0]["conversations"][0]["forwarded_per_turn"] == reports[1]["conversations"][0]["forwarded_per_turn"]
    assert "already holds a replay of 'conv-0'" in capsys.readouterr().err


GOOD = json.dumps({"id": "ok", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})


@pytest.mark.parametrize(
    "bad, expected",
    [
        ('{"id": "x", "turns": []}', 'line 3: the object has no "messages"'),
        ('[{"role": "user", "content": "hi"}]', 'line 3: expected a JSON object with a "messages" list, got a list'),
        ('{"messages": [', "line 3: not valid JSON"),
        ('{"messages": "hello"}', 'line 3: "messages" is a string, expected a list'),
        ('{"messages": [], "tools": {"a": 1}}', 'line 3: "tools" is an object, expected a list'),
    ],
)
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
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "replay", str(traces), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .endswith('line 2: expected a JSON object with a "messages" list, got a list')
    )
    missing = subprocess.run(
        [sys.executable, "-m", "proxy", "replay", str(tmp_path / "nope.jsonl")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode != 0 and "Traceback" not in missing.stderr and "nope.jsonl" in missing.stderr


# ---------------------------------------------------------------- table and charts

SAME_HEAD = [
    "msa-deepseek_chat_test_1-100-django__django-11099",
    "msa-deepseek_chat_test_1-100-django__django-12708",
    "msa-deepseek_chat_test_1-100-django__django-13265",
]


def test_table_and_chart_labels_are_unique_when_ids_share_a_long_head():
    from proxy.replay._report import CHART_NAME_WIDTH, NAME_WIDTH, chart_names, unique_labels

    for width in (NAME_WIDTH, CHART_NAME_WIDTH, 18):
        labels = unique_labels(SAME_HEAD, width)
        assert len(set(labels)) == 3 and all(len(label) <= width for label in labels), labels
    assert unique_labels(SAME_HEAD, NAME_WIDTH)[0].endswith("django-11099")  # the distinguishing tail is kept
    assert unique_labels(["short", "short", "x" * 50, "x" * 50], 20) == [
        "short #1",
        "short #2",
        "xxxxxxxx…xxxxxxxx #3",
        "xxxxxxxx…xxxxxxxx #4",
    ]
    names = chart_names(["a/b", "a b", "overall", "z" * 100, "z" * 90, "cost"])
    assert len(set(names)) == 6 and "overall.png" not in names and "cost.png" not in names


def replay_report_for(ids: list[str], tmp_path, monkeypatch, capsys, steps: int = 6) -> tuple[dict, str, dict]:
    """Replay conversations with these ids; returns the report, the printed table and the saved figures."""
    import matplotlib.figure

    saved: dict = {}
    original = matplotlib.figure.Figure.savefig

    def record(fig, path, *args, **kwargs):
        saved[Path(path).name] = fig
        fig.canvas.draw()  # ticks as they are drawn
        return original(fig, path, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", record)
    traces = tmp_path / "c.jsonl"
    traces.write_text("\n".join(json.dumps({**conversation("x", steps), "id": i}) for i in ids))
    capsys.readouterr()
    main(["replay", str(traces), "--out", str(tmp_path / "out"), "--max-total-tokens", "3000"])
    return json.loads((tmp_path / "out" / "report.json").read_text()), capsys.readouterr().out, saved


def test_replay_table_and_overall_chart_tell_conversations_apart(tmp_path, monkeypatch, capsys):
    report, printed, saved = replay_report_for(SAME_HEAD, tmp_path, monkeypatch, capsys)
    rows = [line for line in printed.splitlines() if line.startswith("msa-")]
    assert len(rows) == 3 and len({row.split()[0] for row in rows}) == 3
    overall = saved["overall.png"].axes[0]
    labels = [t.get_text() for t in overall.get_xticklabels()]
    assert len(labels) == 3 and len(set(labels)) == 3 and all(label for label in labels)
    assert len([name for name in saved if name not in ("overall.png", "cost.png")]) == 3
    assert "cost.png" in saved  # where the cost goes: proxy/replay/_metrics.py
    assert all((tmp_path / "out" / name).stat().st_size > 1000 for name in saved)


def test_conversation_chart_shows_the_trigger_integer_turns_and_raw_on_top(tmp_path, monkeypatch, capsys):
    report, _, saved = replay_report_for(["short"], tmp_path, monkeypatch, capsys, steps=1)
    c = report["conversations"][0]
    assert c["forwarded_per_turn"] == c["raw_per_turn"]  # nothing offloaded: the two lines coincide
    ax = saved["short.png"].axes[0]
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks
    lines = {line.get_label(): line for line in ax.get_lines()}
    trigger = next(line for label, line in lines.items() if label.startswith("max_total_tokens"))
    assert set(trigger.get_ydata()) == {3000}
    raw, forwarded = lines["raw"], lines["forwarded"]
    assert list(raw.get_xdata()) == list(range(1, c["turns"] + 1))  # turn k is the k-th request
    assert raw.get_zorder() > forwarded.get_zorder() and raw.get_linestyle() == "--"
    assert ax.get_ylim()[1] > 3000  # the trigger line is inside the chart


# ---------------------------------------------------------------- --format responses


def agent_trace(steps: int = 40) -> dict:
    """A coding agent's trace in the shape of ../shared/traces: assistant text before some calls,
    calls without text, parallel calls, tool results of varied sizes, the user chiming in."""
    from tests.harness.history import big_text

    messages = [
        {"role": "system", "content": "You are a coding agent. Use bash."},
        {"role": "user", "content": "Fix the failing test in src/app. " * 5},
    ]
    made = 0
    for i in range(steps):
        text = None if i % 3 == 1 else f"Step {i}: " + "checking the next module and its tests; " * (5 + i % 7)
        ids = [f"call_{made + k}" for k in range(2 if i % 5 == 4 else 1)]
        made += len(ids)
        messages.append(
            {
                "role": "assistant",
                "content": text,
                "tool_calls": [
                    {
                        "id": c,
                        "type": "function",
                        "function": {"name": "bash", "arguments": json.dumps({"cmd": f"grep x m{i}"})},
                    }
                    for c in ids
                ],
            }
        )
        messages += [
            {"role": "tool", "tool_call_id": c, "content": big_text(f"s{i}k{k}", 10 + (i * 37) % 160)}
            for k, c in enumerate(ids)
        ]
        if i % 9 == 8:
            messages.append({"role": "user", "content": f"Note {i}: keep the public API unchanged. " * 6})
    messages.append({"role": "assistant", "content": "Done: the test passes."})
    return {"id": "agent-trace", "messages": messages, "tools": conversation("x", 0)["tools"]}


async def replayed(
    conv: dict, format: str, tmp_path: Path, max_total_tokens: int = 5000, *, inline_summaries: bool = False
):
    from proxy.core.settings import OffloadSettings
    from proxy.replay._runner import Replayer, upstream_for
    from proxy.store.sqlite import SQLiteStore

    store, upstream = SQLiteStore(tmp_path / f"{format}-{len(list(tmp_path.iterdir()))}"), upstream_for(None)
    try:
        replayer = Replayer(
            store,
            OffloadSettings(max_total_tokens=max_total_tokens),
            upstream,
            headers=[],
            model="gpt-4o",
            format=format,
            inline_summaries=inline_summaries,
        )
        return await replayer.conversation(conv)
    finally:
        await upstream.aclose()
        await store.close()


@pytest.mark.anyio
async def test_responses_replay_agrees_with_chat_on_a_trace(tmp_path):
    conv = agent_trace()
    chat, responses = [await replayed(conv, f, tmp_path) for f in ("chat", "responses")]
    assert chat.summaries >= 3 and chat.refs >= 10  # both compaction and compression at work
    for c in (chat, responses):
        # a turn may go out above the budget while its summary is made in the background, never
        # above the hard limit (2 x the trigger); made inline, none goes above the budget
        assert c.reload_exact_fraction == 1.0 and c.turns == 41
        # + the tools, the summary (its index up to INDEX_CHARS, ≈ 2,250 tokens) and the tail
        assert max(c.forwarded_per_turn) <= 2 * 5000 + 3000 + INDEX_CHARS // 4
    for c in [await replayed(conv, f, tmp_path, inline_summaries=True) for f in ("chat", "responses")]:
        assert c.turns_over_budget == 0
    ratio = lambda c: c.forwarded_tokens / c.raw_tokens  # noqa: E731
    assert abs(ratio(responses) - ratio(chat)) <= 0.02, (ratio(chat), ratio(responses))
    assert abs(responses.prefix_reuse - chat.prefix_reuse) <= 0.02, (chat.prefix_reuse, responses.prefix_reuse)
    assert (responses.summaries, responses.refs) == (chat.summaries, chat.refs)


@pytest.mark.anyio
async def test_responses_replay_is_deterministic(tmp_path):
    conv = agent_trace(20)
    first, second = [await replayed(conv, "responses", tmp_path, 3000) for _ in range(2)]
    strip = lambda c: {k: v for k, v in c.__dict__.items() if k not in TIMING}  # noqa: E731
    assert first.summaries >= 1 and first.refs >= 1
    assert strip(first) == strip(second)


def test_replay_command_in_the_responses_format(tmp_path, capsys):
    import asyncio

    from proxy.cli import build_parser
    from proxy.replay._cli import add_format_argument, run_replay

    traces = tmp_path / "c.jsonl"
    traces.write_text(json.dumps(agent_trace(12)))
    argv = ["replay", str(traces), "--out", str(tmp_path / "out"), "--max-total-tokens", "3000"]
    args = build_parser().parse_args(argv)
    if not hasattr(args, "format"):  # until proxy/cli.py declares the flag (add_format_argument)
        import argparse

        parser = argparse.ArgumentParser()
        add_format_argument(parser)
        args.format = parser.parse_args(["--format", "responses"]).format
    else:
        args = build_parser().parse_args([*argv, "--format", "responses"])
    asyncio.run(run_replay(args))
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["format"] == "responses"
    o = report["overall"]
    assert o["refs"] >= 1 and o["summaries"] >= 1 and o["reload_exact_fraction"] == 1.0
    assert "format: responses" in capsys.readouterr().out


# ---------------------------------------------------------------- --format anthropic


@pytest.mark.anyio
async def test_anthropic_replay_agrees_with_chat_on_a_trace(tmp_path):
    """The chat traces converted to Anthropic Messages requests: within 0.02 of the chat replay on
    forwarded/raw and prefix reuse, the same offloads, every ref reloads exactly; the summary calls
    go to /messages in the conversation's shape (their items compare to the forwarded turns')."""
    conv = agent_trace()
    chat, anthropic = [await replayed(conv, f, tmp_path) for f in ("chat", "anthropic")]
    assert anthropic.reload_exact_fraction == 1.0 and anthropic.turns == 41
    ratio = lambda c: c.forwarded_tokens / c.raw_tokens  # noqa: E731
    assert abs(ratio(anthropic) - ratio(chat)) <= 0.02, (ratio(chat), ratio(anthropic))
    assert abs(anthropic.prefix_reuse - chat.prefix_reuse) <= 0.02, (chat.prefix_reuse, anthropic.prefix_reuse)
    assert (anthropic.summaries, anthropic.refs) == (chat.summaries, chat.refs)
    assert anthropic.summary_calls == chat.summary_calls >= 3
    assert abs(anthropic.recall - chat.recall) <= 0.02, (chat.recall, anthropic.recall)
    assert abs(anthropic.cache_cost_ratio - chat.cache_cost_ratio) <= 0.05, (
        chat.cache_cost_ratio,
        anthropic.cache_cost_ratio,
    )


def test_replay_command_in_the_anthropic_format(tmp_path, capsys):
    import asyncio

    from proxy.cli import build_parser
    from proxy.replay._cli import run_replay

    traces = tmp_path / "c.jsonl"
    traces.write_text(json.dumps(agent_trace(12)))
    args = build_parser().parse_args(
        ["replay", str(traces), "--out", str(tmp_path / "out"), "--max-total-tokens", "3000", "--format", "anthropic"]
    )
    asyncio.run(run_replay(args))
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["format"] == "anthropic"
    o = report["overall"]
    assert o["refs"] >= 1 and o["summaries"] >= 1 and o["reload_exact_fraction"] == 1.0
    assert "format: anthropic" in capsys.readouterr().out


def test_turn_gaps_give_the_bill_with_and_without_cache_control(tmp_path, capsys):
    """`--turn-gaps` with Anthropic pricing: the raw history and the proxy's turns billed by the
    provider-cache model; idle pauses past the TTL cost more than a steady pace."""
    traces = tmp_path / "conversations.jsonl"
    traces.write_text(json.dumps(conversation("conv-0", 8)))
    bills = {}
    for spec in ("30s", "600s"):
        out = tmp_path / spec
        main(
            [
                "replay",
                str(traces),
                "--out",
                str(out),
                "--max-total-tokens",
                "3000",
                "--format",
                "anthropic",
                "--pricing",
                "anthropic",
                "--turn-gaps",
                spec,
            ]
        )
        report = json.loads((out / "report.json").read_text())
        bills[spec] = report["bill"]
        assert report["bill"]["turn_gaps"] == spec and report["conversations"][0]["bill"]["raw_uncached"] > 0
        assert f"turn gaps {spec}" in capsys.readouterr().out
    steady, idle = bills["30s"], bills["600s"]
    assert steady["raw_uncached"] == idle["raw_uncached"]
    assert steady["ratios"]["proxy_cached"] < steady["ratios"]["proxy_uncached"]
    assert steady["ratios"]["raw_cached"] < 1.0 and steady["above_raw"] in (0, 1)
    assert idle["proxy_cached"] > steady["proxy_cached"] and idle["raw_cached"] > steady["raw_cached"]
    assert steady["cache_cuts"] is True and steady["keepalive_min_tokens"] == 4096


def test_cache_cuts_off_replays_the_cuts_without_the_cache_in_mind(tmp_path, capsys):
    traces = tmp_path / "conversations.jsonl"
    traces.write_text(json.dumps(conversation("conv-0", 6)))
    main(
        [
            "replay",
            str(traces),
            "--out",
            str(tmp_path / "off"),
            "--format",
            "anthropic",
            "--pricing",
            "anthropic",
            "--turn-gaps",
            "400s",
            "--cache-cuts",
            "off",
        ]
    )
    report = json.loads((tmp_path / "off" / "report.json").read_text())
    assert report["bill"]["cache_cuts"] is False and "keep-alive pings" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit:
        main(["replay", str(traces), "--cache-cuts", "maybe"])
    assert exit.value.code == 2 and "--cache-cuts" in capsys.readouterr().err


def test_a_bad_turn_gaps_spec_is_a_usage_error(tmp_path, capsys):
    traces = tmp_path / "conversations.jsonl"
    traces.write_text(json.dumps(conversation("conv-0", 2)))
    with pytest.raises(SystemExit) as exit:
        main(["replay", str(traces), "--turn-gaps", "mix:30s,2@1m"])
    assert exit.value.code == 2 and "probability@duration" in capsys.readouterr().err
