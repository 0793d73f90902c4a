"""proxy.core.fold: folding repeated results, its bounded line diff, a plan resumed from the last."""

from __future__ import annotations

import difflib
import gc
import json
import random
import threading
import tracemalloc

import pytest
from rapidfuzz.distance import Indel

from proxy.core import compression as cp
from proxy.core import fold
from proxy.core.compaction import plan_compaction
from proxy.core.fold import FOLD_RATIO, MAX_CELLS, Lines, diff_hunks, floor, hunks, plan_folds
from proxy.core.jsonio import footprint
from proxy.core.preview import CompactionRule
from proxy.core.settings import OffloadSettings
from proxy.core.texts import FOLD_MAX_CHARS, fold_ref, folded_diff, folded_identical, make_ref, refs_in
from proxy.core.tokens import counter_for_model
from proxy.formats.chat import VIEW as CHAT
from proxy.formats.messages import MESSAGES
from proxy.formats.responses import RESPONSES
from tests.harness.history import big_text, drawn_results, tool_history
from tests.unit.core.fold_fixtures import CASES, MSA_FIRST, MSA_RERUN, OH_VIEW, Case, history

# ==================== line diff
# The line diff folding is made of (`proxy.core.fold`): difflib's unified format, a
# longest common subsequence's alignment, and the work decided before the diff is made.

LINES = [f"line {k}: value={k * 7} status=ok" for k in range(40)]


def diff(base: str, text: str, *, limit: int = 10**9, names: dict[str, int] | None = None) -> str | None:
    names = {} if names is None else names
    return hunks(Lines(base, names), Lines(text, names), limit=limit, context=1)


def by_difflib(base: str, text: str) -> str | None:
    return "\n".join(list(difflib.unified_diff(base.splitlines(), text.splitlines(), lineterm="", n=1))[2:]) or None


def edited(*, drop=(), change=(), insert=()) -> str:
    out = []
    for k, line in enumerate(LINES):
        out += [f"inserted before {k}"] if k in insert else []
        if k not in drop:
            out.append(line + " CHANGED" if k in change else line)
    return "\n".join(out + (["appended"] if len(LINES) in insert else []))


@pytest.mark.parametrize(
    "text",
    [
        edited(change={20}),
        edited(change={0}),
        edited(change={39}),  # at either edge: no context on that side
        edited(insert={0}),
        edited(insert={40}),
        edited(drop={0}),
        edited(drop={39}),
        edited(change={5, 30}),  # two hunks
        edited(change={10, 12}),  # closer than twice the context: one hunk
        edited(change={10, 13}),  # exactly twice the context apart: still one
        edited(change={10, 14}),  # past it: two
        edited(drop=set(range(10, 40))),  # everything after line 10 removed
        edited(change={3}, drop={8}, insert={15, 16}),
        edited(change=set(range(10, 15)), insert={12}),  # a block replaced by a longer one
    ],
    ids=[
        "middle",
        "first-line",
        "last-line",
        "insert-first",
        "insert-last",
        "drop-first",
        "drop-last",
        "two-hunks",
        "close-one-hunk",
        "twice-context-one-hunk",
        "past-it-two-hunks",
        "tail-removed",
        "mixed",
        "block-replaced",
    ],
)
def test_ordinary_edits_give_difflib_s_hunks(text):
    base = "\n".join(LINES)
    assert diff(base, text) == by_difflib(base, text) is not None


def test_a_change_s_minus_lines_come_before_its_plus_lines():
    assert diff("a\nb\nc\nd", "a\nx\ny\nd") == "@@ -1,4 +1,4 @@\n a\n-b\n-c\n+x\n+y\n d"
    assert Indel.opcodes([1, 2], [3, 4]).as_list()[0][0] == "insert"  # what rapidfuzz gives first...
    assert diff("1\n2", "3\n4") == "@@ -1,2 +1,2 @@\n-1\n-2\n+3\n+4"  # ...is one replacement here


def apply(base: list[str], hunks_text: str) -> list[str]:
    """`base` with the hunks applied, each context and removed line checked against it."""
    out, at = [], 0
    for line in hunks_text.split("\n"):
        if line.startswith("@@ "):
            old = line.split()[1][1:]
            start, _, count = old.partition(",")
            begin = int(start) - (1 if count != "0" else 0)
            out += base[at:begin]
            at = begin
        elif line[0] in " -":
            assert base[at] == line[1:]
            out += [line[1:]] if line[0] == " " else []
            at += 1
        else:
            out.append(line[1:])
    return out + base[at:]


