"""The preview a tool-result marker shows, pure: what matters of a large output in a bounded size
(first and last lines, error lines, the shape of JSON), by content type where it has one
(source code, unified diffs, tables), and the one rule of when compaction and folding show a
result as its preview (`CompactionRule`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import compress, islice, repeat
from typing import Any

from proxy.core.settings import OffloadSettings

# ==================== preview kinds
# Previews by content type: source code, unified diffs, tables (logs and JSON: below).
#
# What a model needs back from a large output depends on what it is: of a file view (`cat -n`, an
# editor's view, a plain `cat` of code) the outline of its definitions with their line numbers,
# each with the attribute and call names its body uses (what an agent re-implementing or calling
# it reaches for: on the shared traces recall 0.971 → 0.972 compaction only, 0.925 → 0.926 auto,
# in the same preview size), and the lines that state errors; of a diff its file and hunk headers; of a table its header, its
# size and first rows. Each layout here returns the preview's lines within the bounds the caller
# gives, or None when the text is not of its kind; `kind_preview` tries them in turn.
#
# Pure and deterministic (the marker's bytes depend on it), linear in the text: every pattern
# has bounded repeats and is matched on at most KIND_SCAN_WIDTH characters of a line, and at most
# KIND_SCAN_LINES lines are looked at to recognise a kind.

KIND_SCAN_WIDTH = 300
KIND_SCAN_LINES = 4000  # lines looked at for hunks or rows (a longer text: its first ones)
SCAN_CHARS = 400_000  # characters looked at for definitions and to recognise a kind
DEF_WIDTH = 72  # one definition's line in an outline
BODY_WIDTH = 56  # then the names its body uses, after " … "
BODY_LINES = 400  # lines of a body looked at for them
BODY_NAMES = 8
MIN_DEFINITIONS = 3

# The keywords that open a definition (Python, JS/TS, Go, Rust, Java/C#/Kotlin, Ruby, shell functions).
_KEYWORDS = r"(?:def|class|function|fn|func|interface|struct|enum|trait|impl|module|object|type)"
# A definition starting a line of code.
_DEFINITION = re.compile(
    r"(?:export\s{1,4}|pub(?:\(\w{1,12}\))?\s{1,4}|public\s{1,4}|private\s{1,4}|protected\s{1,4}|static\s{1,4}"
    r"|abstract\s{1,4}|async\s{1,4}|default\s{1,4}){0,4}" + _KEYWORDS + r"\s{1,4}[A-Za-z_$(][\w$.<>]{0,80}"
)
# `cat -n` (`   12\t`), an editor's view (`12:`/`12|`), numbered grep-like listings
_NUMBERED = re.compile(r"\s{0,8}(\d{1,7})(?:\t|→|[:|] ?| {2})")
_CODE_START = re.compile(r"\s{0,8}(?:import \w|from [\w.]{1,80} import |#include |package \w|use \w|#!/)")
_FAILURE = re.compile(r"Traceback \(most recent call last\)|Error(?:\[\w{1,12}\])?: |FAILED|error: |Exception: ")
_DIFF_FILE = re.compile(r"diff --git |\+\+\+ |Index: |\*\*\* (?:Add|Update|Delete) File: ")
_HUNK = re.compile(r"@@ -\d{1,9}(?:,\d{1,9})? \+\d{1,9}(?:,\d{1,9})? @@")


def _fit_line(out: list[str], line: str, max_chars: int, *, max_lines: int) -> bool:
    """Append `line` when the body still fits (lines joined by "\n")."""
    if len(out) >= max_lines or sum(map(len, out)) + len(out) + len(line) > max_chars:
        return False
    out.append(line)
    return True


# ---------------------------------------------------------------- source code

_NUMBER = r"[ \t]{0,8}(\d{1,7})(?:\t|→|[:|] ?| {2})"
_NUMBERED_LINE = re.compile("^" + _NUMBER, re.M)
# a definition line, found in the whole text at once (C speed): its number when the view numbers
# it, its indentation, the code
_DEFINITION_LINE = re.compile("^(?:" + _NUMBER + ")?([ \t]{0,40})((?:" + _DEFINITION.pattern + ")[^\n]{0,300})", re.M)
_CODE_START_LINE = re.compile("^(?:" + _NUMBER + ")?" + _CODE_START.pattern, re.M)
# a name a body uses: an attribute or dotted name (`self.x`, `bar.baz`), or a call (`foo(`)
_BODY_NAME = re.compile(r"(?<![\w.])([A-Za-z_]\w{0,60}(?:\.[A-Za-z_]\w{0,60}){0,4})(\()?")
_NOT_NAMES = frozenset(
    {
        "if",
        "elif",
        "for",
        "while",
        "return",
        "not",
        "and",
        "or",
        "in",
        "is",
        "assert",
        "yield",
        "lambda",
        "with",
        "print",
        "len",
        "str",
        "int",
        "super",
        "isinstance",
        "range",
        "await",
        "async",
        "switch",
        "catch",
        "new",
        "typeof",
        "sizeof",
        "match",
        "function",
        "def",
        "fn",
    }
)
_DEFINITION_GATE = re.compile(_KEYWORDS + r"\s{1,4}[A-Za-z_$(]")


def body_names(lines: list[str], signature: str) -> str:
    """The attribute and call names `lines` (a definition's body) use, in first-seen order, none
    its signature has: `self.x, foo(), bar.baz()` — what an agent re-implementing it needs."""
    seen: dict[str, None] = {}
    for line in lines[:BODY_LINES]:
        for found in _BODY_NAME.finditer(line, 0, KIND_SCAN_WIDTH):
            name, called = found.group(1), found.group(2)
            if name in _NOT_NAMES or not (called or "." in name) or name in signature or name[0].isdigit():
                continue
            seen.setdefault(name + "()" if called else name, None)
            if len(seen) >= BODY_NAMES:
                return ", ".join(seen)
    return ", ".join(seen)


def _with_body(line: str, names: str) -> str:
    """A definition's line and, after " … ", the names of its body that fit BODY_WIDTH."""
    if not names:
        return line
    shown = ""
    for name in names.split(", "):
        if len(shown) + len(name) + 2 > BODY_WIDTH:
            break
        shown += (", " if shown else "") + name
    return f"{line} … {shown}" if shown else line


def source_outline(text: str, lines: list[str], *, max_chars: int, max_lines: int) -> tuple[list[str], int] | None:
    """A file view: its first line (often the path), the definitions (`N: def f(x): … self.x,
    foo()`: the signature, then the attribute and call names its body uses, `body_names`;
    top-level ones first when not all fit, shown in file order), the lines stating errors
    outside the file's code, the count of definitions and lines. None unless the text reads as code: at
    least MIN_DEFINITIONS definitions, and most of its lines numbered, or a definition every
    40 lines, or an import (or the like) among its first 40 lines."""
    head = text[:SCAN_CHARS]
    definitions: list[tuple[int, int, str]] = []  # (indent, line index, "N: code")
    index, position = 0, 0
    for found in _DEFINITION_LINE.finditer(head):
        index += head.count("\n", position, found.start())
        position = found.start()
        number, indent, code = found.group(1), found.group(2), found.group(3)
        label = number if number is not None else str(index + 1)
        definitions.append((len(indent), index, f"{label}: {_cut(indent + code.rstrip(), DEF_WIDTH)}"))
    if len(definitions) < MIN_DEFINITIONS:
        return None
    ends = [index for _, index, _ in definitions[1:]] + [len(lines)]
    definitions = [
        (indent, index, _with_body(line, body_names(lines[index + 1 : end], line)))
        for (indent, index, line), end in zip(definitions, ends)
    ]
    scanned = head.count("\n") + 1
    numbered = len(_NUMBERED_LINE.findall(head))
    starts = _CODE_START_LINE.search("\n".join(lines[:40])) is not None
    if numbered < scanned // 2 and len(definitions) * 40 < scanned and not starts:
        return None  # neither a numbered view nor code: a log that mentions a few defs
    failures: list[tuple[int, str]] = []
    for found in _FAILURE.finditer(head):
        begin = head.rfind("\n", 0, found.start()) + 1
        line = head[begin : head.find("\n", found.start()) % (len(head) + 1)]
        if _NUMBERED_LINE.match(line) is None:  # not a line of the file's code
            failures.append((head.count("\n", 0, begin), _cut(line.strip(), DEF_WIDTH + 20)))
            if len(failures) == 2:
                break
    out: list[str] = []
    first = next((line for line in lines if line.strip()), "")
    _fit_line(out, _cut(first, 160), max_chars, max_lines=max_lines)
    last_number, _ = _code_line(lines[-1]) if lines else (None, "")
    closing = f"[outline: {len(definitions)} definitions in {last_number or len(lines)} lines]"
    room_lines, room_chars = max_lines - 1, max_chars - len(closing) - 1
    chosen: list[tuple[int, str]] = []
    body: list[str] = list(out)
    for index, line in failures:  # what went wrong first: it is what the model acts on
        if _fit_line(body, line, room_chars, max_lines=room_lines):
            chosen.append((index, line))
    for _indent, index, line in sorted(definitions, key=lambda d: (d[0] > 0, d[1])):
        if len(body) >= room_lines:
            break
        if _fit_line(body, line, room_chars, max_lines=room_lines):
            chosen.append((index, line))
    shown = out + [line for _, line in sorted(chosen)] + [closing]
    return shown, len(chosen) + 1


def _code_line(line: str) -> tuple[int | None, str]:
    """(its line number when the view numbers it, the code)."""
    numbered = _NUMBERED.match(line, 0, KIND_SCAN_WIDTH)
    if numbered is not None:
        return int(numbered.group(1)), line[numbered.end() :]
    return None, line


# ---------------------------------------------------------------- diffs


def diff_headers(lines: list[str], *, max_chars: int, max_lines: int) -> tuple[list[str], int] | None:
    """A unified diff (or a patch): the first line, each file header and hunk header in order
    while they fit, then the count of files, hunks and changed lines. None unless it holds a
    file header and a hunk header."""
    scanned = lines[:KIND_SCAN_LINES]
    headers: list[tuple[int, str]] = []
    files = hunks = added = removed = 0
    for index, line in enumerate(scanned):
        if _DIFF_FILE.match(line):
            if not line.startswith("+++ ") or not headers or not headers[-1][1].startswith("diff --git"):
                headers.append((index, _cut(line, 120)))
            files += line.startswith(("diff --git ", "Index: ", "*** ")) or (
                line.startswith("+++ ")
                and not any(scanned[j].startswith("diff --git ") for j in range(max(0, index - 4), index))
            )
        elif _HUNK.match(line):
            hunks += 1
            headers.append((index, _cut(line, 100)))
        elif line.startswith("+") and not line.startswith("+++ "):
            added += 1
        elif line.startswith("-") and not line.startswith("--- "):
            removed += 1
    if not hunks or not files:
        return None
    closing = f"[diff: {files} file{'s' * (files != 1)}, {hunks} hunk{'s' * (hunks != 1)}, +{added} -{removed} lines]"
    out: list[str] = []
    if headers[0][0] != 0:
        _fit_line(out, _cut(lines[0], 160), max_chars - len(closing) - 1, max_lines=max_lines - 1)
    count = len(out)
    for _, text in headers:
        if not _fit_line(out, text, max_chars - len(closing) - 1, max_lines=max_lines - 1):
            break
        count += 1
    return out + [closing], count


# ---------------------------------------------------------------- tables


def table_rows(lines: list[str], *, max_chars: int, max_lines: int) -> tuple[list[str], int] | None:
    """CSV or TSV: the row count, the header, the first rows while they fit, the last row. None
    unless at least 5 lines share the header's number of separators (≥ 2 commas or bars, ≥ 1
    tab), 9 in 10 of them, and the header's fields are short names."""
    rows = [line for line in lines if line.strip()]
    if len(rows) < 5:
        return None
    for separator in (",", "\t", "|"):
        columns = rows[0].count(separator)
        sample = rows[:200]
        header = rows[0].strip().strip("|").split(separator)
        if columns < (1 if separator == "\t" else 2) or any(len(h) > 40 or "(" in h or ":" in h for h in header):
            continue  # a header names its columns briefly (a code listing has commas too)
        if sum(1 for row in sample if row.count(separator) == columns) * 10 >= 9 * len(sample):
            break
    else:
        return None
    name = {",": "CSV", "\t": "TSV", "|": "table"}[separator]
    out = [f"[{name}: {len(rows) - 1} rows, {columns + 1} columns]", _cut(rows[0], 160)]
    count = 1
    for row in rows[1:-1]:
        if not _fit_line(out, _cut(row, 120), max_chars - 130, max_lines=max_lines - 2):
            break
        count += 1
    if count < len(rows) - 1:
        out.append(f"… {len(rows) - 1 - count} rows …")
    out.append(_cut(rows[-1], 120))
    return out, count + 1


def kind_preview(text: str, lines: list[str], *, max_chars: int, max_lines: int) -> tuple[list[str], int] | None:
    """The preview of a diff, a file view or a table (in that order of trial), else None. Each
    layout is tried only when a cheap look at the text allows it (a preview is made for every
    compacted result of every turn)."""
    head = text[:SCAN_CHARS]
    if ("\n@@ -" in head or head.startswith("@@ -")) and _DIFF_FILE.search(head) is not None:
        found = diff_headers(lines, max_chars=max_chars, max_lines=max_lines)
        if found is not None:
            return found
    if len(_DEFINITION_GATE.findall(head, 0, SCAN_CHARS)) >= MIN_DEFINITIONS:
        found = source_outline(text, lines, max_chars=max_chars, max_lines=max_lines)
        if found is not None:
            return found
    first = next((line for line in lines[:50] if line.strip()), "")
    if first.count(",") >= 2 or first.count("|") >= 2 or "\t" in first:
        return table_rows(lines, max_chars=max_chars, max_lines=max_lines)
    return None


# ==================== preview
# The preview a tool-result marker shows: what matters of a large output, in a bounded size.
#
# Test runs, tracebacks and build logs put what matters at the end, and errors in the middle,
# so the first lines alone lose it. A text preview keeps the first line, the last lines, and
# lines in between that carry errors, failures, tracebacks, warnings, `file:line` references and
# paths, with each gap marked `… N lines …`. A JSON output (the whole text one object or array)
# shows its shape instead: keys, array lengths, the first items; a diff, a file view or a table
# its own layout (by kind, above: hunk headers, an outline of definitions with the
# attribute and call names each body uses, header and first rows).
#
# A pure function of the text (the marker's bytes, and so the provider's prompt cache, depend
# on it), linear in its size, never raising: every pattern below has bounded repeats and is
# matched on at most SCAN_WIDTH characters of a line. Whatever the text, the body has at most
# MAX_LINES lines and MAX_CHARS characters: `texts.tool_result_ref` relies on these bounds.
# The words here are part of the marker (see `proxy.core.texts`), not of `proxy.core.texts`.

MAX_CHARS = 700  # the body, "\n" between lines included
MAX_LINES = 16
WIDTH = 160  # a first or last line is cut here (plus "…")
SIGNAL_WIDTH = 120  # a line picked from the middle is cut here
SCAN_WIDTH = 300  # the characters of a line the signal patterns look at
SCAN_LINES = 2000  # the lines looked at for signals at each end of the text (all, when fewer)
JSON_MAX_CHARS = 2_000_000  # a larger text is previewed by its lines, never parsed

# What makes a middle line worth its room, most important first: a class is one pattern searched
# in a line and one matched at its start. Every repeat is bounded and every searched alternative
# begins with a literal (so the regex engine skips ahead to its first characters): a line costs
# O(SCAN_WIDTH) at most, and at most 2 * SCAN_LINES lines are looked at.
_FAILURE_SEARCH = (  # a line stating an error: also what `error_lines` finds for the summary index
    r"FAILED(?<![\w.]FAILED)\b|ERROR(?<![\w.]ERROR)\b|Error(?<![\w.]Error)(?:\[\w{1,12}\])?: {1,4}\S|error(?:\[\w{1,12}\])?: {1,4}\S"
    r"|fatal error: |Fatal error: "
    r"|error TS\d{1,6}|Error \d{1,4}\b|npm ERR!|panicked at|Segmentation fault|core dumped"
    r"|command not found|No such file or directory|Permission denied|undefined reference"
    r"|Assertion failed|assertion failed"
)
# an exception's name starting the line, as a traceback ends (`KeyError: 'x'`, pytest's `E   ValueError: …`)
_FAILURE_START = r"(?:E {1,12})?\s{0,12}[A-Za-z_][\w.]{0,100}(?:Error|Exception|Exit|Interrupt)(?::|$)"
_FAILURES = (re.compile(_FAILURE_SEARCH), re.compile(_FAILURE_START))
_CLASSES = (  # (search, match at the start, candidates tried: the selection's cost stays bounded)
    (re.compile(r"Traceback \(most recent call last\)|" + _FAILURE_SEARCH), _FAILURES[1], 48),
    (
        re.compile(
            r"FAILURES?\b|FAIL\b|ERRORS\b|FATAL\b|PANIC\b|warning(?:\[\w{1,12}\])?:|Warning(?:\[\w{1,12}\])?:"
            r'|WARNING\b|File "[^"]{1,400}", line \d'
        ),  # around an error: frames, warnings, headers
        re.compile(r"E {1,12}\S|> {1,12}\S|\s{0,12}--> |\s{0,12}[A-Z]\w{0,60}Warning\b"),
        24,
    ),
    (re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,9}(?::\d{1,7}\b|\(\d{1,7},\d{1,7}\))"), None, 12),  # file:line
    (re.compile(r"/[\w.-]{1,80}(?:/|\.\w)"), None, 4),  # paths
)


@dataclass(frozen=True)
class Preview:
    body: str  # at most MAX_LINES lines, MAX_CHARS characters
    hidden: int  # lines of the text not shown (a line cut to its width counts as shown)
    lines: int  # lines of the text, as str.splitlines() counts them
    chars: int


def preview(text: str) -> Preview:
    """The preview of `text`: its JSON shape when it is one JSON object or array, else its lines."""
    lines = text.splitlines()
    everything = _whole(lines)
    if everything is not None:
        return Preview(everything, 0, len(lines), len(text))
    shape = json_shape(text)
    if shape is not None:
        return Preview(_clamp(shape), len(lines), len(lines), len(text))
    typed = kind_preview(text, lines, max_chars=MAX_CHARS, max_lines=MAX_LINES)
    if typed is not None:
        shown, count = typed
        return Preview(_clamp(shown), max(len(lines) - count, 0), len(lines), len(text))
    shown, count = line_preview(lines, max_chars=MAX_CHARS, max_lines=MAX_LINES)
    return Preview(_clamp(shown), len(lines) - count, len(lines), len(text))


def _whole(lines: list[str]) -> str | None:
    """All the lines, when they fit uncut."""
    if len(lines) > MAX_LINES or any(len(line) > WIDTH for line in lines):
        return None
    body = "\n".join(lines)
    return body if len(body) <= MAX_CHARS else None


def _clamp(body: list[str]) -> str:
    """The bounds, enforced whatever the layout above did (a guard: layouts stay inside them)."""
    return "\n".join(body[:MAX_LINES])[:MAX_CHARS]


def _cut(line: str, width: int) -> str:
    return line if len(line) <= width else line[:width] + "…"


def gap(count: int) -> str:
    return f"… {count} line …" if count == 1 else f"… {count} lines …"


# ---------------------------------------------------------------- lines


def signal_lines(
    lines: list[str],
    search: re.Pattern[str],
    start: re.Pattern[str] | None = None,
    *,
    lo: int = 0,
    hi: int | None = None,
) -> list[int]:
    """Indices of lines[lo:hi] that `search` finds something in or `start` matches at their
    start (looking at SCAN_WIDTH characters of each): all of them when there are at most
    2 * SCAN_LINES, else those among the first and the last SCAN_LINES."""
    hi = len(lines) if hi is None else hi
    if hi - lo <= 2 * SCAN_LINES:
        spans = [(lo, hi)] if hi > lo else []
    else:
        spans = [(lo, lo + SCAN_LINES), (hi - SCAN_LINES, hi)]
    found: list[int] = []
    for begin, end in spans:
        part = lines[begin:end]
        hits: Iterator[object] = map(search.search, part, repeat(0), repeat(SCAN_WIDTH))
        if start is not None:
            hits = map(_either, hits, map(start.match, part, repeat(0), repeat(SCAN_WIDTH)))
        found += compress(range(begin, end), hits)
    return found


def _either(a: object, b: object) -> bool:
    return a is not None or b is not None


def error_lines(text: str) -> list[str]:
    """The lines of `text` that state an error (whitespace squeezed, cut to SIGNAL_WIDTH), in order."""
    lines = text.splitlines()
    return [_cut(" ".join(lines[i][:SCAN_WIDTH].split()), SIGNAL_WIDTH) for i in signal_lines(lines, *_FAILURES)]


def line_preview(lines: list[str], *, max_chars: int, max_lines: int) -> tuple[list[str], int]:
    """(the preview's lines, how many of `lines` they show).

    Picked in this order while they fit: the first line, the last three, signal lines (errors
    first; within a class alternately the first and the last not yet shown), then more lines
    from the end and the start, two from the end for one from the start.
    """
    n = len(lines)
    first = next((i for i in range(n) if lines[i].strip()), n)
    if first == n:
        return [], 0
    last = next(i for i in range(n - 1, -1, -1) if lines[i].strip())
    chosen: dict[int, int] = {}  # line index → width

    def fits(index: int, width: int) -> bool:
        trial = {**chosen, index: width}
        body = _render(lines, trial, first, last=last)
        return len(body) <= max_lines and sum(map(len, body)) + len(body) - 1 <= max_chars

    def take(index: int, width: int) -> bool:
        if index in chosen:
            return True
        if not fits(index, width):
            return False
        chosen[index] = width
        return True

    take(first, WIDTH)
    for index in range(last, max(first, last - 3), -1):
        if not take(index, WIDTH):
            break
    shown = {_cut(lines[i], SIGNAL_WIDTH) for i in chosen}
    for search, start, tries in _CLASSES:
        hits = signal_lines(lines, search, start, lo=first + 1, hi=last)
        for index in _alternate(hits, tries):
            text = _cut(lines[index], SIGNAL_WIDTH)
            if index not in chosen and text not in shown and take(index, SIGNAL_WIDTH):
                shown.add(text)
    head, tail = first + 1, last - 1
    head_open = tail_open = True
    step = 0
    while (head_open or tail_open) and head <= tail:
        if tail_open and (step % 3 != 2 or not head_open):
            tail_open = take(tail, WIDTH)
            tail -= 1
        else:
            head_open = take(head, WIDTH)
            head += 1
        step += 1
    return _render(lines, chosen, first, last=last), len(chosen)


def _alternate(items: list[int], limit: int) -> list[int]:
    """items[0], items[-1], items[1], items[-2], …, at most `limit` of them."""
    out: list[int] = []
    low, high = 0, len(items) - 1
    while low <= high and len(out) < limit:
        out.append(items[low])
        low += 1
        if low <= high and len(out) < limit:
            out.append(items[high])
            high -= 1
    return out


def _render(lines: list[str], chosen: dict[int, int], first: int, *, last: int) -> list[str]:
    """The chosen lines in order, cut to their widths, a gap line wherever lines are left out
    (blank lines before the first or after the last non-blank line are left out silently)."""
    out: list[str] = []
    previous = -1
    for index in sorted(chosen):
        skipped = index - previous - 1
        if skipped and (previous >= 0 or index > first):
            out.append(gap(skipped))
        out.append(_cut(lines[index], chosen[index]))
        previous = index
    if previous < last:
        out.append(gap(len(lines) - previous - 1))
    return out


# ---------------------------------------------------------------- JSON

_DEPTH = 3  # containers deeper than this show only their size
_STRING = 48  # a string value shows this many characters
_ITEMS = 24  # members of one container looked at


def _json(text: str) -> dict[str, Any] | list[Any] | None:
    """`text` parsed, when it is one JSON object or array no longer than JSON_MAX_CHARS."""
    stripped = text.strip()
    if len(stripped) > JSON_MAX_CHARS or stripped[:1] not in ("{", "[") or stripped[-1:] not in ("}", "]"):
        return None
    try:
        value = json.loads(stripped)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, (dict, list)) else None


