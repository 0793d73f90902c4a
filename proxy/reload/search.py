"""`context_search`'s pattern compiling and matching, in worker processes the proxy can kill.

The pattern is chosen by the model, so it may be catastrophic to match (`(a|a)+$`), to
compile (`[[](?:a{1000}){3000}]`: seconds of C code holding the GIL, gigabytes), or both. No
check of the pattern can be trusted to see every such case, so none is the boundary: both
steps run in a few long-lived worker processes (`proxy.reload.search_worker`, at most `WORKERS` per
event loop, started ahead or when first needed), each capped to `MEMORY_LIMIT` of address space. A
search holds one worker under one deadline (a worker still starting is waited for apart: its
start moves the deadline on); the worker stops itself at the deadline (the
`regex` timeout) and streams each matching line back as it finds it. One that has not answered
`KILL_GRACE` after the deadline is killed (SIGKILL) and replaced, and so is one that dies (out
of memory, a signal): the search returns the matches received so far with a note saying why.

The event loop never waits on a worker except through the socket (`loop.sock_recv`), and
never sends a large item's text from the loop thread in one piece. A search that finds every
worker busy waits for one within its own deadline. `shutdown()` ends the workers of the
running loop (the app's lifespan calls it); an exit handler ends any left.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import Protocol

from proxy.core.jsonio import JsonObject
from proxy.offload.cpu_pool import CPU
from proxy.reload.search_pool import INTERRUPTED, KILL_GRACE, START_TIMEOUT, Pool, Worker, WorkerGone, pool
from proxy.reload.search_worker import EXPENSIVE, HEAD, MATCHES, MAX_MATCHES, MEMORY_LIMIT, NICE, SIZE, TIME, Hits  # noqa: F401

log = logging.getLogger("proxy.reload.search")

MAX_PATTERN_CHARS = 1_000
MAX_EXPANSION = 100_000  # a{100000} compiles in ~70 ms; nested counted repeats multiply
LARGE_CHARS = 1 << 20  # texts larger than this are prepared for a worker in a thread (proxy.offload.cpu_pool's)
BLOCK_CHARS = 1 << 20  # ... a block at a time: no single C call holds the GIL long
OFF_LOOP = CPU(True)


class SearchSettings(Protocol):
    """What a search reads of the server's settings (`proxy.config.ServerSettings` has it)."""

    @property
    def search_timeout(self) -> float: ...
    @property
    def search_max_bytes(self) -> int: ...


@dataclass(frozen=True)
class SearchLimits:
    """Per search: total seconds (further bounded by the request's reload budget), bytes scanned."""

    # the defaults of --search-timeout and --search-max-bytes (a test keeps them equal)
    timeout: float = 2.0
    max_bytes: int = 32 * 1024 * 1024

    @classmethod
    def of(cls, settings: SearchSettings) -> SearchLimits:
        return cls(settings.search_timeout, settings.search_max_bytes)


# ---------------------------------------------------------------- cheap refusals before any worker

_COUNTED = re.compile(r"\{(\d*)(?:,(\d*))?\}")
_BRACED_ESCAPES = frozenset("pPNxuUgk")


def expansion(pattern: str) -> int:
    """A rough estimate of the pattern's size once its counted repeats are expanded.

    Only a courtesy (an honest `(?:a{1000}){1000}` is told at once why it is refused, and no
    worker is spent on it): the estimate can be fooled, and the workers are the safeguard.
    """
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