def test_any_edit_gives_hunks_that_make_the_text_from_the_base_with_fewest_lines_changed():
    rnd = random.Random(38)
    for _ in range(400):
        base = [f"l{rnd.randrange(12)}" for _ in range(rnd.randrange(1, 60))]
        text = [line if rnd.random() > 0.15 else f"l{rnd.randrange(12)}" for line in base if rnd.random() > 0.1]
        text += [f"l{rnd.randrange(12)}" for _ in range(rnd.randrange(3))]
        made, old = diff("\n".join(base), "\n".join(text)), by_difflib("\n".join(base), "\n".join(text))
        if made is None:
            assert old is None
            continue
        assert apply(base, made) == text
        changed = sum(line[0] in "-+" for line in made.split("\n") if not line.startswith("@@ "))
        assert changed == Indel.distance(base, text)  # a longest common subsequence: the fewest lines changed
        assert changed <= sum(line[0] in "-+" for line in old.split("\n") if not line.startswith("@@ "))


def test_the_numbers_the_lines_get_change_nothing():
    rnd = random.Random(7)
    for _ in range(100):
        base = "\n".join(f"l{rnd.randrange(30)}" for _ in range(50))
        text = "\n".join(line if rnd.random() > 0.1 else "new" for line in base.split("\n"))
        crowded = {f"l{k}": 1000 + 7 * k for k in range(30, -1, -1)} | {f"other {k}": k for k in range(300)}
        assert diff(base, text) == diff(base, text, names=crowded)


def test_no_line_differing_is_no_diff():
    text = "\n".join(LINES)
    assert diff(text, text) is None
    assert diff(text, text + "\n") is None and diff(text, text.replace("\n", "\r\n")) is None  # the same lines


def test_no_hunks_longer_than_the_limit():
    base, text = "\n".join(LINES), edited(change={5, 30})
    made = diff(base, text)
    assert made is not None
    assert diff(base, text, limit=len(made)) == made and diff(base, text, limit=len(made) - 1) is None


