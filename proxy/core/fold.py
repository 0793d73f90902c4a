"""Folding, pure: a tool result that repeats an earlier one goes as a pointer to it (`identical
to …`, or that result with a unified diff), and the line diff it is made with, its work bounded
before it is made.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

from rapidfuzz.distance import Indel, Postfix, Prefix

from proxy.core import texts
from proxy.core.jsonio import footprint
from proxy.core.preview import CompactionRule
from proxy.core.texts import is_marker, make_ref
from proxy.core.tokens import REPLY_PRIMING, TokenCounter
from proxy.core.view import ItemView

# ==================== line diff
# The unified diff of two texts' lines, with its work bounded before it is made. Pure.
#
# What a fold (below) folds a result into. Python's difflib matcher is quadratic in pure
# Python (about 0.1 s for a pair of 2,000-line results, seconds for larger ones), and a request
# may ask for hundreds of pairs, most of them thrown away as too long. Here the work is decided
# first, each step only for what the one before let through, and none longer than `limit`
# characters is made:
#
# - a lower bound on the hunks' size (`floor`, O(lines), a set difference in C): a line of one
#   text that the other cannot match, counting lines as multisets, is a `-` or `+` line of its
#   own, its characters plus two;
# - the common leading and trailing lines are trimmed (they are context at most); the middle's
#   n × m lines must be at most MAX_CELLS;
# - its edit distance in lines, banded at the most lines `limit` characters can change
#   (rapidfuzz's `Indel.distance` with a cutoff: bit-parallel, in C);
# - only then its alignment, a longest common subsequence of its lines (`Indel.opcodes`: about
#   n·m/64 word operations and n·m/8 bytes; at MAX_CELLS about 1 ms and 1.3 MB).
#
# Deterministic: the same two texts give the same hunks in every process (lines are compared
# as numbers given per distinct line, never by hash). The format is difflib's unified diff
# without its `---`/`+++` header: `@@ -a,b +c,d @@` hunks of ` `/`-`/`+` lines, `context` lines
# around each change, difflib's grouping, a change's `-` lines before its `+` lines. The
# alignment is a longest common subsequence's (the fewest lines changed), so for some inputs the
# hunks differ from difflib's, whose matcher takes the longest contiguous block first and
# ignores lines frequent in the second text.

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


# ==================== fold
# Folding: a tool result that repeats an earlier one goes as a pointer to it. Pure.
#
# Agents repeat themselves: the same file viewed again, the same test run failing the same way, a
# command whose output repeats an earlier one with a few lines changed. Such a result is forwarded
# as a short pointer to the earlier result (by its tool call id) — `identical to …`, or that result
# with a unified diff — and stored whole under its ref, so `context_reload` gives it back byte for
# byte (`proxy.core.texts.folded_identical`, `folded_diff`).
#
# Folded as it arrives, never later: whether items[i] is folded, and into which bytes, depends on
# items[:i + 1] alone (its text and the results before it), so a result folded on the turn it first
# appears is folded identically on every later turn, and a result forwarded whole is never
# rewritten once a later one repeats it (the provider's cached prefix would break there).
#
# - Which results: tool results of at least FOLD_MIN_CHARS characters; never a marker or a fold of
#   the proxy's, nor the result of one of its reload tools.
# - Which earlier result (the base): one forwarded unfolded (whole, or compacted into its
#   preview), answering a call whose id is a plain one (`texts.CALL_ID_PATTERN`), of at least
#   FOLD_MIN_CHARS / 2 characters. Identical: the most recent such one with the same text.
#   Nearly identical: of the BASE_WINDOW most recent, the one giving the shortest diff. A fold
#   never points to a fold: the model always finds its base forwarded as it came.
# - When: the pointer (with its diff) is at most FOLD_RATIO of the result's characters and at most
#   `texts.FOLD_MAX_CHARS`: "much smaller", or the result goes as it is. The diff is a unified
#   diff with DIFF_CONTEXT line of context (the line diff above: difflib's format, its work
#   bounded before it is made, a diff that cannot fit never made).

FOLD_MIN_CHARS = 400  # shorter results go as they are (a pointer would save little)
FOLD_RATIO = 0.5  # a fold is at most this share of the result's characters
BASE_WINDOW = 16  # a near-identical result is diffed against at most this many recent results
DIFF_CONTEXT = 1  # lines of context around each change
MIN_SHARED_LINES = 0.5  # a base shares at least this share of the result's distinct lines, or is not diffed
MAX_DIFF_CHARS = 256 * 1024  # larger results are folded only when identical
# What any pair costs before its alignment (its lines read, counted, compared, trimmed, its memo
# entry), in `diff_cells`' cells: a pair of 20-line results about 1/100 of one at MAX_CELLS
# (0.18 ms against 18 ms), so 500 small results (8,000 pairs) are not planned on the loop.
PAIR_CELLS = MAX_CELLS // 100
_CALL_ID = re.compile(texts.CALL_ID_PATTERN)


@dataclass(frozen=True)
class Fold:
    """items[i] folded: `text` is forwarded in place of `original`, stored under `ref`; `base`
    is the index of the earlier result it points to."""

    ref: str
    text: str
    original: str
    base: int


class _Text:
    """A result's text, its digest (the key of its diffs in _MEMO) and its lines, each taken once
    per plan: the lines only when a diff is not in _MEMO, numbered by the plan's `names`."""

    __slots__ = ("text", "digest", "_names", "_lines")

    def __init__(self, text: str, digest: bytes, names: dict[str, int]) -> None:
        self.text, self.digest, self._names = text, digest, names
        self._lines: Lines | None = None

    @property
    def lines(self) -> Lines:
        if self._lines is None:
            self._lines = Lines(self.text, self._names)
        return self._lines

    def has_lines(self) -> bool:
        return self._lines is not None

    def forget(self) -> None:
        """Let its lines go (a base out of the window is never diffed again)."""
        self._lines = None