def check_pattern(pattern: str) -> None:
    """Raises ValueError with a message for the model when the pattern is refused outright."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ValueError(f"the pattern is longer than {MAX_PATTERN_CHARS} characters")
    if expansion(pattern) > MAX_EXPANSION:
        raise ValueError(f"its counted repeats (x{{n}}) multiply past {MAX_EXPANSION}; use smaller counts, * or +")


# ---------------------------------------------------------------- one search


def prefix_chunks(text: str, room: int) -> tuple[list[bytes], bool]:
    """The UTF-8 of `text` (surrogates passed) cut to at most `room` bytes at a character
    boundary, in chunks of at most BLOCK_CHARS characters (no C call copies much at once: in a
    thread, this leaves the event loop its turns), and whether anything was left out."""
    chunks, size, start = [], 0, 0
    ascii_ = text.isascii()
    while start < len(text) and size < room:
        end = start + min(BLOCK_CHARS, room - size) if ascii_ else start + BLOCK_CHARS
        chunk = text[start:end].encode("ascii") if ascii_ else text[start:end].encode("utf-8", "surrogatepass")
        chunks.append(chunk)
        size += len(chunk)
        start = end
    more = start < len(text)
    if size > room:
        last = chunks.pop()
        cut = len(last) - (size - room)
        while cut > 0 and last[cut] & 0xC0 == 0x80:
            cut -= 1  # not inside a character
        chunks.append(last[:cut])
        more = True
    return chunks, more


class Search:
    """One search's hold on one worker: `open` (compile), `scan` item after item, `close`.

    Everything found lands in `hits`; `hits.stopped` says why the search ended early: TIME (the
    deadline, or no worker free before it), SIZE, MATCHES, EXPENSIVE (the worker died: out of
    memory or killed by a signal), INTERRUPTED (shutdown).
    """

    def __init__(self, pattern: str, deadline: float, hits: Hits) -> None:
        self.pattern, self.deadline, self.hits = pattern, deadline, hits
        self.pool: Pool | None = None
        self.worker: Worker | None = None
        self.compiled = False
        self.busy = False  # no worker was free (or none started) before the deadline
        self.start_wait = 0.0  # seconds spent waiting for a worker to start (the deadline moved on by them)
        self.idle = True  # no request to the worker is unanswered

    @property
    def until(self) -> float:
        return self.deadline + KILL_GRACE

    async def open(self) -> str | None:
        """Compile the pattern in a worker. Returns the compiler's error for an invalid pattern.

        When the compile does not finish (deadline, memory), `hits.stopped` says so and
        `compiled` stays False.
        """
        self.pool = pool()
        self.worker = await self.pool.acquire(self.deadline)
        if self.worker is None:
            self.busy, self.hits.stopped = True, TIME
            return None
        if not self.worker.ready and not await self._started():
            return None
        reply = await self._ask({"op": "compile", "pattern": self.pattern, "deadline": self.deadline})
        if reply is None:
            return None
        if "error" in reply:
            return str(reply["error"])
        self.compiled = bool(reply.get("compiled"))
        return None

    async def _started(self) -> bool:
        """Wait for a worker still starting, apart from the search's time: the deadline moves on
        by the wait (a start on a loaded host is not the pattern's cost). False if it never
        started within START_TIMEOUT (reported as no worker free: `busy`)."""
        worker = self.worker
        assert worker is not None
        began = time.monotonic()
        try:
            await worker.started(until=began + START_TIMEOUT)
        except TimeoutError:
            self._lose(TIME, f"did not start within {START_TIMEOUT:g} s")
            self.busy = True
            return False
        except WorkerGone as exc:
            killed = worker.killed
            self._lose(INTERRUPTED if killed else EXPENSIVE, str(exc))
            if not killed:  # not the pattern's doing: the proxy's own problem
                raise RuntimeError(f"a search worker did not start: it {exc} (see its output above)") from exc
            return False
        self.start_wait = time.monotonic() - began
        self.deadline += self.start_wait
        return True

    async def scan(self, ref: str, text: str, room: int) -> int:
        """Search `ref`'s text, at most `room` bytes of it. Returns the bytes sent to the worker."""
        if self.worker is None or not self.compiled or self.hits.stopped is not None:
            return 0
        if room <= 0:
            self.hits.stopped = SIZE
            return 0
        if len(text) > LARGE_CHARS:
            chunks, more = await OFF_LOOP(prefix_chunks, text, room)
        else:
            chunks, more = prefix_chunks(text, room)
        hits = self.hits
        header = {
            "op": "scan",
            "ref": ref,
            "more": more,
            "deadline": self.deadline,
            "matches": hits.max_lines - len(hits.lines),
            "chars": hits.max_chars - hits.chars,
        }
        reply = await self._ask(header, chunks)
        if reply is not None and reply.get("done"):
            stopped = reply.get("stopped")
            hits.stopped = hits.stopped or (stopped if stopped in (TIME, SIZE, MATCHES) else None)
        return sum(map(len, chunks))

    async def _ask(self, header: JsonObject, body: list[bytes] | None = None) -> JsonObject | None:
        """Send one request and take the answers up to its last; matching lines go to `hits`.

        None when the worker is lost (then `hits.stopped` says why) or the answer is unexpected.
        """
        worker = self.worker
        assert worker is not None
        self.idle = False
        try:
            await worker.send(header, body, until=self.until)
            while True:
                reply = await worker.receive(until=self.until)
                if "hit" in reply:
                    if isinstance(reply["hit"], str):
                        self.hits.keep(reply["hit"])  # the worker counts the same way; this caps it anyway
                    continue
                if reply.get("memory"):
                    self._lose(EXPENSIVE, "ran out of memory")
                    return None
                self.idle = True
                return reply
        except TimeoutError:
            self._lose(TIME, "ran past its deadline")
        except WorkerGone as exc:
            killed, ready = worker.killed, worker.ready
            self._lose(INTERRUPTED if killed else EXPENSIVE, str(exc))
            if not ready and not killed:  # not the pattern's doing: the proxy's own problem
                raise RuntimeError(f"a search worker did not start: it {exc} (see its output above)") from exc
        return None

    def _lose(self, reason: str, why: str) -> None:
        worker = self.worker
        assert worker is not None and self.pool is not None
        log.info("search worker %s %s (pattern of %d chars): replaced", worker.pid, why, len(self.pattern))
        self.pool.release(worker, reusable=False)
        self.worker = None
        self.hits.stopped = reason

    def close(self) -> None:
        """Give the worker back: kept if it answered everything asked, killed otherwise."""
        if self.worker is not None and self.pool is not None:
            self.pool.release(self.worker, reusable=self.idle)
            self.worker = None
