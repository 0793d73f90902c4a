"""Folding (`proxy.core.fold`): a tool result repeating an earlier one goes as a pointer to it,
as it arrives and never later, in the shapes of seven agents (`fold_fixtures`)."""

from __future__ import annotations

import difflib
import json
import random

import pytest

from proxy.core import compression as cp
from proxy.core import fold, line_diff
from proxy.core.compaction import plan_compaction
from proxy.core.fold import FOLD_RATIO, diff_hunks
from proxy.core.markers import make_ref, refs_in
from proxy.core.settings import OffloadSettings
from proxy.core.texts import FOLD_MAX_CHARS, fold_ref, folded_diff, folded_identical
from proxy.core.tokens import counter_for_model
from proxy.formats.chat import VIEW as CHAT
from proxy.formats.messages import MESSAGES
from proxy.formats.responses import RESPONSES
from tests.harness.history import big_text, drawn_results, tool_history
from tests.unit.core.fold_fixtures import CASES, MSA_FIRST, MSA_RERUN, OH_VIEW, Case, history
from tests.unit.core.test_line_diff import Counting

COUNTER = counter_for_model("gpt-4o")
NS = "n" * 32
VIEWS = {"chat": CHAT, "aider": CHAT, "codex": RESPONSES.view, "claude": MESSAGES.view}
BIG = 10_000_000  # a trigger no history here reaches: only folding acts


def plan(items, agent="chat", **overrides):
    overrides.setdefault("max_total_tokens", BIG)
    return plan_compaction(items, VIEWS[agent], OffloadSettings(**overrides), counter=COUNTER, namespace=NS)


def results(items, agent):
    """The indices of the results `history` was given (not its short filler steps')."""
    view = VIEWS[agent]
    if agent == "aider":
        found = [i for i, m in enumerate(items) if m["role"] == "user"][1:]
    else:
        found = [i for i, m in enumerate(items) if view.role(m) == "tool"]
    return [i for i in found if not (text_at(items, i, agent) or "").startswith("total ")]


def text_at(items, i, agent):
    return VIEWS[agent].text(items[i]) if agent == "aider" else VIEWS[agent].tool_text(items[i])


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_agent_shape(case: Case):
    items = history(case.agent, [case.first, case.second], tool=case.tool)
    result = plan(items, case.agent)
    first, *_, second = results(items, case.agent)
    assert result.items[:second] == items[:second]  # nothing before the repeat changes, its base least of all
    sent = text_at(result.items, second, case.agent)
    if case.expect is None:
        assert result.items == items and not result.offloads and result.folded == 0
        return
    ref = make_ref(NS, "tool_result", case.second)
    assert fold_ref(sent) == ref and ref in result.refs
    assert [(o.ref, o.kind, o.text) for o in result.offloads] == [(ref, "tool_result", case.second)]
    base_call = VIEWS[case.agent].answers(items[first])
    if case.expect == "identical":
        assert sent == folded_identical(base_call, len(case.second), ref=ref)
    else:
        assert sent == folded_diff(base_call, len(case.second), diff_hunks(case.first, case.second), ref=ref)
    assert len(sent) <= FOLD_RATIO * len(case.second)
    # the item keeps its ids, its place, its other fields: only the result's text changed
    assert VIEWS[case.agent].answers(result.items[second]) == VIEWS[case.agent].answers(items[second])
    assert len(result.items) == len(items) and result.tokens_after < result.tokens_before


@pytest.mark.parametrize("case", [c for c in CASES if c.expect], ids=[c.name for c in CASES if c.expect])
def test_same_bytes_on_every_later_turn_and_nothing_before_rewritten(case: Case):
    """Folded on turn k, the same bytes on turns k+1 … k+5; every item a turn forwarded is
    forwarded again, byte for byte, by the next one (the provider's cached prefix)."""
    steps = [case.first, case.second] + [big_text(f"later{k}", 12) for k in range(5)]
    turns = [plan(history(case.agent, steps[:n], tool=case.tool), case.agent) for n in range(2, len(steps) + 1)]
    encoded = [[json.dumps(m, sort_keys=True) for m in t.items] for t in turns]
    for before, after in zip(encoded, encoded[1:]):
        assert after[: len(before)] == before
    folded = results(turns[0].items, case.agent)[-1]
    assert all(t.items[folded] == turns[0].items[folded] for t in turns)


def test_a_result_forwarded_whole_is_never_folded_by_a_later_one():
    """The base stays as sent when a later result repeats it; the repeat is what folds."""
    items = history("chat", [MSA_FIRST, MSA_FIRST, MSA_FIRST])
    result = plan(items)
    first, second, third = results(items, "chat")
    assert result.items[first] == items[first]
    assert fold_ref(result.items[second]["content"]) and fold_ref(result.items[third]["content"])
    assert "call_0 above" in result.items[third]["content"]  # a fold points to a whole result, never to a fold


def test_folding_off_and_mode_off_leave_every_result():
    items = history("chat", [MSA_FIRST, MSA_RERUN])
    for overrides in ({"fold": "off"}, {"fold": False}, {"mode": "off"}):
        result = plan(items, **overrides)
        assert result.items == items and not result.offloads


