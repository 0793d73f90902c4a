"""Compression planning, pure: what to summarise between the head and the recent tail (`decide`,
`assemble`), when a summary is started ahead of time and when a turn must wait for one, and a
client's own compaction (the agent asking the model to summarise its conversation).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from proxy.core import jsonio
from proxy.core.compaction import client_summary_end, live_start, trigger_index
from proxy.core.jsonio import JsonObject
from proxy.core.settings import OffloadSettings
from proxy.core.texts import history_marker, history_ref
from proxy.core.tokens import TokenCounter
from proxy.core.view import ItemView

# ==================== what to summarise
# What to compress: pure functions over (items, settings, prior summary), no IO.
#
# The compressible part lies between the head and the recent tail. The head is the leading
# system items and the task: the first user message when it follows them, which is never
# summarised (with a summariser that keeps little, the task would otherwise survive only as
# lists of files and errors). Later user messages of a summarised part stay verbatim after the
# summary, the most recent ones up to USER_KEEP_CHARS, so the summary stands for the tool
# traffic and the assistant's turns. A cut never
# falls between a tool call and its result, nor between items the format binds together
# (`ItemView.attached`). A summary covers items[head:cut]; it is reused verbatim while the part
# after it stays under the trigger, and re-made (folding the old one) only when that part
# exceeds it again: large, rare steps, so the forwarded prefix stays byte-stable between them.

COMPRESS_KEEP_RECENT = 2
# Later user messages kept verbatim from a summarised part: the most recent, whole, while their
# text totals at most this (≈ 2,000 tokens, a ninth of the default trigger; Codex CLI keeps
# 20 K tokens of them against a window ten times larger).
USER_KEEP_CHARS = 8_000
LAYOUT = "task-kept-1"  # where items go around a summary: part of a stored summary's key
MAX_GROUPS = 8  # summarisation calls one request may make (X-Offload-Group-Token-Threshold)


def can_cut(items: list[Any], view: ItemView, index: int) -> bool:
    """May items[:index] be summarised while items[index:] stay? Not between a call and its
    result, nor between items the format binds together."""
    if index <= 0 or index >= len(items):
        return True
    if view.attached(items[index - 1], items[index]):
        return False
    made_after: set[str] = set()
    answered_after: list[str] = []
    for item in items[index:]:
        made_after.update(view.calls(item))
        answer = view.answers(item)
        if answer is not None:
            answered_after.append(answer)
    open_ids = {a for a in answered_after if a not in made_after}
    if not open_ids:
        return True
    return not any(open_ids.intersection(view.calls(item)) for item in items[:index])


def task_end(items: list[Any], view: ItemView, start: int) -> int:
    """The end of the task: of the user message at items[start] and the parts attached to it,
    when items[start] is one (else `start`)."""
    if start >= len(items) or view.role(items[start]) != "user":
        return start
    end = start + 1
    while end < len(items) and view.attached(items[end - 1], items[end]):
        end += 1
    return end


def task_text(items: list[Any], view: ItemView, head: int) -> str:
    """The text of the task: of the non-system items of the head."""
    return "\n".join(view.text(m) or "" for m in items[:head] if view.role(m) != "system")


def split(items: list[Any], view: ItemView, keep_recent: int) -> tuple[int, int]:
    """(head, tail): items[:head] are kept as they are: the leading system items, or everything
    up to the newest provider compaction item and the system items right after it (the provider
    ignores what precedes that item: nothing there is summarised or counted), then the task
    (`task_end`: the first user message, when no provider compaction item holds it), or
    everything up to the newest client compaction summary when later (`client_summary_end`);
    items[tail:] the kept tail, which holds the `compaction_trigger` ending `items`
    (it must stay the last item)."""
    head = start = live_start(items, view)
    while head < len(items) and view.role(items[head]) == "system":
        head += 1
    if start == 0:  # after a provider compaction item, the task is inside that item
        head = task_end(items, view, head)
    head = max(head, client_summary_end(items, view, start))  # a client's own summary: kept, never folded
    tail = max(head, len(items) - keep_recent)
    trigger = trigger_index(items, view)
    if trigger is not None:
        tail = max(head, min(tail, trigger))
    while head < tail < len(items) and not can_cut(items, view, tail):
        tail -= 1  # step back onto the item that made the calls
    return head, tail


class PrefixHashes:
    """hashes[i] identifies the exact prefix items[:i] (SHA-256 over length-framed JSON).

    Computed lazily, as far as the highest index asked for, and finalised only at the indices
    asked for: a reused summary needs only the prefix it covers to be hashed. Ask in rising
    order; an index already passed is recomputed from the start.
    """

    def __init__(self, items: list[Any], *, same: Callable[[list[Any], list[Any]], bool] | None = None) -> None:
        self._items = items
        self.same = same  # `SeenPrefixes.equal`'s: items known to begin with a prefix without comparing them
        self._running = hashlib.sha256(b"offload-prefix-v1")
        self._position = 0  # items hashed into _running
        self._known: dict[int, str] = {}

    def __getitem__(self, index: int) -> str:
        if not 0 <= index <= len(self._items):
            raise IndexError(index)
        if index in self._known:
            return self._known[index]
        if index < self._position:
            self._running, self._position = hashlib.sha256(b"offload-prefix-v1"), 0
        update = self._running.update
        for m in self._items[self._position : index]:
            encoded = jsonio.dumps(m, sort_keys=True)
            update(len(encoded).to_bytes(8, "big"))
            update(encoded)
        self._position = index
        self._known[index] = self._running.hexdigest()
        return self._known[index]

    def matches(self, index: int, expected: str, seen: "SeenPrefixes | None" = None) -> bool:
        """Does items[:index] hash to `expected`? A prefix this process already verified is
        recognised by deep equality (C speed), without hashing it again."""
        if seen is not None and seen.equal(expected, self._items, index, same=self.same):
            return True
        if index > len(self._items) or self[index] != expected:
            return False
        if seen is not None:
            seen.add(expected, self._items[:index])
        return True


class SeenPrefixes:
    """Prefixes (hash → the items) verified recently by this process, a bounded few.

    Shared by requests planned on the event loop and in the CPU pool: thread-safe.
    """

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._prefixes: dict[str, list[Any]] = {}
        self._lock = threading.Lock()

    def equal(
        self,
        prefix_hash: str,
        items: list[Any],
        index: int,
        *,
        same: Callable[[list[Any], list[Any]], bool] | None = None,
    ) -> bool:
        """Is items[:index] the prefix verified under `prefix_hash`? `same(prefix, items)`: True
        when `items` is known to begin with `prefix` without comparing them
        (`TokenCounter.earlier_prefix`); the prefix is then held as `items`' own objects, so that
        the next turn, recalled from this one, knows it the same way."""
        known = self._prefixes.get(prefix_hash)
        if known is None or len(known) != index:
            return False
        if not (same is not None and same(known, items)) and known != items[:index]:
            return False
        with self._lock:
            if self._prefixes.get(prefix_hash) is known:
                self._prefixes[prefix_hash] = items[:index]
        return True

    def add(self, prefix_hash: str, prefix: list[Any]) -> None:
        with self._lock:
            if len(self._prefixes) >= self.size:
                del self._prefixes[next(iter(self._prefixes))]
            self._prefixes[prefix_hash] = prefix


@dataclass(frozen=True)
class PriorSummary:
    """A stored summary of items[head:cut] of this very conversation."""

    cut: int
    text: str
    ref: str
    tokens: int
    message: Any  # the exact summary item forwarded, reused byte for byte
    usage: tuple[int, int] = (0, 0)  # the summarisation calls' (input, output) tokens
    bill: bool = False  # made in the background: its usage goes to the first response using it
    refs: tuple[str, ...] = ()  # the media its stored originals name (`proxy.core.media.without_media`)
    prefix: str = ""  # the hash of the prefix it is stored under (`PrefixHashes`): what names it in a session's record


@dataclass(frozen=True)
class Decision:
    """`reuse`: forward with `prior`. `summarize`: make a summary of items[head:cut]."""

    action: str  # "none" | "reuse" | "summarize"
    head: int
    cut: int
    prior: PriorSummary | None = None
    new_items: tuple[int, int] = (0, 0)  # the range the summariser must fold in


def tokens_between(items: list[Any], view: ItemView, start: int, *, end: int, counter: TokenCounter) -> int:
    return sum(counter.message(m) for m in items[start:end] if view.role(m) != "system")


def trigger(items: list[Any], view: ItemView, head: int, *, settings: OffloadSettings, counter: TokenCounter) -> int:
    """What the part after the head may hold before it is summarised: max_total_tokens less the
    task's tokens (the task counts against the trigger as before it was pinned, so what is
    forwarded stays as large), at least half of max_total_tokens (a long task never makes every
    turn summarise)."""
    limit = settings.max_total_tokens
    return max(limit - tokens_between(items, view, 0, end=head, counter=counter), limit // 2)


def decide(
    items: list[Any],
    view: ItemView,
    settings: OffloadSettings,
    *,
    counter: TokenCounter,
    prior: PriorSummary | None,
    bounds: tuple[int, int] | None = None,
) -> Decision:
    """`bounds`: `split`'s (head, tail) of these items, when the caller has it already (each
    split reads every item's role and text)."""
    head, tail = bounds or split(items, view, settings.keep_recent_for(COMPRESS_KEEP_RECENT))
    limit = trigger(items, view, head, settings=settings, counter=counter)
    if prior is not None and head <= prior.cut <= tail:
        if tokens_between(items, view, prior.cut, end=tail, counter=counter) <= limit:
            return Decision("reuse", head, prior.cut, prior)
        return Decision("summarize", head, tail, prior, (prior.cut, tail))
    if tail - head >= 2 and tokens_between(items, view, head, end=tail, counter=counter) > limit:
        return Decision("summarize", head, tail, None, (head, tail))
    return Decision("none", head, head)