def _wrapped(value: dict[str, Any], size: int) -> tuple[str, str] | None:
    """(key, string) of the one string value holding most of a JSON object's text, if any:
    `{"output": "<a log>", "metadata": {…}}`, as some agents wrap a command's output."""
    big = max(((k, v) for k, v in value.items() if isinstance(v, str)), key=lambda kv: len(kv[1]), default=None)
    return big if big is not None and len(big[1]) > MAX_CHARS and 2 * len(big[1]) >= size else None


def plain_text(text: str) -> str:
    """The command output a JSON wrapper holds (see `_wrapped`), else `text` itself."""
    value = _json(text)
    wrapped = _wrapped(value, len(text)) if isinstance(value, dict) else None
    return wrapped[1] if wrapped else text


def json_shape(text: str) -> list[str] | None:
    """The shape of `text` when it is one JSON object or array (else None), in preview lines.

    A wrapped command output (see `_wrapped`) shows the object's other keys, then the output's
    line preview.
    """
    value = _json(text)
    if value is None:
        return None
    try:
        if isinstance(value, dict):
            return _object_lines(value, len(text))
        return _array_lines(value)
    except RecursionError:  # not expected (depth is bounded); the lines are previewed instead
        return None


def _object_lines(value: dict[str, Any], size: int) -> list[str]:
    wrapped = _wrapped(value, size)
    if wrapped is not None:
        key, string = wrapped
        out = [f"JSON object, {_count(len(value), 'key')}; {_key(key)} is shown below as lines:"]
        others = list(islice(((k, v) for k, v in value.items() if k != key), MAX_LINES))
        out += _members(others, len(value) - 1, max_chars=MAX_CHARS // 3, max_lines=4, more="key")
        used = sum(map(len, out)) + len(out)
        body, _ = line_preview(string.splitlines(), max_chars=MAX_CHARS - used, max_lines=MAX_LINES - len(out))
        return out + body
    out = [f"JSON object, {_count(len(value), 'key')}:"]
    return out + _members(
        list(islice(value.items(), MAX_LINES)),
        len(value),
        max_chars=MAX_CHARS - len(out[0]) - 1,
        max_lines=MAX_LINES - 1,
        more="key",
    )


def _array_lines(value: list[Any]) -> list[str]:
    out = [f"JSON array, {_count(len(value), 'item')}:"]
    members = list(enumerate(value[:MAX_LINES]))
    return out + _members(
        members, len(value), max_chars=MAX_CHARS - len(out[0]) - 1, max_lines=MAX_LINES - 1, more="item", labelled=True
    )


def _members(
    members: list[tuple[Any, Any]], total: int, *, max_chars: int, max_lines: int, more: str, labelled: bool = False
) -> list[str]:
    """One line per member (`"key": shape` or `[i] shape`) while they fit, then `… N more keys`."""
    out: list[str] = []
    used = 0
    reserve = 24  # room kept for the closing "… N more" line
    for position, (key, member) in enumerate(members[:max_lines]):
        label = f"[{key}]" if labelled else _key(key)
        room = min(SIGNAL_WIDTH, max_chars - used - reserve) - len(label) - 2
        if room < 8 or len(out) >= max_lines - 1 and position < total - 1:
            break
        out.append(f"{label}: {_shape(member, room, 1)}")
        used += len(out[-1]) + 1
    if len(out) < total:
        out.append(f"… {total - len(out)} more {more}{'' if total - len(out) == 1 else 's'}")
    return out


def _shape(value: Any, room: int, depth: int) -> str:
    """`value` in at most `room` characters: scalars as JSON (strings cut), containers by their
    first members and size."""
    if room < 2:
        return "…"
    if isinstance(value, dict):
        if depth >= _DEPTH or room < 12:
            return _fit(f"{{…{_count(len(value), 'key')}}}", room)
        parts: list[tuple[str | None, Any]] = [(_key(k), v) for k, v in islice(value.items(), _ITEMS)]
        return _container("{", "}", parts, total=len(value), room=room, depth=depth)
    if isinstance(value, list):
        if depth >= _DEPTH or room < 12:
            return _fit(f"[…{_count(len(value), 'item')}]", room)
        return _container("[", "]", [(None, v) for v in value[:_ITEMS]], total=len(value), room=room, depth=depth)
    if isinstance(value, str):
        shown = value if len(value) <= _STRING else value[:_STRING] + "…"
        return _fit(json.dumps(shown, ensure_ascii=False), room)
    return _fit(json.dumps(value), room)


def _container(
    opening: str, closing: str, parts: list[tuple[str | None, Any]], *, total: int, room: int, depth: int
) -> str:
    out = opening
    for shown, (label, member) in enumerate(parts):
        rest = total - shown
        tail = f"… +{rest}" + closing
        prefix = (", " if shown else "") + (f"{label}: " if label is not None else "")
        left = room - len(out) - len(prefix) - len(closing) - (len(tail) + 2 if rest > 1 else 0)
        if left < 4:
            return out + (", " if shown else "") + tail
        out += prefix + _shape(member, left, depth + 1)
    if total > len(parts):
        out += f", … +{total - len(parts)}"
    return _fit(out + closing, room)


def _fit(text: str, room: int) -> str:
    return text if len(text) <= room else text[: max(room - 1, 0)] + "…"


def _key(key: Any) -> str:
    key = str(key)
    return json.dumps(key if len(key) <= _STRING else key[:_STRING] + "…", ensure_ascii=False)


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


# ==================== when a result is shown as its preview
# When compaction replaces a tool result by its preview: one rule, for compaction
# (`proxy.core.compaction`) and for folding (`proxy.core.fold`: no fold points to a result shown
# as a preview). Pure.
#
# Only in a history over `max_total_tokens`: a result over `max_tool_message_tokens`
# (`OffloadSettings.tool_result_limit`) outside the `keep_recent` last items, and a result over
# `max_fresh_tool_message_tokens` wherever it is, the recent tail included (a single huge result,
# a whole file or a runaway log, would otherwise go whole on the turn it arrives and overflow the
# model's window). A result so replaced on arrival is replaced on every later turn by the same
# bytes: it stays over both sizes, and a history only grows.


@dataclass(frozen=True)
class CompactionRule:
    max_total_tokens: int
    max_tool_message_tokens: int
    keep_recent: int
    max_fresh_tool_message_tokens: int

    @classmethod
    def of(cls, settings: OffloadSettings, *, keep_recent: int) -> CompactionRule:
        """The rule of `settings`; `keep_recent`: the tail's default when the settings leave it unset."""
        return cls(
            settings.max_total_tokens,
            settings.tool_result_limit(),
            settings.keep_recent_for(keep_recent),
            settings.max_fresh_tool_message_tokens,
        )

    def replaces(self, tokens: int, *, index: int, length: int, total: int) -> bool:
        """A result of `tokens` at items[index] of a history of `length` items and `total` tokens
        is replaced by its preview."""
        if total <= self.max_total_tokens:
            return False
        return tokens > self.max_fresh_tool_message_tokens or (
            index < length - self.keep_recent and tokens > self.max_tool_message_tokens
        )
