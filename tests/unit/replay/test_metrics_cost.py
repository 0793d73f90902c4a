"""Where the replay's cache-weighted cost goes: parts that sum to the total, at both pricings."""

from __future__ import annotations

import argparse
import json

import pytest

from proxy.core.settings import OffloadSettings
from proxy.core.texts import history_marker, tool_result_marker
from proxy.core.tokens import counter_for_encoding
from proxy.formats import chat
from proxy.replay import _metrics as metrics
from proxy.replay._cli import add_format_argument
from proxy.replay._metrics import ANTHROPIC, OPENAI, PRICINGS, SummaryCall
from proxy.replay._report import breakdown_table, report_dict, table, write_outputs
from proxy.replay._runner import Replayer, message_tokens, upstream_for
from proxy.store.sqlite import SQLiteStore
from tests.harness.screens import data_url, screenshot
from tests.unit.replay.test_simulation import quoting_conversation

pytestmark = pytest.mark.anyio

SYSTEM = {"role": "system", "content": "You fix bugs."}
TASK = {"role": "user", "content": "Fix the rounding bug."}
A1 = {
    "role": "assistant",
    "content": "",
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}],
}
T1 = {"role": "tool", "tool_call_id": "c1", "content": "x" * 400}
P1 = {"role": "tool", "tool_call_id": "c1", "content": tool_result_marker("x" * 400, "abcdefgh", 100)}
A2 = {**A1, "tool_calls": [{**A1["tool_calls"][0], "id": "c2"}]}
T2 = {"role": "tool", "tool_call_id": "c2", "content": "y" * 200}
A3 = {**A1, "tool_calls": [{**A1["tool_calls"][0], "id": "c3"}]}
T3 = {"role": "tool", "tool_call_id": "c3", "content": "z" * 160}
SUMMARY = {"role": "user", "content": history_marker("summaryref", 2, 108) + "\n<state_snapshot>…</state_snapshot>"}
N = {
    id(SYSTEM): 10,
    id(TASK): 20,
    id(A1): 5,
    id(T1): 100,
    id(P1): 8,
    id(A2): 5,
    id(T2): 50,
    id(A3): 5,
    id(T3): 40,
    id(SUMMARY): 30,
}

# The raw history grows by two items a turn; the proxy compacts T1 at turn 2 and summarises
# [A1, P1] at turn 3.
RAW = [[SYSTEM, TASK], [SYSTEM, TASK, A1, T1], [SYSTEM, TASK, A1, T1, A2, T2], [SYSTEM, TASK, A1, T1, A2, T2, A3, T3]]
FORWARDED = [
    [SYSTEM, TASK],
    [SYSTEM, TASK, A1, T1],
    [SYSTEM, TASK, A1, P1, A2, T2],
    [SYSTEM, TASK, SUMMARY, A2, T2, A3, T3],
]
TOOLS = [[{"name": "bash"}]] * 4
CALL = SummaryCall(3, [SYSTEM, TASK, A1, P1, {"role": "user", "content": "Summarise."}], TOOLS[0], [10, 20, 5, 8, 12])


def tokens(turns):
    return [[N[id(item)] for item in turn] for turn in turns]


def windows():
    return [metrics.Window(items, counts, chat.VIEW) for items, counts in zip(FORWARDED, tokens(FORWARDED))]


def test_each_item_is_one_part():
    assert metrics.item_parts(FORWARDED[2], chat.VIEW) == ["system", "task", "window", "previews", "window", "window"]
    assert metrics.item_parts(FORWARDED[3], chat.VIEW) == [
        "system",
        "task",
        "summary",
        "window",
        "window",
        "window",
        "window",
    ]
    assert metrics.item_parts([TASK, A1], chat.VIEW) == ["task", "window"]  # no system prompt
    assert metrics.new_items([2, 4, 6, 8]) == [2, 2, 2, 2]


def test_a_summary_merged_into_the_task_message_is_split_by_length():
    task, summary, after = ({"type": "text", "text": t} for t in ("Fix it.", SUMMARY["content"], "Go on."))
    merged = {"role": "user", "content": [task, summary, after]}
    sizes = [len(json.dumps(p, ensure_ascii=False)) for p in (task, summary, after)]
    shares = metrics.merged_summary(merged, "task")
    assert shares == pytest.approx(
        {"task": sizes[0] / sum(sizes), "summary": sizes[1] / sum(sizes), "window": sizes[2] / sum(sizes)}
    )
    assert metrics.merged_summary(TASK, "task") == {"task": 1.0}
    assert metrics.merged_summary(SUMMARY, "summary") == {"summary": 1.0}
    window = metrics.Window([merged], [100], chat.VIEW)
    assert sum(window.by_part().values()) == pytest.approx(100) and window.by_part()["summary"] > 50