def units(items: list[Any], view: ItemView, start: int, *, end: int, counter: TokenCounter) -> list[tuple[int, int]]:
    """(first item, tokens) of each smallest run of items[start:end] that may not be cut."""
    last_answer: dict[str, int] = {}
    for i in range(start, end):
        answer = view.answers(items[i])
        if answer is not None:
            last_answer[answer] = i
    out: list[tuple[int, int]] = []
    open_until = -1  # the last index some call made so far is answered at
    for i in range(start, end):
        if not out or (i > open_until and not view.attached(items[i - 1], items[i])):
            out.append((i, 0))
        first, tokens = out[-1]
        out[-1] = (first, tokens + counter.message(items[i]))
        for call in view.calls(items[i]):
            open_until = max(open_until, last_answer.get(call, -1))
    return out


def groups(
    items: list[Any], view: ItemView, start: int, *, end: int, threshold: int, counter: TokenCounter
) -> list[tuple[int, int]]:
    """Cut items[start:end] into ranges of at most `threshold` tokens; pairs never split.

    Each range costs one summarisation call, so there are never more than MAX_GROUPS of them:
    when `threshold` would make more, the ranges grow (the smallest threshold that makes at
    most MAX_GROUPS). A unit larger than the threshold is a range of its own.
    """
    if end <= start:
        return []
    if threshold <= 0:
        return [(start, end)]
    parts = units(items, view, start, end=end, counter=counter)
    cuts = _pack(parts, threshold)
    if len(cuts) > MAX_GROUPS:
        # fewer ranges as the threshold grows (greedy packing is monotone): the smallest one that fits
        low, high = threshold, max(threshold, sum(tokens for _, tokens in parts))
        while low < high:
            middle = (low + high) // 2
            if len(_pack(parts, middle)) <= MAX_GROUPS:
                high = middle
            else:
                low = middle + 1
        cuts = _pack(parts, low)
    return [(begin, cuts[k + 1] if k + 1 < len(cuts) else end) for k, begin in enumerate(cuts)]