@dataclass
class _Base:
    call: str
    index: int
    tokens: int
    read: _Text  # its text


def plan_folds(
    items: list[Any],
    view: ItemView,
    *,
    namespace: str,
    counter: TokenCounter,
    compaction: CompactionRule | None = None,
    start: int = 0,
    skip_calls: Collection[str] = (),
) -> dict[int, Fold]:
    """The folds of items[start:], by index. `compaction`: the rule of the compaction that
    follows (None: none). `skip_calls`: the proxy's reload calls (their results are neither
    folded nor bases).

    A plan whose items begin with those of a plan made before (the same conversation's earlier
    turn) goes on from where that one stopped (`_RESUMED`): what it decided of those items is
    a function of them alone, so only the new ones are planned."""
    key = (namespace, type(view), compaction, start)
    state = _RESUMED.take(key, items, view=view, counter=counter, skip_calls=skip_calls)
    if state is None:
        state = _State(view=view, encoding=counter.encoding_name, encoder=counter.encoder)
    live = state.live  # the tokens of items[start:i] as forwarded; with items[i]: the history on its arrival
    exact, window, folds, names = state.exact, state.window, state.folds, state.names
    for i in range(len(state.prefix), len(items)):
        if len(names) > MAX_NAMES:
            _let_lines_go(state)
        state.held += footprint(items[i])
        if i < start:
            continue
        text = view.tool_text(items[i])
        tokens = counter.message(items[i])
        call = view.answers(items[i]) if text is not None else None
        if call is not None:
            state.calls.add(call)
        if (
            text is None
            or (call is not None and call in skip_calls)
            or is_marker(text)
            or texts.fold_ref(text) is not None
        ):
            if call is not None and call in skip_calls:
                state.skipped.add(call)
            live += tokens
            continue

        def shown(base: _Base, total: int, arrival: int = i) -> bool:  # whole on the turn items[arrival] arrives
            return compaction is None or not compaction.replaces(
                base.tokens, index=base.index, length=arrival + 1, total=total
            )

        fold = None
        read = _Text(text, _digest(text) if len(text) >= FOLD_MIN_CHARS // 2 else b"", names)
        if len(text) >= FOLD_MIN_CHARS:  # the bases shown whole at the least size the history may have
            fold = _fold(
                read,
                [b for b in (exact.get(text),) if b is not None and shown(b, live)],
                window=[b for b in window if shown(b, live)],
                namespace=namespace,
            )
        if fold is not None:
            folded = counter.message(view.with_tool_text(items[i], fold.text))
            base = next(b for b in (*window, *exact.values()) if b.index == fold.base)
            if shown(base, live + folded):  # ...and at the size it has with the fold
                folds[i] = fold
                live += folded
                continue
        live += tokens
        if call is not None and len(text) >= FOLD_MIN_CHARS // 2 and _CALL_ID.fullmatch(call):
            entry = _Base(call, i, counter.text(text), read)
            exact[text] = entry
            window.append(entry)
            if len(window) > BASE_WINDOW:
                window.pop(0).read.forget()
    state.live, state.prefix = live, items
    if len(names) > MAX_KEPT_NAMES:
        _let_lines_go(state)
    _RESUMED.keep(key, state, items=len(items) - start)
    return dict(folds)


@dataclass(eq=False)
class _State:
    """Where a plan stopped: its items, and what it decided of them, to go on from there."""

    view: ItemView
    encoding: str  # the counter's (a request's own counter is made for it: never held)
    encoder: Any
    prefix: list[Any] = field(default_factory=list)
    exact: dict[str, _Base] = field(default_factory=dict)  # text → the most recent unfolded result with it
    window: list[_Base] = field(default_factory=list)  # the most recent unfolded results, oldest first
    folds: dict[int, Fold] = field(default_factory=dict)
    names: dict[str, int] = field(default_factory=dict)  # a number for each line diffed (`Lines`)
    live: int = REPLY_PRIMING
    calls: set[str] = field(default_factory=set)  # the calls the prefix's results answer
    skipped: set[str] = field(default_factory=set)  # of which skipped as the proxy's reload calls
    held: int = 0  # the bytes its items hold (`proxy.core.jsonio`)

    def cost(self) -> int:
        """What keeping it costs: its items, and about what its numbered lines and its bases'
        lines hold (a short line costs about a hundred bytes in each)."""
        lines = sum(len(b.read.lines.lines) for b in self.window if b.read.has_lines())
        return self.held + LINE_BYTES * (len(self.names) + lines)


def _let_lines_go(state: _State) -> None:
    """The numbered lines and its bases' lines let go (read again when a base is next diffed):
    they hold many times the texts' bytes (a short line costs about 150 bytes as a name), and a
    diff depends only on which lines are equal, never on their numbers."""
    state.names.clear()
    for base in state.window:
        base.read.forget()


class _Resumed:
    """The states of the most recent large plans, a bounded few (RESUME_STATES, RESUME_BYTES held
    in all; the least recently used go first). A state is taken out while a plan goes
    on from it, so two plans never share one; planned again from the start if it is gone."""

    def __init__(self, states: int, held: int) -> None:
        self.states, self.held = states, held
        self._entries: OrderedDict[int, tuple[tuple[Any, ...], _State]] = OrderedDict()
        self._lock = threading.Lock()
        self._serial = 0

    def take(
        self,
        key: tuple[Any, ...],
        items: list[Any],
        *,
        view: ItemView,
        counter: TokenCounter,
        skip_calls: Collection[str],
    ) -> _State | None:
        """The state of a plan whose items begin `items`, made with the same view, counter and
        reload calls (as far as its items go), taken out; None when there is none."""
        with self._lock:
            candidates = [
                (serial, state)
                for serial, (k, state) in reversed(self._entries.items())
                if k == key
                and state.view is view
                and state.encoding == counter.encoding_name
                and state.encoder is counter.encoder
                and len(state.prefix) <= len(items)
            ]
        for serial, state in candidates:
            if not counter.earlier_prefix(state.prefix, items) and state.prefix != items[: len(state.prefix)]:
                continue
            if state.skipped != state.calls.intersection(skip_calls):
                continue
            with self._lock:
                if self._entries.pop(serial, None) is None:
                    continue  # another plan took it meanwhile
            return state
        return None

    def keep(self, key: tuple[Any, ...], state: _State, *, items: int) -> None:
        cost = state.cost()
        if items < RESUME_MIN_ITEMS or cost > self.held:
            return
        with self._lock:
            self._serial += 1
            self._entries[self._serial] = (key, state)
            costs = {serial: cost if s is state else s.cost() for serial, (_, s) in self._entries.items()}
            total = sum(costs.values())
            while self._entries and (len(self._entries) > self.states or total > self.held):
                serial, _ = self._entries.popitem(last=False)
                total -= costs[serial]


def diff_cells(items: list[Any], view: ItemView) -> int:
    """About the most lines the diffs of planning `items`' folds may align, counted as
    `MAX_CELLS` is (one text's lines times the other's, at most MAX_CELLS a pair, at
    least PAIR_CELLS: a pair of short results costs more than its lines): each result of at
    least FOLD_MIN_CHARS against the BASE_WINDOW before it of a size it may be diffed with,
    whole. Cheap (newlines counted); decides only where the plan runs (`proxy.offload.cpu_pool`),
    never what it makes."""
    cells = 0
    recent: list[tuple[int, int]] = []  # (characters, lines) of the most recent results
    for item in items:
        text = view.tool_text(item)
        if text is None or not FOLD_MIN_CHARS // 2 <= len(text) <= MAX_DIFF_CHARS:
            continue
        size, lines = len(text), text.count("\n") + 1
        if size >= FOLD_MIN_CHARS:
            cells += sum(
                max(PAIR_CELLS, min(MAX_CELLS, lines * other)) for chars, other in recent if 0.5 <= size / chars <= 2.0
            )
        recent = [*recent[1 - BASE_WINDOW :], (size, lines)]
    return cells


def _fold(read: _Text, same: list[_Base], *, window: list[_Base], namespace: str) -> Fold | None:
    text = read.text
    limit = _limit(text)
    ref = make_ref(namespace, "tool_result", text)  # the ref compaction would give the same text
    if same:
        folded = texts.folded_identical(same[0].call, len(text), ref=ref)
        return Fold(ref, folded, text, same[0].index) if len(folded) <= limit else None
    best: Fold | None = None
    for base in reversed(window):  # the most recent first: it wins a tie
        hunks = _hunks(base.read, read)
        if hunks is None:
            continue
        folded = texts.folded_diff(base.call, len(text), hunks, ref=ref)
        if len(folded) <= limit and (best is None or len(folded) < len(best.text)):
            best = Fold(ref, folded, text, base.index)
    return best


def _limit(text: str) -> int:
    """The most characters a fold of `text` may have."""
    return min(texts.FOLD_MAX_CHARS, int(len(text) * FOLD_RATIO))


def diff_hunks(base: str, text: str) -> str | None:
    """The hunks of the unified diff from `base` to `text` (lines), or None when they are not
    worth diffing: too different in size or lines, too large, no line differs, or too long for
    any fold of `text`."""
    names: dict[str, int] = {}
    return _hunks(_Text(base, _digest(base), names), _Text(text, _digest(text), names))


def _hunks(base: _Text, text: _Text) -> str | None:
    """diff_hunks of two texts read once per plan. A pure function of the two texts: kept in _MEMO."""
    if (
        not (base.text and text.text)
        or len(text.text) > MAX_DIFF_CHARS
        or len(base.text) > MAX_DIFF_CHARS
        or not 0.5 <= len(text.text) / len(base.text) <= 2.0
    ):
        return None
    key = (base.digest, text.digest)
    found, diffed = _MEMO.get(key)
    if found:
        return diffed
    diffed = None
    distinct = text.lines.counts.keys()
    if distinct and len(distinct & base.lines.counts.keys()) >= MIN_SHARED_LINES * len(distinct):
        # no fold is longer than _limit, and a fold is longer than its hunks: nothing longer is made
        diffed = hunks(base.lines, text.lines, limit=_limit(text.text), context=DIFF_CONTEXT)
    _MEMO.put(key, diffed)
    return diffed


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class _Memo:
    """Diffs already computed, by the digests of their two texts: every turn plans the whole
    history again, and a diff is the costly step. Bounded (least recently used evicted first),
    shared by the threads that plan large requests."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._entries: OrderedDict[tuple[bytes, bytes], str | None] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[bytes, bytes]) -> tuple[bool, str | None]:
        with self._lock:
            if key not in self._entries:
                return False, None
            self._entries.move_to_end(key)
            return True, self._entries[key]

    def put(self, key: tuple[bytes, bytes], hunks: str | None) -> None:
        with self._lock:
            self._entries[key] = hunks
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)


_MEMO = _Memo()
MAX_NAMES = 1 << 19  # lines numbered in one plan before they are let go (`_let_lines_go`): about 60 MB
MAX_KEPT_NAMES = 1 << 16  # a state kept with more lets its lines go (read again when next diffed)
LINE_BYTES = 100  # about what a numbered line, or a line of a base's `Lines`, holds
RESUME_MIN_ITEMS = 64  # a shorter history is planned whole: cheap, and not worth holding
RESUME_STATES = 32
RESUME_BYTES = (
    128 * 1024 * 1024
)  # what the states hold in all (their items and lines: `_State.cost`) (a 1M-token chat history: about 20 MB)
_RESUMED = _Resumed(RESUME_STATES, RESUME_BYTES)