def test_compress_mode_folds_too():
    result = plan(history("chat", [MSA_FIRST, MSA_FIRST]), mode="compress")
    assert result.folded == 1


@pytest.mark.parametrize(
    "first, second",
    [
        (MSA_FIRST, big_text("unrelated", 30)),  # another output altogether
        (MSA_FIRST[:300], MSA_FIRST[:300]),  # too short to be worth a pointer
        (big_text("a", 40), big_text("a", 40).replace("value=", "v=")),  # every line changed
    ],
)
def test_what_is_not_folded(first, second):
    items = history("chat", [first, second])
    assert plan(items).items == items


def test_a_fold_is_much_smaller_or_not_made():
    lines = big_text("x", 30).split("\n")
    changed = "\n".join(line + " CHANGED" if k % 3 == 0 else line for k, line in enumerate(lines))
    items = history("chat", ["\n".join(lines), changed])
    assert plan(items).items == items  # a third of the lines changed: the diff is not much smaller


def test_reload_results_are_neither_folded_nor_bases():
    items = history("chat", [MSA_FIRST])
    items += [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "proxy_1",
                    "type": "function",
                    "function": {"name": "context_reload", "arguments": '{"ref": "x"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "proxy_1", "content": MSA_FIRST},
    ]
    assert plan(items).items[-1] == items[-1]
    items[-1] = {"role": "tool", "tool_call_id": "proxy_1", "content": OH_VIEW}
    items += history("chat", [OH_VIEW])[2:]  # a later view of what only the reload showed: no base to point to
    items[-2]["tool_calls"][0]["id"] = items[-1]["tool_call_id"] = "call_9"
    assert plan(items).items == items


def test_planning_the_plan_again_changes_nothing():
    items = history("chat", [MSA_FIRST, MSA_RERUN, MSA_FIRST, OH_VIEW, OH_VIEW])
    result = plan(items)
    assert result.folded == 3
    again = plan(result.items)
    assert again.items == result.items and not again.offloads and again.refs == result.refs


def test_no_pointer_to_a_result_compaction_shows_as_a_preview():
    """A base compaction replaces by its preview on the turn the repeat arrives is not shown
    whole: the repeat goes as it is (and compaction's tail keeps it)."""
    large = big_text("big", 600)
    items = history("chat", [large, large])
    result = plan(items, max_total_tokens=1000, max_tool_message_tokens=500)
    *_, last = results(items, "chat")
    assert result.items[last] == items[last] and result.folded == 0
    shown = plan(items, max_total_tokens=BIG, max_tool_message_tokens=500)  # under the trigger: shown whole
    assert shown.folded == 1


def test_a_summary_hiding_the_base_undoes_the_fold_after_it():
    items = history("chat", [MSA_FIRST, MSA_FIRST], filler=3)
    result = plan(items)
    first, *_, second = results(items, "chat")
    summary = {"role": "user", "content": "[summary]"}
    hides = cp.assemble(result.items, CHAT, 2, cut=first + 1, summary=summary, unfold=result.unfold)
    assert hides[-1] == items[second]  # the base is summarised: the repeat goes whole
    keeps = cp.assemble(result.items, CHAT, 2, cut=first, summary=summary, unfold=result.unfold)
    assert keeps[-1] == result.items[second]  # the base still forwarded: the fold stays
    assert cp.assemble(result.items, CHAT, 2, cut=first + 1, summary=summary, unfold=result.unfold) == hides


def test_the_unfolded_form_is_compaction_s_marker_once_compaction_would_replace_it():
    """Folded under the trigger; once the history is over it, what the fold would be without
    it (restored after a summary hiding its base) is compaction's marker, with the fold's ref."""
    large = big_text("big", 600)
    arrival = history("chat", [large, large])
    at_arrival = COUNTER.messages(plan(arrival).items)
    items = history("chat", [large, large, big_text("later", 300)])
    result = plan(items, max_total_tokens=at_arrival + 50, max_tool_message_tokens=500)
    second = results(items, "chat")[1]
    assert fold_ref(result.items[second]["content"]) is not None
    base, unfolded = result.unfold[second]
    assert base == results(items, "chat")[0]
    assert refs_in(unfolded["content"]) == [fold_ref(result.items[second]["content"])]
    assert result.items[base]["content"] != large  # the base is compacted now, the fold stays as it was


@pytest.mark.parametrize(
    "text",
    [
        folded_identical("call_1", 900, ref="abcdefgh") + "\nmore",  # an identical fold has no body
        folded_identical("call_1", 900, ref="abcdefgh").replace('ref="abcdefgh"', 'ref="zzzzzzzz"'),  # two refs
        folded_diff("call_1", 900, "no hunk header", ref="abcdefgh"),
        folded_diff("call_1", 900, "@@ -1 +1 @@\n" + "+x\n" * FOLD_MAX_CHARS, ref="abcdefgh"),  # too long to be ours
        folded_identical("call 1]\n", 900, ref="abcdefgh"),  # a call id no fold names
    ],
)
def test_look_alikes_are_not_folds(text):
    assert fold_ref(text) is None


def test_a_look_alike_is_compacted_like_any_content():
    fake = folded_diff("call_1", 900, "@@ -1 +1 @@\n" + big_text("fake", 400), ref="abcdefgh")
    items = history("chat", [fake, MSA_FIRST])
    result = plan(items, max_total_tokens=1000, max_tool_message_tokens=500)
    assert result.offloads and result.offloads[0].text == fake


# ---------------------------------------------------------------- the diffs' work, bounded (issue 38)


@pytest.fixture
def matcher(monkeypatch) -> Counting:
    """The matcher's calls counted, no diff remembered from before, and difflib's never used."""
    counting = Counting()
    monkeypatch.setattr(line_diff, "Indel", counting)
    monkeypatch.setattr(fold, "_MEMO", fold._Memo())

    def no_difflib(*args, **kwargs):
        raise AssertionError("difflib's quadratic matcher was used")

    monkeypatch.setattr(difflib.SequenceMatcher, "find_longest_match", no_difflib)
    return counting


def test_issue_38s_results_drawn_from_the_same_short_lines_are_never_aligned(matcher):
    """25 results of 1,950 lines drawn from 120: each pair alike, no diff of two of them short.
    Every pair is rejected before its alignment, by the counts or the banded distance, and
    none of those costs more than a bounded middle."""
    items = tool_history(drawn_results())
    result = plan(items)
    assert result.folded == 0 and result.items == items
    assert matcher.alignments == []
    assert 0 < len(matcher.distances) <= 24 * fold.BASE_WINDOW
    assert all(n * m <= line_diff.MAX_CELLS for n, m in matcher.distances)
    orders = [drawn_results(1)[0].split("\n")]  # the same lines as often, in other orders
    for seed in range(10):
        orders.append(random.Random(seed).sample(orders[0], k=len(orders[0])))
    assert plan(tool_history(["\n".join(lines) for lines in orders])).folded == 0
    assert matcher.alignments == []


def test_95_kb_results_with_raised_thresholds_are_rejected_on_their_counts_alone(matcher):
    pool = [f"{k:03d} a longer line of output, as a build or a test run prints it" for k in range(120)]
    rnd = random.Random(5)
    large = ["\n".join(rnd.choice(pool) for _ in range(1_450)) for _ in range(6)]
    assert all(90_000 < len(text) < 100_000 for text in large)
    result = plan(tool_history(large), max_tool_message_tokens=10_000_000)
    assert result.folded == 0 and matcher.distances == [] and matcher.alignments == []


def test_one_character_lines_up_to_max_diff_chars_are_not_aligned(matcher):
    rnd = random.Random(9)
    lines = [rnd.choice("ab") for _ in range(fold.MAX_DIFF_CHARS // 2)]
    shuffled = list(lines)
    rnd.shuffle(shuffled)
    texts = ["\n".join(lines), "\n".join(shuffled), "\n".join(reversed(lines))]
    assert all(len(text) < fold.MAX_DIFF_CHARS for text in texts)
    assert plan(tool_history(texts), max_tool_message_tokens=10_000_000).folded == 0
    assert matcher.distances == [] and matcher.alignments == []  # their middles are far over MAX_CELLS


def test_genuinely_similar_large_results_still_fold(matcher):
    """A 1,950-line log run again with three lines changed, the first and the last among them."""
    base = [f"test_{k:04d} PASSED in 0.{k % 10}s" for k in range(1_950)]
    rerun = ["collected 1950 items (rerun)", *base[1:900], "test_0900 FAILED", *base[901:-1], "1 failed, 1949 passed"]
    items = tool_history(["\n".join(base), "\n".join(rerun)])
    result = plan(items, max_tool_message_tokens=10_000_000)
    assert result.folded == 1
    sent = result.items[-2]["content"]
    hunks = diff_hunks("\n".join(base), "\n".join(rerun))
    assert sent == folded_diff("call_0", len("\n".join(rerun)), hunks, ref=fold_ref(sent))
    assert hunks.count("@@ ") == 3 and "+test_0900 FAILED" in hunks and "-test_0900 PASSED in 0.0s" in hunks
    assert matcher.alignments == [(1_950, 1_950)]  # nothing to trim: the first and last lines changed


def test_the_budget_never_changes_what_a_later_turn_forwards(matcher):
    """The same bytes planned cold or with every diff remembered, on each turn, and every turn
    forwarding what the one before did: what is diffed depends on the pair alone."""
    drawn = drawn_results(6)
    base = "\n".join(f"step {k}: ok" for k in range(300))
    steps = [base, *drawn[:3], base.replace("step 150: ok", "step 150: FAILED"), *drawn[3:], base + "\ndone"]
    turns = []
    for n in range(1, len(steps) + 1):
        fold._MEMO = fold._Memo()
        cold = plan(tool_history(steps[:n]))
        warm = plan(tool_history(steps[:n]))
        assert cold.items == warm.items
        turns.append(cold.items[:-1])  # without the closing user turn
    for before, after in zip(turns, turns[1:]):
        assert after[: len(before)] == before
    assert sum(fold_ref(m["content"] or "") is not None for m in turns[-1] if m["role"] == "tool") == 2
