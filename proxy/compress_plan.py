"""What to compress: pure functions over (messages, settings, prior summary), no IO.

The compressible part lies between the leading system message(s) and the recent tail. The tail
is extended backwards so an assistant tool-call message and its results are never separated.
A summary covers messages[head:cut]; it is reused verbatim while the part after it stays under
the trigger, and re-made (folding the old one) only when that part exceeds it again: large,
rare steps, so the forwarded prefix stays byte-stable between them.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any

from proxy import jsonio
from proxy.markers import history_marker
from proxy.offload_settings import OffloadSettings
from proxy.tokens import TokenCounter

COMPRESS_KEEP_RECENT = 2
MAX_GROUPS = 8  # summarisation calls one request may make (X-Offload-Group-Token-Threshold)
SYSTEM_ROLES = ("system", "developer")


def role(message: Any) -> str | None:
    return message.get("role") if isinstance(message, dict) else None


def split(messages: list[Any], keep_recent: int) -> tuple[int, int]:
    """(head, tail): messages[:head] are the leading system messages, messages[tail:] the tail."""
    head = 0
    while head < len(messages) and role(messages[head]) in SYSTEM_ROLES:
        head += 1
    tail = max(head, len(messages) - keep_recent)
    while head < tail < len(messages) and role(messages[tail]) == "tool":
        tail -= 1  # step back onto the assistant message that made the calls
    return head, tail


class PrefixHashes:
    """hashes[i] identifies the exact prefix messages[:i] (SHA-256 over length-framed JSON).

    Computed lazily, as far as the highest index asked for, and finalised only at the indices
    asked for: a reused summary needs only the prefix it covers to be hashed. Ask in rising
    order; an index already passed is recomputed from the start.
    """

    def __init__(self, messages: list[Any]) -> None:
        self._messages = messages
        self._running = hashlib.sha256(b"offload-prefix-v1")
        self._position = 0  # messages hashed into _running
        self._known: dict[int, str] = {}

    def __getitem__(self, index: int) -> str:
        if not 0 <= index <= len(self._messages):
            raise IndexError(index)
        if index in self._known:
            return self._known[index]
        if index < self._position:
            self._running, self._position = hashlib.sha256(b"offload-prefix-v1"), 0
        update = self._running.update
        for m in self._messages[self._position:index]:
            encoded = jsonio.dumps(m, sort_keys=True)
            update(len(encoded).to_bytes(8, "big"))
            update(encoded)
        self._position = index
        self._known[index] = self._running.hexdigest()
        return self._known[index]

    def matches(self, index: int, expected: str, seen: "SeenPrefixes | None" = None) -> bool:
        """Does messages[:index] hash to `expected`? A prefix this process already verified is
        recognised by deep equality (C speed), without hashing it again."""
        if seen is not None and seen.equal(expected, self._messages, index):
            return True
        if index > len(self._messages) or self[index] != expected:
            return False
        if seen is not None:
            seen.add(expected, self._messages[:index])
        return True


class SeenPrefixes:
    """Prefixes (hash → the messages) verified recently by this process, a bounded few.

    Shared by requests planned on the event loop and in the CPU pool (`proxy.cpu`): thread-safe.
    """

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._prefixes: dict[str, list[Any]] = {}
        self._lock = threading.Lock()

    def equal(self, prefix_hash: str, messages: list[Any], index: int) -> bool:
        known = self._prefixes.get(prefix_hash)
        return known is not None and len(known) == index and known == messages[:index]

    def add(self, prefix_hash: str, prefix: list[Any]) -> None:
        with self._lock:
            if len(self._prefixes) >= self.size:
                del self._prefixes[next(iter(self._prefixes))]
            self._prefixes[prefix_hash] = prefix


@dataclass(frozen=True)
class PriorSummary:
    """A stored summary of messages[head:cut] of this very conversation."""

    cut: int
    text: str
    ref: str
    tokens: int
    message: dict  # the exact summary message forwarded, reused byte for byte


@dataclass(frozen=True)
class Decision:
    """`reuse`: forward with `prior`. `summarize`: make a summary of messages[head:cut]."""

    action: str  # "none" | "reuse" | "summarize"
    head: int
    cut: int
    prior: PriorSummary | None = None
    new_messages: tuple[int, int] = (0, 0)  # the range the summariser must fold in


def tokens_between(messages: list[Any], start: int, end: int, counter: TokenCounter) -> int:
    return sum(counter.message(m) for m in messages[start:end] if role(m) not in SYSTEM_ROLES)


def decide(
    messages: list[Any], settings: OffloadSettings, counter: TokenCounter, prior: PriorSummary | None
) -> Decision:
    head, tail = split(messages, settings.keep_recent_for(COMPRESS_KEEP_RECENT))
    trigger = settings.max_total_tokens
    if prior is not None and head <= prior.cut <= tail:
        if tokens_between(messages, prior.cut, tail, counter) <= trigger:
            return Decision("reuse", head, prior.cut, prior)
        return Decision("summarize", head, tail, prior, (prior.cut, tail))
    if tail - head >= 2 and tokens_between(messages, head, tail, counter) > trigger:
        return Decision("summarize", head, tail, None, (head, tail))
    return Decision("none", head, head)


def groups(messages: list[Any], start: int, end: int, threshold: int, counter: TokenCounter) -> list[tuple[int, int]]:
    """Cut messages[start:end] into ranges of at most `threshold` tokens; pairs never split.

    Each range costs one summarisation call, so there are never more than MAX_GROUPS of them:
    when `threshold` would make more, the ranges grow (the smallest threshold that makes at
    most MAX_GROUPS). A unit larger than the threshold is a range of its own.
    """
    if end <= start:
        return []
    if threshold <= 0:
        return [(start, end)]
    units: list[tuple[int, int]] = []  # (first message, tokens): an assistant message and its tool results
    i = start
    while i < end:
        j = i + 1
        while j < end and role(messages[j]) == "tool":
            j += 1
        units.append((i, sum(counter.message(m) for m in messages[i:j])))
        i = j
    cuts = _pack(units, threshold)
    if len(cuts) > MAX_GROUPS:
        # fewer ranges as the threshold grows (greedy packing is monotone): the smallest one that fits
        low, high = threshold, max(threshold, sum(tokens for _, tokens in units))
        while low < high:
            middle = (low + high) // 2
            if len(_pack(units, middle)) <= MAX_GROUPS:
                high = middle
            else:
                low = middle + 1
        cuts = _pack(units, low)
    return [(begin, cuts[k + 1] if k + 1 < len(cuts) else end) for k, begin in enumerate(cuts)]


def _pack(units: list[tuple[int, int]], threshold: int) -> list[int]:
    """Where each range begins when units are packed in order, a range closed once the next
    unit would take it past `threshold`."""
    cuts: list[int] = []
    size = 0
    for first, tokens in units:
        if not cuts or (size and size + tokens > threshold):
            cuts.append(first)
            size = 0
        size += tokens
    return cuts


def summary_message(text: str, ref: str, count: int, tokens: int) -> dict:
    """The message standing for the summarised ones; `markers.history_ref` recognises it exactly."""
    return {"role": "user", "content": f"{history_marker(ref, count, tokens)}\n{text}"}


def assemble(messages: list[Any], head: int, cut: int, summary: dict) -> list[Any]:
    """System head, the summary, system messages from the summarised range (verbatim), the rest."""
    middle_system = [m for m in messages[head:cut] if role(m) in SYSTEM_ROLES]
    return [*messages[:head], summary, *middle_system, *messages[cut:]]


def history_lines(messages: list[Any]) -> str:
    """The stored form of summarised messages: one JSON object per line."""
    return "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in messages if role(m) not in SYSTEM_ROLES)