def _pack(parts: list[tuple[int, int]], threshold: int) -> list[int]:
    """Where each range begins when units are packed in order, a range closed once the next
    unit would take it past `threshold`."""
    cuts: list[int] = []
    size = 0
    for first, tokens in parts:
        if not cuts or (size and size + tokens > threshold):
            cuts.append(first)
            size = 0
        size += tokens
    return cuts


def summary_item(view: ItemView, text: str, ref: str, *, count: int, tokens: int, index: str = "") -> Any:
    """The item standing for the summarised ones: the marker line (`texts.history_ref`
    recognises it exactly), the index of the summarised items (`proxy.core.summary_index`) if
    any, the summary."""
    marker = history_marker(ref, count, tokens)
    return view.summary_item(f"{marker}\n{index}\n{text}" if index else f"{marker}\n{text}")


def kept_users(items: list[Any], view: ItemView, head: int, *, cut: int) -> set[int]:
    """The later user messages of items[head:cut] that stay verbatim: whole messages (no part
    attached before or after), the most recent first while their text fits USER_KEEP_CHARS. An
    earlier summary of the proxy's (a user message too, e.g. what an emulated compaction token
    stood for) is summarised with the rest, never kept beside the new one."""
    kept: set[int] = set()
    room = USER_KEEP_CHARS
    for i in range(cut - 1, head - 1, -1):
        if (
            view.role(items[i]) != "user"
            or (i > head and view.attached(items[i - 1], items[i]))
            or (i + 1 < len(items) and view.attached(items[i], items[i + 1]))
        ):
            continue
        text = view.text(items[i]) or ""
        if history_ref(text) is not None:
            continue
        size = len(text)
        if size > room:
            break
        room -= size
        kept.add(i)
    return kept


