"""Previews by content type: source code, unified diffs, tables (logs and JSON: `proxy.core.preview`).

What a model needs back from a large output depends on what it is: of a file view (`cat -n`, an
editor's view, a plain `cat` of code) the outline of its definitions with their line numbers,
each with the attribute and call names its body uses (what an agent re-implementing or calling
it reaches for: on the shared traces recall 0.971 → 0.972 compaction only, 0.925 → 0.926 auto,
in the same preview size), and the lines that state errors; of a diff its file and hunk headers; of a table its header, its
size and first rows. Each layout here returns the preview's lines within the bounds the caller
gives, or None when the text is not of its kind; `kind_preview` tries them in turn.

Pure and deterministic (the marker's bytes depend on it), linear in the text: every pattern
has bounded repeats and is matched on at most SCAN_WIDTH characters of a line, and at most
SCAN_LINES lines are looked at to recognise a kind.
"""

from __future__ import annotations

import re

SCAN_WIDTH = 300
SCAN_LINES = 4000  # lines looked at for hunks or rows (a longer text: its first ones)
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


def _cut(line: str, width: int) -> str:
    return line if len(line) <= width else line[:width] + "…"


def _fit(out: list[str], line: str, max_chars: int, *, max_lines: int) -> bool:
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
        for found in _BODY_NAME.finditer(line, 0, SCAN_WIDTH):
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
    _fit(out, _cut(first, 160), max_chars, max_lines=max_lines)
    last_number, _ = _code_line(lines[-1]) if lines else (None, "")
    closing = f"[outline: {len(definitions)} definitions in {last_number or len(lines)} lines]"
    room_lines, room_chars = max_lines - 1, max_chars - len(closing) - 1
    chosen: list[tuple[int, str]] = []
    body: list[str] = list(out)
    for index, line in failures:  # what went wrong first: it is what the model acts on
        if _fit(body, line, room_chars, max_lines=room_lines):
            chosen.append((index, line))
    for _indent, index, line in sorted(definitions, key=lambda d: (d[0] > 0, d[1])):
        if len(body) >= room_lines:
            break
        if _fit(body, line, room_chars, max_lines=room_lines):
            chosen.append((index, line))
    shown = out + [line for _, line in sorted(chosen)] + [closing]
    return shown, len(chosen) + 1


def _code_line(line: str) -> tuple[int | None, str]:
    """(its line number when the view numbers it, the code)."""
    numbered = _NUMBERED.match(line, 0, SCAN_WIDTH)
    if numbered is not None:
        return int(numbered.group(1)), line[numbered.end() :]
    return None, line


# ---------------------------------------------------------------- diffs


def diff_headers(lines: list[str], *, max_chars: int, max_lines: int) -> tuple[list[str], int] | None:
    """A unified diff (or a patch): the first line, each file header and hunk header in order
    while they fit, then the count of files, hunks and changed lines. None unless it holds a
    file header and a hunk header."""
    scanned = lines[:SCAN_LINES]
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
        _fit(out, _cut(lines[0], 160), max_chars - len(closing) - 1, max_lines=max_lines - 1)
    count = len(out)
    for _, text in headers:
        if not _fit(out, text, max_chars - len(closing) - 1, max_lines=max_lines - 1):
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
        if not _fit(out, _cut(row, 120), max_chars - 130, max_lines=max_lines - 2):
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
