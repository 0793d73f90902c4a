"""The unified diff of two texts' lines, with its work bounded before it is made. Pure.

What `proxy.core.fold` folds a result into. Python's difflib matcher is quadratic in pure
Python (about 0.1 s for a pair of 2,000-line results, seconds for larger ones), and a request
may ask for hundreds of pairs, most of them thrown away as too long. Here the work is decided
first, each step only for what the one before let through, and none longer than `limit`
characters is made:

- a lower bound on the hunks' size (`floor`, O(lines), a set difference in C): a line of one
  text that the other cannot match, counting lines as multisets, is a `-` or `+` line of its
  own, its characters plus two;
- the common leading and trailing lines are trimmed (they are context at most); the middle's
  n × m lines must be at most MAX_CELLS;
- its edit distance in lines, banded at the most lines `limit` characters can change
  (rapidfuzz's `Indel.distance` with a cutoff: bit-parallel, in C);
- only then its alignment, a longest common subsequence of its lines (`Indel.opcodes`: about
  n·m/64 word operations and n·m/8 bytes; at MAX_CELLS about 1 ms and 1.3 MB).

Deterministic: the same two texts give the same hunks in every process (lines are compared
as numbers given per distinct line, never by hash). The format is difflib's unified diff
without its `---`/`+++` header: `@@ -a,b +c,d @@` hunks of ` `/`-`/`+` lines, `context` lines
around each change, difflib's grouping, a change's `-` lines before its `+` lines. The
alignment is a longest common subsequence's (the fewest lines changed), so for some inputs the
hunks differ from difflib's, whose matcher takes the longest contiguous block first and
ignores lines frequent in the second text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from rapidfuzz.distance import Indel, Postfix, Prefix

MAX_CELLS = 1 << 22  # the trimmed middle's lines, one text's times the other's: about 2,000 × 2,000

Opcode = tuple[str, int, int, int, int]  # difflib's: tag, a[i1:i2], b[j1:j2]


class Lines:
    """A text's lines (`str.splitlines`), their counts, and the lines as numbers: `names` gives
    every distinct line one, shared by the texts that are diffed together (numbers compare
    exactly, and rapidfuzz compares them fastest). Read once for every diff the text is in."""

    __slots__ = ("lines", "counts", "ids", "shortest")

    def __init__(self, text: str, names: dict[str, int]) -> None:
        self.lines = text.splitlines()
        self.counts = Counter(self.lines)
        for line in self.counts:
            names.setdefault(line, len(names))
        self.ids = list(map(names.__getitem__, self.lines))
        self.shortest = min(map(len, self.lines), default=0)


def floor(a: Lines, b: Lines, *, stop: int) -> int:
    """A lower bound on the characters of the hunks of any diff from `a` to `b` (each line one
    cannot match: its characters, its `-`/`+` and a newline), counted until it passes `stop`."""
    if dict.__eq__(a.counts, b.counts):  # the same lines, as often (a permutation); Counter's own == is Python
        return 0
    total = 0
    for one, other in ((a.counts, b.counts), (b.counts, a.counts)):
        matched = other.get
        for line, count in one.items() - other.items():  # the lines whose counts differ (a set difference, in C)
            extra = count - matched(line, 0)
            if extra > 0:
                total += extra * (len(line) + 2)
                if total > stop:
                    return total
    return total


def hunks(a: Lines, b: Lines, *, limit: int, context: int) -> str | None:
    """The unified diff's hunks from `a` to `b` (their Lines of the same `names`), or None: no
    line differs, the hunks would be longer than `limit` characters, or their alignment would
    cost more than MAX_CELLS."""
    if floor(a, b, stop=limit) > limit:
        return None
    head = Prefix.similarity(a.ids, b.ids)
    tail = Postfix.similarity(a.ids[head:], b.ids[head:])
    n, m = len(a.ids) - head - tail, len(b.ids) - head - tail
    if n + m == 0 or n * m > MAX_CELLS:
        return None
    xs, ys = a.ids[head : head + n], b.ids[head : head + m]
    most = limit // (2 + min(a.shortest, b.shortest))  # the most lines a diff of `limit` characters changes
    if abs(n - m) > most or Indel.distance(xs, ys, score_cutoff=most) > most:  # banded: cheaper than the alignment
        return None
    blocks = [
        (0, 0, head),
        *(
            (block.a + head, block.b + head, block.size)
            for block in Indel.opcodes(xs, ys).as_matching_blocks()
            if block.size
        ),
        (head + n, head + m, tail),
    ]
    return _format(a.lines, b.lines, _grouped(_opcodes(blocks), context), limit=limit)


def _opcodes(blocks: list[tuple[int, int, int]]) -> list[Opcode]:
    """difflib's `get_opcodes` from matching blocks (the last one ending both texts): what lies
    between two blocks is one delete, insert or replace."""
    codes: list[Opcode] = []
    i = j = 0
    for ai, bj, size in blocks:
        tag = "replace" if i < ai and j < bj else "delete" if i < ai else "insert" if j < bj else ""
        if tag:
            codes.append((tag, i, ai, j, bj))
        if size:
            if codes and codes[-1][0] == "equal":  # adjacent blocks: one run of equal lines
                _, i1, _, j1, _ = codes.pop()
                codes.append(("equal", i1, ai + size, j1, bj + size))
            else:
                codes.append(("equal", ai, ai + size, bj, bj + size))
        i, j = ai + size, bj + size
    return codes


def _grouped(codes: list[Opcode], context: int) -> Iterator[list[Opcode]]:
    """difflib's `SequenceMatcher.get_grouped_opcodes`: the changes with `context` lines around,
    those closer than twice that in one group."""
    if codes[0][0] == "equal":
        tag, i1, i2, j1, j2 = codes[0]
        codes[0] = tag, max(i1, i2 - context), i2, max(j1, j2 - context), j2
    if codes[-1][0] == "equal":
        tag, i1, i2, j1, j2 = codes[-1]
        codes[-1] = tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context)
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * context:
            group.append((tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - context), max(j1, j2 - context)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group


def _format(x: list[str], y: list[str], groups: Iterator[list[Opcode]], *, limit: int) -> str | None:
    """The hunks, None when there are none or once they pass `limit` characters."""
    out: list[str] = []
    for group in groups:
        start = len(out)
        out.append(f"@@ -{_range(group[0][1], group[-1][2])} +{_range(group[0][3], group[-1][4])} @@")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [" " + line for line in x[i1:i2]]
                continue
            if tag in ("replace", "delete"):
                out += ["-" + line for line in x[i1:i2]]
            if tag in ("replace", "insert"):
                out += ["+" + line for line in y[j1:j2]]
        limit -= sum(map(len, out[start:])) + len(out) - start  # each line and the newline before it
        if limit < -1:  # the first line has no newline before it
            return None
    return "\n".join(out) if out else None


def _range(start: int, stop: int) -> str:
    """difflib's `_format_range_unified`: `first,count` of a hunk's lines, 1-based."""
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start if not length else start + 1},{length}"