def assemble(
    items: list[Any],
    view: ItemView,
    head: int,
    *,
    cut: int,
    summary: Any,
    unfold: Mapping[int, tuple[int, Any]] | None = None,
) -> list[Any]:
    """The head (system items, the task), the summary, the system items and kept user messages
    (`kept_users`) of the summarised range verbatim and in order, the rest. `unfold` (index of a
    folded result → (the index of the result it points to, the item without the fold),
    `proxy.core.compaction.Plan.unfold`): a fold after the cut whose base the summary hides goes
    without the fold, so no pointer names what the model no longer sees; the same cut gives
    the same bytes on every turn."""
    users = kept_users(items, view, head, cut=cut)
    middle = [m for i, m in enumerate(items[head:cut], head) if i in users or view.role(m) == "system"]
    rest = items[cut:]
    if unfold:
        rest = [unfold[i][1] if i in unfold and head <= unfold[i][0] < cut else m for i, m in enumerate(rest, cut)]
    return [*items[:head], summary, *middle, *rest]


def history_lines(items: list[Any], view: ItemView) -> str:
    """The stored form of summarised items: one JSON object per line."""
    return "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in items if view.role(m) != "system")


# ==================== precompress
# When a summary is started ahead of time, and when a turn must wait for one. Pure.
#
# A summary costs seconds; the turn that crosses the trigger should not pay them. So once the
# part a summary would fold reaches `precompress_ratio` of the trigger, the summary is made in
# the background; it covers items[head:tail] of that turn and is stored under the hash of that
# prefix, so a later turn finds it as its prior summary and forwards it exactly as it would a
# summary made inline for the same cut. A turn that crosses the trigger with nothing ready goes
# out without it, unless what it would forward is above the hard limit: then it waits.

# Context windows (tokens) of well-known models, by name prefix; the longest prefix wins.
CONTEXT_WINDOWS: dict[str, int] = {
    "gpt-3.5-turbo": 16_385,
    "gpt-4-turbo": 128_000,
    "gpt-4o": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-5": 400_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "claude-": 200_000,
}


def context_window(model: str | None) -> int | None:
    """The model's context window when known (a dated or suffixed name matches its family)."""
    if not model:
        return None
    name = model.rsplit("/", 1)[-1].lower()  # "openai/gpt-4o" → "gpt-4o"
    best = max((prefix for prefix in CONTEXT_WINDOWS if name.startswith(prefix)), key=len, default=None)
    return CONTEXT_WINDOWS[best] if best else None


def hard_limit(settings: OffloadSettings, model: str | None) -> int:
    """Forwarded tokens above which a turn waits for its summary."""
    limit = settings.hard_max_tokens or 2 * settings.max_total_tokens
    window = context_window(model)
    return min(limit, window) if window else limit


