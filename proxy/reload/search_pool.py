"""The search worker processes: started ahead (`warm`, when a request is offered the reload
tools) or when first needed, at most WORKERS per event loop, killed and replaced when they
overrun or die, ended with the app (`shutdown`). A worker's start is not a search's time: a
search waits for it apart (`START_TIMEOUT`) and then gets its whole deadline."""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import socket
import subprocess
import sys
import weakref
from pathlib import Path

from proxy.core.jsonio import JsonObject
from proxy.offload.cpu_pool import executor
from proxy.reload.search_worker import HEAD, MEMORY_LIMIT, NICE  # noqa: F401

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
