"""The matching behind `context_search`, run off the event loop under one deadline.

The pattern is chosen by the model, so it may be catastrophic (`(a|a)+$`) or blow up when
compiled (`(?:a{1000}){1000}`). Compilation and matching run in a small thread pool of their
own; the `regex` module releases the GIL while it matches (`concurrent=True`) and gives up
at the time left of the one deadline a search has (`timeout=`). A search that runs out of time,
or reaches the most content one search may scan, returns what it found so far and says why it
stopped. Patterns whose counted repeats would expand past `MAX_EXPANSION` are refused before
compiling, since a compile cannot be interrupted.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from bisect import bisect_right
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

import regex

from proxy.config import ServerSettings

MAX_PATTERN_CHARS = 1_000
MAX_EXPANSION = 100_000  # a{100000} compiles in ~70 ms; nested counted repeats multiply
MAX_MATCHES = 200
MATCH_LINE_CHARS = 300
BLOCK_CHARS = 1 << 20  # text is split into lines a block at a time: no C call holds the GIL long
FLAGS = regex.IGNORECASE | regex.MULTILINE

TIME = "time"
SIZE = "size"
MATCHES = "matches"

_executor: ThreadPoolExecutor | None = None


def executor() -> ThreadPoolExecutor:
    """Searches get threads of their own: a burst of them never starves the default executor
    (DNS lookups, tokenizer loads); a search queued past its deadline returns at once."""
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 2), thread_name_prefix="context-search")
    return _executor


async def off_loop(fn: Any, *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(executor(), fn, *args)


@dataclass(frozen=True)
class SearchLimits:
    """Per search: total seconds (further bounded by the request's reload budget), bytes scanned."""

    timeout: float = ServerSettings.model_fields["search_timeout"].default
    max_bytes: int = ServerSettings.model_fields["search_max_bytes"].default

    @classmethod
    def of(cls, settings: ServerSettings) -> SearchLimits:
        return cls(settings.search_timeout, settings.search_max_bytes)


_COUNTED = re.compile(r"\{(\d*)(?:,(\d*))?\}")
_BRACED_ESCAPES = frozenset("pPNxuUgk")


def expansion(pattern: str) -> int:
    """A rough upper estimate of the pattern's size once its counted repeats are expanded."""
    stack = [0]  # the weight of each open group so far
    last = 0  # the weight of the atom a quantifier would apply to
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            if i <= n and pattern[i - 1] in _BRACED_ESCAPES and pattern.startswith("{", i):
                close = pattern.find("}", i)
                i = n if close < 0 else close + 1
            last = 1
        elif c == "[":
            i = _class_end(pattern, i)
            last = 1
        elif c == "(":
            stack.append(0)
            i += 1
            continue
        elif c == ")" and len(stack) > 1:
            last = stack.pop()
            stack[-1] += last
            i += 1
            continue
        elif c == "{" and (m := _COUNTED.match(pattern, i)) and (m.group(1) or m.group(2)):
            count = max(int(m.group(1) or 0), int(m.group(2) or 0), 1)
            stack[-1] += last * (count - 1)  # the atom itself was counted once already
            last *= count
            i = m.end()
            continue
        else:
            i += 1
            last = 1
        stack[-1] += 1
    return sum(stack)


def _class_end(pattern: str, start: int) -> int:
    """The index after the character class opening at `start` (nested sets included)."""
    depth, i = 0, start
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            depth += 1
            if pattern.startswith("^", i + 1):
                i += 1
            if pattern.startswith("]", i + 1):
                i += 1  # a leading ] is a literal
        elif c == "]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(pattern)


def compile_pattern(pattern: str) -> regex.Pattern:
    """Raises ValueError with a message for the model when the pattern is refused or invalid."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"the pattern is longer than {MAX_PATTERN_CHARS} characters")
    if expansion(pattern) > MAX_EXPANSION:
        raise ValueError(f"its counted repeats (x{{n}}) multiply past {MAX_EXPANSION}; use smaller counts, * or +")
    try:
        return regex.compile(pattern, FLAGS)
    except (regex.error, OverflowError, RecursionError) as exc:
        raise ValueError(str(exc)) from exc


@dataclass
class Hits:
    """Matching lines found so far, and why the search stopped early (None: it did not)."""

    max_chars: int
    lines: list[str] = field(default_factory=list)
    chars: int = 0
    stopped: str | None = None

    def add(self, ref: str, number: int, line: str) -> bool:
        shown = line if len(line) <= MATCH_LINE_CHARS else line[:MATCH_LINE_CHARS] + "…"
        entry = f"ref={ref} line {number}: {shown}"
        if len(self.lines) >= MAX_MATCHES or self.chars + len(entry) > self.max_chars:
            self.stopped = MATCHES
            return False
        self.lines.append(entry)
        self.chars += len(entry) + 1
        return True


def split_lines(text: str, max_bytes: int) -> tuple[list[str], int, bool]:
    """`text.splitlines()`, as many whole lines as fit in `max_bytes` of UTF-8.

    Returns (lines, bytes taken, whether lines were left out). Works a block at a time.
    """
    lines: list[str] = []
    used, start, end_of_text = 0, 0, len(text)
    while start < end_of_text:
        end = min(end_of_text, start + BLOCK_CHARS)
        if end < end_of_text:
            cut = text.rfind("\n", start, end)
            if cut < 0:
                cut = text.find("\n", end)  # one very long line: take it whole
            end = end_of_text if cut < 0 else cut + 1
        block = text[start:end]
        size = len(block) if block.isascii() else len(block.encode("utf-8", "surrogatepass"))
        if used + size <= max_bytes:
            lines.extend(block.splitlines())
            used += size
        else:
            for line in block.splitlines():
                cost = len(line.encode("utf-8", "surrogatepass")) + 1
                if used + cost > max_bytes:
                    return lines, used, True
                lines.append(line)
                used += cost
            return lines, used, True
        start = end
    return lines, used, False


def scan(compiled: regex.Pattern, ref: str, lines: list[str], deadline: float, hits: Hits) -> None:
    """Add the lines of `ref` that match; stops at the deadline or when `hits` is full.

    The lines are searched as one text joined by newlines (one C call per match, not per
    line), so ^ and $ work per line as before; a match spanning lines counts for its first.
    """
    if not lines:
        return
    text = "\n".join(lines)
    starts = [0, *accumulate(len(line) + 1 for line in lines)]
    pos = 0
    while pos <= len(text):
        left = deadline - time.monotonic()
        if left <= 0:
            hits.stopped = TIME
            return
        try:
            match = compiled.search(text, pos, concurrent=True, timeout=left)
        except TimeoutError:
            hits.stopped = TIME
            return
        if match is None:
            return
        number = bisect_right(starts, match.start()) - 1
        if not hits.add(ref, number, lines[number]):
            return
        pos = starts[number + 1]
