"""A plan that goes on from an earlier turn's (`proxy.core.fold._Resumed`) folds exactly what a
plan of the whole history folds: turn by turn, in each agent's shape, with the compaction rule
acting, after an edit in the middle, with the reload calls changing, and within its bounds."""

from __future__ import annotations

import gc
import random
import threading
import tracemalloc

import pytest

from proxy.core import fold
from proxy.core.compaction_rule import CompactionRule
from proxy.core.fold import plan_folds
from proxy.core.footprint import footprint
from proxy.core.tokens import counter_for_model
from tests.unit.core.fold_fixtures import history
from tests.unit.core.test_fold import VIEWS

COUNTER = counter_for_model("gpt-4o")
NS = "r" * 32


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
        return plan_folds(items, view, namespace=NS, counter=COUNTER, **options)
    finally:
        fold._RESUMED = saved


def kept_beyond_items(items) -> tuple[int, tuple[int, int]]:
    """(the bytes the state kept of planning `items` holds, measured by letting it go; its own
    (cost, held))."""
    gc.collect()
    tracemalloc.start()
    try:
        plan_folds(items, VIEWS["chat"], namespace=NS, counter=COUNTER)
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
        got = plan_folds(turn, view, namespace=NS, counter=COUNTER, compaction=rule)
        assert got == whole(turn, view, compaction=rule), end
        assert len(fold._RESUMED._entries) == 1  # taken out and kept again, not planned beside it
        resumed += taken
    assert resumed == len(ends) - 1  # every turn but the first went on from the one before
    assert any(whole(items, view, compaction=rule).values())


def test_a_history_changed_before_the_end_of_the_last_plan_is_planned_again(fresh):
    texts = drawn(80, seed=3)
    items = history("chat", texts)
    plan_folds(items, VIEWS["chat"], namespace=NS, counter=COUNTER)
    edited = [dict(item) for item in items]
    i = next(i for i, m in enumerate(edited) if m.get("role") == "tool" and i > 20)
    edited[i]["content"] = texts[-1]  # the client rewrote an old result: what followed it may fold differently
    edited += history("chat", [texts[-1]])[2:]
    assert plan_folds(edited, VIEWS["chat"], namespace=NS, counter=COUNTER) == whole(edited, VIEWS["chat"])


def test_a_reload_call_of_the_history_not_skipped_before_is_planned_again(fresh):
    texts = drawn(80, seed=5)
    items = history("chat", texts)
    plan_folds(items, VIEWS["chat"], namespace=NS, counter=COUNTER)
    calls = [m["tool_call_id"] for m in items if m.get("role") == "tool"]
    skipped = set(calls[10:40])  # earlier results now said to be the proxy's reload calls
    more = items + history("chat", [texts[5]])[2:]
    got = plan_folds(more, VIEWS["chat"], namespace=NS, counter=COUNTER, skip_calls=skipped)
    assert got == whole(more, VIEWS["chat"], skip_calls=skipped)
    assert got != whole(more, VIEWS["chat"])


def test_another_namespace_or_view_or_start_finds_nothing(fresh):
    items = history("chat", drawn(80, seed=9))
    plan_folds(items, VIEWS["chat"], namespace=NS, counter=COUNTER)
    key = (NS, type(VIEWS["chat"]), None, 0)
    for other in [
        ("o" * 32, type(VIEWS["chat"]), None, 0),
        (NS, type(VIEWS["codex"]), None, 0),
        (NS, type(VIEWS["chat"]), None, 3),
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
    plan_folds(items, VIEWS["chat"], namespace=NS, counter=COUNTER)
    assert not fold._RESUMED._entries  # one larger than the whole budget is not kept
    plan_folds(items[: fold.RESUME_MIN_ITEMS - 1], VIEWS["chat"], namespace=NS, counter=COUNTER)
    assert not fold._RESUMED._entries  # a short history is planned whole, never kept


def test_plans_at_once_never_share_a_state(fresh):
    """Two requests of one conversation planned by two threads: each folds what a whole plan folds."""
    texts = drawn(90, seed=13)
    base = history("chat", texts[:70])
    plan_folds(base, VIEWS["chat"], namespace=NS, counter=COUNTER)
    turns = [base + history("chat", texts[70 + k : 80 + k])[2:] for k in range(6)]
    got: dict[int, dict] = {}

    def run(k: int) -> None:
        got[k] = plan_folds(turns[k], VIEWS["chat"], namespace=NS, counter=COUNTER)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {k: whole(turns[k], VIEWS["chat"]) for k in range(6)}


def test_what_a_caller_does_with_the_folds_leaves_the_state_alone(fresh):
    items = history("chat", drawn(80, seed=17))
    first = plan_folds(items, VIEWS["chat"], namespace=NS, counter=COUNTER)
    assert first
    first.clear()
    assert plan_folds(items, VIEWS["chat"], namespace=NS, counter=COUNTER) == whole(items, VIEWS["chat"])


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
    plan_folds(items, VIEWS["chat"], namespace=NS, counter=COUNTER)
    assert plan_folds(more, VIEWS["chat"], namespace=NS, counter=COUNTER) == whole(more, VIEWS["chat"])


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
