"""`context_search`'s pattern compiling and matching, in worker processes the proxy can kill,
and the pool of those processes.

The pattern is chosen by the model, so it may be catastrophic to match (`(a|a)+$`), to
compile (`[[](?:a{1000}){3000}]`: seconds of C code holding the GIL, gigabytes), or both. No
check of the pattern can be trusted to see every such case, so none is the boundary: both
steps run in a few long-lived worker processes (`proxy.reload.search_worker`, at most `WORKERS` per
event loop, started ahead (`warm`, when a request is offered the reload tools) or when first
needed), each capped to `MEMORY_LIMIT` of address space. A search holds one worker under one
deadline (a worker still starting is waited for apart, `START_TIMEOUT`: its start moves the
deadline on); the worker stops itself at the deadline (the `regex` timeout) and streams each
matching line back as it finds it. One that has not answered `KILL_GRACE` after the deadline is
killed (SIGKILL) and replaced, and so is one that dies (out of memory, a signal): the search
returns the matches received so far with a note saying why.

The event loop never waits on a worker except through the socket (`loop.sock_recv`), and
never sends a large item's text from the loop thread in one piece. A search that finds every
worker busy waits for one within its own deadline. `shutdown()` ends the workers of the
running loop (the app's lifespan calls it); an exit handler ends any left.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from proxy.core.jsonio import JsonObject
from proxy.offload.cpu_pool import CPU, executor
from proxy.reload.search_worker import EXPENSIVE, HEAD, MATCHES, MAX_MATCHES, MEMORY_LIMIT, NICE, SIZE, TIME, Hits  # noqa: F401

log = logging.getLogger("proxy.reload.search")

WORKERS = 2  # search worker processes per event loop (per proxy worker process)
REAP_WAIT = 5.0  # at shutdown, how long (s) the killed workers get to be reaped
KILL_GRACE = 0.25  # seconds past its deadline a worker may take to answer before it is killed
RECYCLE_RSS = 256 << 20  # a worker holding more memory than this after a search is replaced
MAX_REPLY = 1 << 20  # bytes: a worker's message is small; a larger one ends the worker
INTERRUPTED = "interrupted"  # the proxy shut the workers down mid-search
START_TIMEOUT = 10.0  # seconds a worker may take to start (a loaded host) before a search gives up on it

_ROOT = str(Path(__file__).resolve().parents[2])
_BOOT = (
    f"import sys; sys.path.insert(0, {_ROOT!r}); from proxy.reload.search_worker import main; main(int(sys.argv[1]))"
)


# ---------------------------------------------------------------- worker processes


class WorkerGone(Exception):
    """The worker died, was killed, or broke the protocol; it cannot be used again."""


class Worker:
    """One worker process and the proxy's end of its socket (non-blocking, used by one search at a time)."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-P", "-c", _BOOT, str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        try:  # from its first instruction on, the worker yields the CPU to the event loop
            os.setpriority(os.PRIO_PROCESS, self.proc.pid, max(NICE, os.getpriority(os.PRIO_PROCESS, 0)))
        except OSError:
            pass
        ours.setblocking(False)
        self.sock = ours
        self.buffer = bytearray()
        self.killed = False  # by us: shutdown, a deadline, a broken protocol
        self.ready = False  # it said so: it started (imports, limits) and reads requests
        _live.add(self)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return not self.killed and self.proc.poll() is None

    def rss(self) -> int | None:
        """Resident bytes, where /proc tells (Linux)."""
        try:
            with open(f"/proc/{self.pid}/statm", "rb") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return None

    async def send(self, header: JsonObject, body: list[bytes] | None = None, *, until: float) -> None:
        """One frame: `header`, then the chunks of `body` (as one body)."""
        data = json.dumps(header).encode()
        body = body or []
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(until):
                await loop.sock_sendall(self.sock, HEAD.pack(len(data), sum(map(len, body))) + data)
                for chunk in body:
                    await loop.sock_sendall(self.sock, chunk)
        except OSError as exc:
            raise WorkerGone(f"{self._epitaph()} ({exc})") from exc

    async def receive(self, *, until: float) -> JsonObject:
        """The worker's next message; TimeoutError at `until` (monotonic), WorkerGone if it is gone."""
        while True:
            message = await self._next(until)
            if "ready" not in message:
                return message
            self.ready = True

    async def started(self, *, until: float) -> None:
        """Returns once the worker has said it started (at once if it has); TimeoutError at
        `until`, WorkerGone if it died or spoke first."""
        while not self.ready:
            if "ready" not in await self._next(until):
                raise WorkerGone("an answer before it started")
            self.ready = True

    async def _next(self, until: float) -> JsonObject:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout_at(until):
            while True:
                if len(self.buffer) >= HEAD.size:
                    size, body = HEAD.unpack_from(self.buffer)
                    if size > MAX_REPLY or body:
                        raise WorkerGone("a malformed message")
                    if len(self.buffer) >= HEAD.size + size:
                        raw = bytes(self.buffer[HEAD.size : HEAD.size + size])
                        del self.buffer[: HEAD.size + size]
                        try:
                            message = json.loads(raw)
                        except ValueError as exc:
                            raise WorkerGone("a malformed message") from exc
                        if not isinstance(message, dict):
                            raise WorkerGone("a malformed message")
                        return message
                try:
                    data = await loop.sock_recv(self.sock, 1 << 16)
                except OSError as exc:
                    raise WorkerGone(f"{self._epitaph()} ({exc})") from exc
                if not data:
                    raise WorkerGone(self._epitaph())
                self.buffer += data

    def _epitaph(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "closed its socket"
        return f"died of signal {-code}" if code < 0 else f"exited with status {code}"

    def kill(self) -> None:
        """SIGKILL; the socket stays open so that a search reading it sees the end."""
        self.killed = True
        try:
            self.proc.kill()
        except OSError:
            pass

    def reap(self, timeout: float | None = None) -> None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return  # still in _live: the exit handler tries again
        _live.discard(self)


_live: set[Worker] = set()  # every worker not yet reaped, whatever its loop


def _spawn(count: int) -> list[Worker]:
    """`count` new workers (in a thread: spawning a process is not the event loop's work)."""
    workers: list[Worker] = []
    try:
        for _ in range(count):
            workers.append(Worker())
    except BaseException:
        for worker in workers:
            worker.kill()
            worker.sock.close()
        raise
    return workers


@atexit.register
def end_all() -> None:
    """Kill and reap every worker of this process, whatever its loop (at exit; tests)."""
    for worker in list(_live):
        worker.kill()
    for worker in list(_live):
        worker.reap(1.0)


class Pool:
    """At most `size` workers for the searches of one event loop; idle ones are kept."""

    def __init__(self, size: int = WORKERS) -> None:
        self.size = size
        self.slots = asyncio.Semaphore(size)
        self.idle: list[Worker] = []
        self.workers: set[Worker] = set()
        self.reaping: set[asyncio.Future[None]] = set()
        self.warming: asyncio.Future[list[Worker]] | None = None
        self.closed = False

    def warm(self) -> None:
        """Start the missing workers in the background (spawned in a thread, off the loop), so
        that the coming searches find them started. Nothing to do while a start is under way."""
        missing = self.size - len(self.workers)
        if self.closed or missing <= 0 or self.warming is not None:
            return
        self.warming = asyncio.get_running_loop().run_in_executor(executor(), _spawn, missing)
        self.warming.add_done_callback(self._warmed)

    def _warmed(self, spawning: asyncio.Future[list[Worker]]) -> None:
        self.warming = None
        if spawning.cancelled():
            return  # the loop is closing: the exit handler ends them
        if (exc := spawning.exception()) is not None:
            log.warning("could not start the search workers: %s", exc)
            return
        for worker in spawning.result():
            if self.closed or len(self.workers) >= self.size:
                self.discard(worker)
            else:
                self.workers.add(worker)
                self.idle.append(worker)

    async def acquire(self, until: float) -> Worker | None:
        """A worker for one search, or None when none is free before `until` (monotonic)."""
        try:
            async with asyncio.timeout_at(until):
                await self.slots.acquire()
        except TimeoutError:
            return None
        try:
            while self.idle:
                worker = self.idle.pop()
                if worker.alive():
                    return worker
                self.discard(worker)
            worker = Worker()
            self.workers.add(worker)
            return worker
        except BaseException:
            self.slots.release()
            raise

    def release(self, worker: Worker, reusable: bool) -> None:
        """Back to the pool; killed and replaced (later, when needed) unless `reusable` and lean."""
        rss = worker.rss() if reusable else None
        if reusable and not self.closed and worker.alive() and (rss is None or rss <= RECYCLE_RSS):
            self.idle.append(worker)
        else:
            self.discard(worker)
        self.slots.release()

    def discard(self, worker: Worker) -> None:
        """Kill a worker no search is using any more, and reap it."""
        self.workers.discard(worker)
        if worker in self.idle:
            self.idle.remove(worker)
        worker.kill()
        worker.sock.close()
        self._reap(worker)

    def _reap(self, worker: Worker) -> None:
        """Reap a killed worker without a thread (starting one can stall the loop on a busy
        machine): poll it, 5 ms after the kill then less and less often, for up to a minute."""
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        self.reaping.add(done)
        done.add_done_callback(self.reaping.discard)

        def poll(delay: float) -> None:
            if worker.proc.poll() is not None or delay > 60:
                worker.reap(0)
                if not done.done():
                    done.set_result(None)
            else:
                loop.call_later(delay, poll, delay * 2)

        loop.call_later(0.005, poll, 0.01)

    async def close(self) -> None:
        """Kill every worker: idle ones are discarded; a search using one sees it end and gives it back."""
        self.closed = True
        if self.warming is not None:  # its workers are discarded as soon as they are spawned
            await asyncio.wait([self.warming], timeout=5)
        for worker in list(self.workers):
            if worker in self.idle:
                self.discard(worker)
            else:
                worker.kill()
                self._reap(worker)
        if self.reaping:
            await asyncio.wait(list(self.reaping), timeout=REAP_WAIT)


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pool] = weakref.WeakKeyDictionary()


def pool() -> Pool:
    """The running loop's pool (an app's requests all run on its loop)."""
    loop = asyncio.get_running_loop()
    found = _pools.get(loop)
    if found is None:
        found = _pools[loop] = Pool()
    return found


def warm() -> None:
    """Start the running loop's workers ahead of the searches (see `Pool.warm`)."""
    pool().warm()


async def shutdown() -> None:
    """End the running loop's workers (idle or mid-search) and reap them; a later search starts anew."""
    found = _pools.pop(asyncio.get_running_loop(), None)
    if found is not None:
        await found.close()


# ---------------------------------------------------------------- the patterns and the search

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