def test_the_parts_by_hand_at_openai_pricing():
    parts = metrics.breakdown(
        windows(), metrics.new_items([len(r) for r in RAW]), tools=TOOLS, summaries=[CALL], pricing=OPENAI
    )
    # turn 0: 30 new; turn 1: reads system 10 + task 20, 105 new; turn 2: reads 10 + 20 + A1 5, P1 (8) re-sent,
    # A2 + T2 new (55); turn 3: reads 10 + 20, SUMMARY + A2 + T2 re-sent (85), A3 + T3 new (45).
    assert parts["new"] == pytest.approx(30 + 105 + 55 + 45)
    assert parts["resend"] == pytest.approx(8 + 85)
    assert parts["read_system"] == pytest.approx(0.1 * 30) and parts["read_task"] == pytest.approx(0.1 * 60)
    assert parts["read_window"] == pytest.approx(0.1 * 5)
    assert parts["read_summary"] == parts["read_previews"] == parts["read_images"] == 0
    # the call shares [SYSTEM, TASK, A1, P1] with turn 2 (same tools): 43 read, 12 written
    assert parts["summary_calls"] == pytest.approx(0.1 * 43 + 12)


@pytest.mark.parametrize("pricing", [OPENAI, ANTHROPIC])
def test_the_parts_sum_to_the_cache_cost_and_the_raw_parts_to_the_raw_cost(pricing):
    parts = metrics.breakdown(
        windows(), metrics.new_items([len(r) for r in RAW]), tools=TOOLS, summaries=[CALL], pricing=pricing
    )
    assert set(parts) == set(metrics.COST_PARTS)
    assert sum(parts.values()) == pytest.approx(
        metrics.cache_cost(FORWARDED, tokens(FORWARDED), TOOLS, summaries=[CALL], pricing=pricing)
    )
    raw = metrics.raw_breakdown(tokens(RAW), pricing)
    assert sum(raw.values()) == pytest.approx(metrics.cache_cost(RAW, tokens(RAW), pricing=pricing))
    # every raw item is new once, at the write price: 10 + 20 + 5 + 100 + 5 + 50 + 5 + 40
    assert raw["new"] == pytest.approx(pricing.write * 235)


def test_anthropic_pricing_charges_writes_at_a_quarter_more():
    assert (ANTHROPIC.read, ANTHROPIC.write, OPENAI.read, OPENAI.write) == (0.1, 1.25, 0.1, 1.0)
    assert metrics.DEFAULT_PRICING == "openai"
    # the default's formula is the one before pricings existed: tokens minus 0.9 × the cached prefix
    assert metrics.cache_cost(RAW, tokens(RAW)) == 30 + (135 - 0.9 * 30) + (190 - 0.9 * 135) + (235 - 0.9 * 190)
    assert metrics.cache_cost(RAW, tokens(RAW), pricing=ANTHROPIC) == pytest.approx(1.25 * 235 + 0.1 * (30 + 135 + 190))


def test_summed_gives_shares_of_the_raw_cost_the_floor_and_the_forwarded_parts():
    costs = metrics.conversation_costs(
        windows(), metrics.new_items([len(r) for r in RAW]), tokens(RAW), tools=TOOLS, summaries=[CALL]
    )
    overall = metrics.summed([costs, costs], [metrics.forwarded_by_part(windows())] * 2)
    for name in PRICINGS:
        o = overall[name]
        assert sum(o["ratios"].values()) == pytest.approx(o["cache_cost_ratio"])
        assert o["cache_cost_ratio"] == pytest.approx(costs[name]["cost"] / costs[name]["raw_cost"])
        assert o["floor"] == pytest.approx(PRICINGS[name].write * 235 / costs[name]["raw_cost"])
    forwarded = overall["forwarded_tokens"]
    assert forwarded["summary"] == 2 * 30 and forwarded["previews"] == 2 * 8 and forwarded["system"] == 2 * 40
    assert sum(forwarded.values()) == 2 * sum(map(sum, tokens(FORWARDED)))
    assert sum(overall["forwarded_shares"].values()) == pytest.approx(1)
    printed = breakdown_table(overall)
    assert "re-sends after a compression" in printed and "floor" in printed and "anthropic" in printed