def test_the_floor_is_never_above_the_hunks():
    rnd = random.Random(11)
    for _ in range(300):
        base = "\n".join(f"{'x' * rnd.randrange(4)}{rnd.randrange(9)}" for _ in range(rnd.randrange(1, 30)))
        text = "\n".join(rnd.sample(base.split("\n"), k=len(base.split("\n")) // 2) + ["new"] * rnd.randrange(3))
        made, names = diff(base, text), {}
        assert made is None or floor(Lines(base, names), Lines(text, names), stop=10**9) <= len(made)


class Counting:
    """rapidfuzz's Indel as `proxy.core.fold` calls it, counting each call's lines."""

    def __init__(self) -> None:
        self.distances: list[tuple[int, int]] = []
        self.alignments: list[tuple[int, int]] = []

    def distance(self, xs, ys, **kwargs):
        self.distances.append((len(xs), len(ys)))
        return Indel.distance(xs, ys, **kwargs)

    def opcodes(self, xs, ys):
        self.alignments.append((len(xs), len(ys)))
        return Indel.opcodes(xs, ys)


def test_a_middle_over_max_cells_is_never_aligned(monkeypatch):
    """Two texts differing in their first and last lines: nothing to trim, their middle is whole."""
    counting = Counting()
    monkeypatch.setattr(fold, "Indel", counting)
    side = int(MAX_CELLS**0.5)
    for lines, expect in ((side, True), (side + 1, False)):  # a middle of side × side lines, or one more
        body = [f"row {k}" for k in range(lines)]
        made = diff("\n".join(body), "\n".join(["first", *body[1:-1], "last"]), limit=4000)
        assert (made is not None) == expect
    assert counting.alignments == [(side, side)]


def test_a_diff_that_cannot_fit_is_never_aligned(monkeypatch):
    counting = Counting()
    monkeypatch.setattr(fold, "Indel", counting)
    rnd = random.Random(3)
    lines = [f"x{k:03d}" for k in range(120)]
    base, text = ("\n".join(rnd.choice(lines) for _ in range(1950)) for _ in range(2))
    assert diff(base, text, limit=4000) is None
    assert counting.alignments == [] and len(counting.distances) == 1  # the counts fit; the banded distance did not
    shuffled = base.split("\n")
    rnd.shuffle(shuffled)
    assert diff(base, "\n".join(shuffled), limit=4000) is None  # the same lines as often: only the order differs
    assert counting.alignments == []
    counting.distances.clear()
    assert diff(base, "\n".join(f"{line} and more" for line in shuffled), limit=4000) is None
    assert counting.distances == []  # every line unmatched: the counts alone decide


# ==================== fold
# Folding (`proxy.core.fold`): a tool result repeating an earlier one goes as a pointer to it,
# as it arrives and never later, in the shapes of seven agents (`fold_fixtures`).

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
    monkeypatch.setattr(fold, "Indel", counting)
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
    assert all(n * m <= fold.MAX_CELLS for n, m in matcher.distances)
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


# ==================== fold resume
# A plan that goes on from an earlier turn's (`proxy.core.fold._Resumed`) folds exactly what a
# plan of the whole history folds: turn by turn, in each agent's shape, with the compaction rule
# acting, after an edit in the middle, with the reload calls changing, and within its bounds.

RESUME_NS = "r" * 32


def drawn(count: int, seed: int) -> list[str]:
    """Results that repeat and nearly repeat earlier ones (a line changed, a line added), and new ones."""
    rnd = random.Random(seed)
    texts: list[str] = []
    for k in range(count):
        if texts and rnd.random() < 0.3:
            texts.append(rnd.choice(texts))
        elif texts and rnd.random() < 0.5:
            lines = rnd.choice(texts).split("\n")
            lines[rnd.randrange(len(lines))] = f"changed {k}"
            texts.append("\n".join(lines))
        else:
            texts.append("\n".join(f"result {k} line {j}: {rnd.random():.6f}" for j in range(rnd.randint(20, 60))))
    return texts


@pytest.fixture
def fresh(monkeypatch):
    """A fresh store of states for the test (what other tests left is not found)."""
    monkeypatch.setattr(fold, "_RESUMED", fold._Resumed(fold.RESUME_STATES, fold.RESUME_BYTES))


def whole(items, view, **options):
    """The plan made from the start (nothing to go on from)."""
    saved, fold._RESUMED = fold._RESUMED, fold._Resumed(0, 0)
    try:
        return plan_folds(items, view, namespace=RESUME_NS, counter=COUNTER, **options)
    finally:
        fold._RESUMED = saved


def kept_beyond_items(items) -> tuple[int, tuple[int, int]]:
    """(the bytes the state kept of planning `items` holds, measured by letting it go; its own
    (cost, held))."""
    gc.collect()
    tracemalloc.start()
    try:
        plan_folds(items, VIEWS["chat"], namespace=RESUME_NS, counter=COUNTER)
        kept = tracemalloc.get_traced_memory()[0]
        ((_, state),) = fold._RESUMED._entries.values()
        figures = (state.cost(), state.held)
        fold._RESUMED._entries.clear()
        del state
        gc.collect()
        return kept - tracemalloc.get_traced_memory()[0], figures
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("agent", ["chat", "codex", "claude"])
@pytest.mark.parametrize("rule", [None, CompactionRule(6_000, 400, 4, 2_000)], ids=["no-compaction", "compaction"])
def test_turn_by_turn_the_same_folds_as_a_plan_of_the_whole_history(fresh, agent, rule):
    items = history(agent, drawn(70, seed=7))
    view = VIEWS[agent]
    ends = list(range(fold.RESUME_MIN_ITEMS + 2, len(items) + 1, 2))
    resumed = 0
    for end in ends:
        turn = [dict(item) if isinstance(item, dict) else item for item in items[:end]]  # parsed anew each turn
        taken = bool(fold._RESUMED._entries)  # a state to go on from
        got = plan_folds(turn, view, namespace=RESUME_NS, counter=COUNTER, compaction=rule)
        assert got == whole(turn, view, compaction=rule), end
        assert len(fold._RESUMED._entries) == 1  # taken out and kept again, not planned beside it
        resumed += taken
    assert resumed == len(ends) - 1  # every turn but the first went on from the one before
    assert any(whole(items, view, compaction=rule).values())


def test_a_history_changed_before_the_end_of_the_last_plan_is_planned_again(fresh):
    texts = drawn(80, seed=3)
    items = history("chat", texts)
    plan_folds(items, VIEWS["chat"], namespace=RESUME_NS, counter=COUNTER)
    edited = [dict(item) for item in items]
    i = next(i for i, m in enumerate(edited) if m.get("role") == "tool" and i > 20)
    edited[i]["content"] = texts[-1]  # the client rewrote an old result: what followed it may fold differently
    edited += history("chat", [texts[-1]])[2:]
    assert plan_folds(edited, VIEWS["chat"], namespace=RESUME_NS, counter=COUNTER) == whole(edited, VIEWS["chat"])


def test_a_reload_call_of_the_history_not_skipped_before_is_planned_again(fresh):
    texts = drawn(80, seed=5)
    items = history("chat", texts)
    plan_folds(items, VIEWS["chat"], namespace=RESUME_NS, counter=COUNTER)
    calls = [m["tool_call_id"] for m in items if m.get("role") == "tool"]
    skipped = set(calls[10:40])  # earlier results now said to be the proxy's reload calls
    more = items + history("chat", [texts[5]])[2:]
    got = plan_folds(more, VIEWS["chat"], namespace=RESUME_NS, counter=COUNTER, skip_calls=skipped)
    assert got == whole(more, VIEWS["chat"], skip_calls=skipped)
    assert got != whole(more, VIEWS["chat"])


def test_another_namespace_or_view_or_start_finds_nothing(fresh):
    items = history("chat", drawn(80, seed=9))
    plan_folds(items, VIEWS["chat"], namespace=RESUME_NS, counter=COUNTER)
    key = (RESUME_NS, type(VIEWS["chat"]), None, 0)
    for other in [
        ("o" * 32, type(VIEWS["chat"]), None, 0),
        (RESUME_NS, type(VIEWS["codex"]), None, 0),
        (RESUME_NS, type(VIEWS["chat"]), None, 3),
    ]:
        assert fold._RESUMED.take(other, items, view=VIEWS["chat"], counter=COUNTER, skip_calls=()) is None
    assert fold._RESUMED.take(key, items, view=VIEWS["chat"], counter=COUNTER, skip_calls=()) is not None
    assert fold._RESUMED.take(key, items, view=VIEWS["chat"], counter=COUNTER, skip_calls=()) is None  # taken out


def test_bounded_in_states_and_in_bytes(monkeypatch):
    items = history("chat", drawn(80, seed=11))
    monkeypatch.setattr(fold, "_RESUMED", fold._Resumed(3, 10**9))
    for k in range(5):
        plan_folds(items, VIEWS["chat"], namespace=f"{k:032d}", counter=COUNTER)
    assert [key[0][-1] for key, _ in fold._RESUMED._entries.values()] == ["2", "3", "4"]  # the least recent went
    held = next(iter(fold._RESUMED._entries.values()))[1].held
    assert held > 0
    monkeypatch.setattr(fold, "_RESUMED", fold._Resumed(32, int(held * 2.5)))
    for k in range(5):
        plan_folds(items, VIEWS["chat"], namespace=f"{k:032d}", counter=COUNTER)
    assert len(fold._RESUMED._entries) == 2
    monkeypatch.setattr(fold, "_RESUMED", fold._Resumed(32, held - 1))
    plan_folds(items, VIEWS["chat"], namespace=RESUME_NS, counter=COUNTER)
    assert not fold._RESUMED._entries  # one larger than the whole budget is not kept
    plan_folds(items[: fold.RESUME_MIN_ITEMS - 1], VIEWS["chat"], namespace=RESUME_NS, counter=COUNTER)
    assert not fold._RESUMED._entries  # a short history is planned whole, never kept


def test_plans_at_once_never_share_a_state(fresh):
    """Two requests of one conversation planned by two threads: each folds what a whole plan folds."""
    texts = drawn(90, seed=13)
    base = history("chat", texts[:70])
    plan_folds(base, VIEWS["chat"], namespace=RESUME_NS, counter=COUNTER)
    turns = [base + history("chat", texts[70 + k : 80 + k])[2:] for k in range(6)]
    got: dict[int, dict] = {}

    def run(k: int) -> None:
        got[k] = plan_folds(turns[k], VIEWS["chat"], namespace=RESUME_NS, counter=COUNTER)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {k: whole(turns[k], VIEWS["chat"]) for k in range(6)}


def test_what_a_caller_does_with_the_folds_leaves_the_state_alone(fresh):
    items = history("chat", drawn(80, seed=17))
    first = plan_folds(items, VIEWS["chat"], namespace=RESUME_NS, counter=COUNTER)
    assert first
    first.clear()
    assert plan_folds(items, VIEWS["chat"], namespace=RESUME_NS, counter=COUNTER) == whole(items, VIEWS["chat"])


def _short_lines(count: int, seed: int) -> list[str]:
    """Results of many short distinct lines (numbers), of sizes diffed against each other."""
    rnd = random.Random(seed)
    return ["\n".join(str(rnd.randrange(10**6)) for _ in range(3000)) for _ in range(count)]


def test_a_kept_state_holds_little_beyond_its_items(fresh):
    """Past MAX_KEPT_NAMES, the lines numbered for its diffs and its bases' lines are let go
    before a state is kept (they were 14 times its items: 32 states would hold gigabytes); a
    resumed plan reads them again and folds what a whole plan folds."""
    texts = _short_lines(40, seed=3)
    texts[30] = texts[20].replace("\n1", "\n2", 3)  # one near-identical result: a diff to make
    items = history("chat", texts)
    beyond, _ = kept_beyond_items(items)
    assert beyond < 0.5 * sum(footprint(item) for item in items), beyond
    more = items + history("chat", _short_lines(4, seed=4) + [texts[21].replace("\n3", "\n4", 2)])[2:]
    plan_folds(items, VIEWS["chat"], namespace=RESUME_NS, counter=COUNTER)
    assert plan_folds(more, VIEWS["chat"], namespace=RESUME_NS, counter=COUNTER) == whole(more, VIEWS["chat"])


def test_what_a_kept_state_costs_counts_the_lines_it_holds(fresh):
    """Results of few distinct short lines keep their bases' lines (under MAX_KEPT_NAMES numbered
    lines): many times their text. What the state is counted as holding covers what it holds."""
    rnd = random.Random(8)
    texts = ["\n".join(rnd.choice("abcdef") + rnd.choice("abcdef") for _ in range(12_000)) for _ in range(33)]
    items = history("chat", texts)
    beyond, (cost, held) = kept_beyond_items(items)
    assert held == sum(footprint(item) for item in items) and beyond > 4 * held  # the lines: most of it
    assert cost >= held + beyond, (cost, held, beyond)


def test_line_numbers_let_go_within_a_plan_change_no_fold(monkeypatch):
    """Past MAX_NAMES numbered lines, a plan lets them go and reads its bases' lines again:
    the same folds."""
    texts = drawn(70, seed=5)
    items = history("chat", texts)
    expected = whole(items, VIEWS["chat"])
    assert expected
    monkeypatch.setattr(fold, "MAX_NAMES", 50)
    assert whole(items, VIEWS["chat"]) == expected


class Compared(dict):
    """A JSON object that counts the deep comparisons made of it."""

    comparisons = 0

    def __eq__(self, other: object) -> bool:
        Compared.comparisons += 1
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]


def test_a_turn_recalled_from_the_one_before_compares_its_history_once(fresh, monkeypatch):
    """The counter recalls the earlier turn's counts by comparing the history once
    (`TokenCounter.recall`); the fold's state of that turn holds the very objects it compared,
    so it is taken without comparing the history again (`TokenCounter.earlier_prefix`)."""
    from proxy.core import tokens

    monkeypatch.setattr(tokens, "_recent", tokens._RecentCounts(tokens.RECENT_HISTORIES, tokens.RECENT_BYTES))
    items = history("chat", drawn(70, seed=7))
    view = VIEWS["chat"]

    def turn(end: int) -> tuple[list, dict]:
        parsed = [Compared(item) for item in items[:end]]  # parsed anew each turn
        counter = COUNTER.for_request()
        counter.recall(parsed, key=RESUME_NS)
        counter.messages(parsed)
        counter.remember(parsed, key=RESUME_NS)
        Compared.comparisons = 0
        return parsed, plan_folds(parsed, view, namespace=RESUME_NS, counter=counter)

    turn(len(items) - 4)
    parsed, got = turn(len(items))
    assert Compared.comparisons == 0  # the fold's state taken by identity
    assert got == whole(parsed, view)