def ahead(
    items: list[Any],
    view: ItemView,
    settings: OffloadSettings,
    *,
    counter: TokenCounter,
    prior: PriorSummary | None,
    bounds: tuple[int, int] | None = None,
) -> Decision | None:
    """The summary to start now, before the trigger is crossed, or None.

    What it folds: the items after the prior summary (or after the leading system items) up to
    the kept tail, once they reach `precompress_ratio` of the trigger. The cut is this turn's
    tail, so the summary is the one an inline summary of this turn's history would be.
    `bounds`: as `decide`'s.
    """
    ratio = settings.precompress_ratio
    if ratio <= 0:
        return None
    head, tail = bounds or split(items, view, settings.keep_recent_for(COMPRESS_KEEP_RECENT))
    usable = prior if prior is not None and head <= prior.cut <= tail else None
    start = usable.cut if usable is not None else head
    limit = trigger(items, view, head, settings=settings, counter=counter)
    if tail - start < 2 or tokens_between(items, view, start, end=tail, counter=counter) < ratio * limit:
        return None
    return Decision("summarize", head, tail, usable, (start, tail))


# ==================== client compaction
# A client's own compaction: the agent asks the model to summarise its conversation. Pure.
#
# Through the proxy an agent's raw history grows without bound (the usage it reads is the reduced
# request's, so one that compacts by usage, as Claude Code does, rarely does). When it does ask for
# a summary itself (Claude Code's `/compact`, Codex's local compaction), the model should summarise
# the conversation, not the proxy's summary of it: that turn gets the originals wherever they fit
# the model's window, and the proxy's summary and refs only for what does not (the turn's
# thresholds become the window's, `settings_for`). Recognised by the instruction each agent sends
# as its last user message (`SIGNATURES`).

# (agent, how its compaction instruction begins), compared with whitespace collapsed and case folded
SIGNATURES: tuple[tuple[str, str], ...] = (
    ("claude-code", "Your task is to create a detailed summary of the conversation so far"),
    ("codex", "You are performing a CONTEXT CHECKPOINT COMPACTION"),
)
DEFAULT_WINDOW = 128_000  # a model whose window is not known
FILL = 0.8  # of the window: the most the history may take (less when the output asked for needs more)
DEFAULT_OUTPUT = 16_000  # output kept free when the request names no limit
MANAGED_MODES = ("auto", "compact", "compress")
_SPACE = re.compile(r"\s+")
_PREFIXES = tuple((agent, _SPACE.sub(" ", text).casefold()) for agent, text in SIGNATURES)
LAST_ITEMS = 8  # items looked at from the end (a message split in parts, a system item between)
_READ = 40_000  # characters at the end of an item's text looked through (the instructions are long)


def asked(items: list[Any], view: ItemView) -> str | None:
    """The agent whose compaction `items` ask for, or None: its instruction is in the last
    user message, alone or beside reminders, or after the tool results it sends back (Claude
    Code's `/compact` after a tool round: one user message of a `tool_result` and the text)."""
    for item in items[: -LAST_ITEMS - 1 : -1]:
        role = view.role(item)
        if role not in ("user", "tool", "system"):
            return None  # the instruction is the last thing sent
        text = view.transcript(item)[1] if role != "system" else ""
        found = _SPACE.sub(" ", text[-_READ:]).casefold()
        agent = next((agent for agent, prefix in _PREFIXES if prefix in found), None)
        if agent is not None:
            return agent
    return None


def max_output(body: JsonObject) -> int:
    """The output the request keeps room for (`max_tokens`, `max_completion_tokens` or
    `max_output_tokens`, as its format names it), else DEFAULT_OUTPUT."""
    for name in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return DEFAULT_OUTPUT


def settings_for(settings: OffloadSettings, *, model: str | None, output: int) -> OffloadSettings:
    """The turn's settings with the model's window as the trigger: nothing is compacted or
    summarised while the history fits it (the tool-result thresholds apply only past the
    trigger); past it, the turn is reduced as any other, and waits for its summary (none is
    started ahead: the conversation restarts from the client's). Settings of a mode that
    offloads nothing are left as they are."""
    if settings.mode not in MANAGED_MODES:
        return settings
    window = context_window(model) or DEFAULT_WINDOW
    budget = min(10_000_000, max(settings.max_total_tokens, min(int(window * FILL), window - output)))
    return settings.model_copy(update={"max_total_tokens": budget, "hard_max_tokens": budget, "precompress_ratio": 0.0})