def test_images_are_a_part_of_their_own():
    shot = {
        "role": "user",
        "content": [
            {"type": "text", "text": "Screenshot."},
            {"type": "image_url", "image_url": {"url": data_url(screenshot(1))}},
        ],
    }
    counts = message_tokens([SYSTEM, TASK, shot], counter_for_encoding("o200k_base"))
    window = metrics.Window([SYSTEM, TASK, shot], counts, chat.VIEW)
    parts = window.by_part()
    assert parts["images"] == metrics.image_tokens(shot) == 1105  # 1280×800: 85 + 170 × 6 tiles
    assert parts["window"] == counts[2] - 1105 > 0 and sum(parts.values()) == sum(counts)


def test_the_pricing_argument():
    parser = argparse.ArgumentParser()
    add_format_argument(parser)
    assert parser.parse_args(["--pricing", "anthropic"]).pricing == "anthropic"
    assert parser.parse_args([]).pricing is None  # the replay then uses metrics.DEFAULT_PRICING
    with pytest.raises(SystemExit):
        parser.parse_args(["--pricing", "gemini"])


async def replayed(tmp_path, format: str, pricing: str = "openai"):
    store, upstream = SQLiteStore(tmp_path), upstream_for(None)
    try:
        settings = OffloadSettings(max_total_tokens=1500, max_tool_message_tokens=300)
        replayer = Replayer(store, settings, upstream, headers=[], model="gpt-4o", format=format, pricing=pricing)
        return await replayer.conversation(quoting_conversation())
    finally:
        await upstream.aclose()
        await store.close()


@pytest.mark.parametrize("format", ["chat", "responses", "anthropic"])
async def test_a_replay_breaks_its_cost_down_into_parts_that_sum_to_it(tmp_path, format):
    out = await replayed(tmp_path, format)
    assert out.summaries >= 1 and out.refs >= 1  # compacted and compressed: every kind of part occurs
    for name in PRICINGS:
        priced = out.cost_breakdown[name]
        assert sum(priced["parts"].values()) == pytest.approx(priced["cost"])
        assert sum(priced["raw_parts"].values()) == pytest.approx(priced["raw_cost"])
        assert priced["parts"]["summary_calls"] > 0 and priced["parts"]["resend"] > 0
        assert priced["parts"]["read_summary"] > 0 and priced["parts"]["read_task"] > 0
    assert out.cost_breakdown["openai"]["cost"] == pytest.approx(out.cache_cost)  # the default pricing
    assert out.cost_breakdown["openai"]["raw_cost"] == pytest.approx(out.raw_cache_cost)
    assert out.forwarded_by_part["summary"] > 0 and out.forwarded_by_part["previews"] > 0
    assert sum(out.forwarded_by_part.values()) == pytest.approx(out.forwarded_tokens)


async def test_pricing_anthropic_gives_the_cache_cost_at_its_prices(tmp_path):
    out = await replayed(tmp_path / "a", "chat", "anthropic")
    priced = out.cost_breakdown["anthropic"]
    assert out.cache_cost == pytest.approx(priced["cost"]) and out.raw_cache_cost == pytest.approx(priced["raw_cost"])
    default = await replayed(tmp_path / "o", "chat")
    # the same turns: the breakdown at both pricings whichever the replay reports
    assert default.cost_breakdown["anthropic"]["cost"] == pytest.approx(priced["cost"])
    assert default.cache_cost == pytest.approx(out.cost_breakdown["openai"]["cost"]) != out.cache_cost
    report = report_dict([out], OffloadSettings(), format="chat", pricing="anthropic")
    o = report["overall"]
    assert report["pricing"] == o["pricing"] == "anthropic"
    assert o["cache_cost_ratio"] == pytest.approx(o["cost_breakdown"]["anthropic"]["cache_cost_ratio"])
    assert o["floor"] == pytest.approx(o["cost_breakdown"]["anthropic"]["floor"]) and 0 < o["floor"] < 1
    printed = table(report)
    assert "floor" in printed.splitlines()[0] and "anthropic pricing" in printed
    assert "new content (paid once)" in printed and "cache reads: window" in printed
    json.dumps(report)  # report.json: plain JSON


async def test_report_json_and_the_cost_chart(tmp_path):
    pytest.importorskip("matplotlib")
    out = await replayed(tmp_path / "store", "chat")
    report = report_dict([out], OffloadSettings(), format="chat")
    written = write_outputs(report, tmp_path / "out")
    assert tmp_path / "out" / "cost.png" in written and (tmp_path / "out" / "cost.png").stat().st_size > 1000
    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    assert saved["overall"]["cost_breakdown"]["openai"]["parts"].keys() == set(metrics.COST_PARTS)
