"""The line diff folding is made of (`proxy.core.line_diff`): difflib's unified format, a
longest common subsequence's alignment, and the work decided before the diff is made."""

from __future__ import annotations

import difflib
import random

import pytest
from rapidfuzz.distance import Indel

from proxy.core import line_diff
from proxy.core.line_diff import MAX_CELLS, Lines, floor, hunks

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
    """rapidfuzz's Indel as `proxy.core.line_diff` calls it, counting each call's lines."""

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
    monkeypatch.setattr(line_diff, "Indel", counting)
    side = int(MAX_CELLS**0.5)
    for lines, expect in ((side, True), (side + 1, False)):  # a middle of side × side lines, or one more
        body = [f"row {k}" for k in range(lines)]
        made = diff("\n".join(body), "\n".join(["first", *body[1:-1], "last"]), limit=4000)
        assert (made is not None) == expect
    assert counting.alignments == [(side, side)]


def test_a_diff_that_cannot_fit_is_never_aligned(monkeypatch):
    counting = Counting()
    monkeypatch.setattr(line_diff, "Indel", counting)
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
