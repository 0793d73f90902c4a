"""A `context_search` worker: a process of its own that compiles and runs model-chosen patterns.

The proxy (`proxy.reload.search`) starts a few of these and kills one whose search runs past its
deadline or that dies: a pattern can make `regex.compile` run for seconds without releasing
the GIL and take gigabytes (`[[](?:a{1000}){3000}]`), and no check of the pattern before
compiling can be trusted to catch every such case. Here that costs only this process. It caps
its own address space (`MEMORY_LIMIT`) and CPU time, keeps no compiled pattern cache, and
exits when the proxy closes its end of the socket.

This module imports nothing but the standard library and `regex`, so a worker starts fast
and small; the parent imports its constants and `Hits` so that both sides count the same way.

Protocol, over one Unix stream socket: frames of a 12-byte head (the JSON header's length, a
4-byte big-endian integer; the body's length, 8 bytes) followed by the header and the body.
The proxy sends `{"op": "compile", "pattern", "deadline"}`, then for each item
`{"op": "scan", "ref", "more", "deadline", "matches", "chars"}` with the item's text (UTF-8,
surrogates passed) as the body. The worker answers `{"ready": pid}` once when it starts;
`{"compiled": true}` or `{"error": message}` to a compile; `{"hit": entry}` for each matching
line as it is found, then `{"done": true, "stopped": reason | null}` to a scan; and
`{"memory": true}` (then exits) when it runs out of memory. Deadlines are `time.monotonic()`
values, which are system-wide on the platforms the proxy runs on.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

import regex

MEMORY_LIMIT = 512 << 20  # bytes of address space per worker (RLIMIT_AS): a 32 MiB search needs < 200 MiB
CPU_SLACK = 2  # CPU seconds an operation may use past its deadline before the kernel stops it
NICE = 10  # a runaway search yields the CPU to the proxy's event loop (the proxy sets it at the start too)
MAX_MATCHES = 200
MATCH_LINE_CHARS = 300
FLAGS = regex.IGNORECASE | regex.MULTILINE

TIME = "time"
SIZE = "size"
MATCHES = "matches"
EXPENSIVE = "expensive"

HEAD = struct.Struct("!IQ")
# str.splitlines() breaks lines at \n, \r\n and these; the scan sees every line ended by \n
OTHER_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
LINE_BREAKS = "\n" + OTHER_BREAKS
_OTHER_BREAKS = re.compile(f"\r\n|[{OTHER_BREAKS}]")


class Hits:
    """Matching lines found so far, and why the search stopped early (None: it did not)."""

    def __init__(self, max_chars: int, max_lines: int = MAX_MATCHES) -> None:
        self.max_chars, self.max_lines = max_chars, max_lines
        self.lines: list[str] = []
        self.chars = 0
        self.stopped: str | None = None

    def add(self, ref: str, number: int, line: str) -> str | None:
        """The entry for a matching line, kept; None when the hits are full (`stopped`)."""
        shown = line if len(line) <= MATCH_LINE_CHARS else line[:MATCH_LINE_CHARS] + "…"
        entry = f"ref={ref} line {number}: {shown}"
        return entry if self.keep(entry) else None

    def keep(self, entry: str) -> bool:
        if len(self.lines) >= self.max_lines or self.chars + len(entry) > self.max_chars:
            self.stopped = MATCHES
            return False
        self.lines.append(entry)
        self.chars += len(entry) + 1
        return True


def lines_text(text: str, more: bool) -> tuple[str | None, bool]:
    """`"\\n".join(text.splitlines())`, without a last line cut short when `more` follows.

    Returns (the text, None when there is no line at all; whether a partial last line was left
    out). One string, no list of lines: a text of 32 MiB of empty lines must not need gigabytes.
    """
    cut = False
    if more and text and text[-1] not in LINE_BREAKS:
        last = max(text.rfind(c) for c in LINE_BREAKS)
        text, cut = text[: last + 1], True  # the line the proxy cut is not searched
    if not text:
        return None, cut
    if any(c in text for c in OTHER_BREAKS):
        text = _OTHER_BREAKS.sub("\n", text)
    if text.endswith("\n"):
        text = text[:-1]  # splitlines() has no empty line after the last break
    return text, cut


def scan(
    compiled: regex.Pattern[str], ref: str, text: str, *, deadline: float, hits: Hits, found: Callable[[str], None]
) -> None:
    """Call `found(entry)` for each line of `text` (lines ended by \\n) that matches, in order.

    The text is searched as one string (one C call per match, not per line), so ^ and $ work per
    line; a match spanning lines counts for its first. Stops at the deadline (`regex` gives up
    mid-match at its `timeout`) or when `hits` is full.
    """
    pos, number, counted = 0, 0, 0
    end = len(text)
    while pos <= end:
        left = deadline - time.monotonic()
        if left <= 0:
            hits.stopped = TIME
            return
        try:
            match = compiled.search(text, pos, timeout=left)
        except TimeoutError:
            hits.stopped = TIME
            return
        if match is None:
            return
        start = match.start()
        number += text.count("\n", counted, start)
        counted = start
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", start)
        line_end = end if line_end < 0 else line_end
        entry = hits.add(ref, number, text[line_start : min(line_end, line_start + MATCH_LINE_CHARS + 1)])
        if entry is None:
            return
        found(entry)
        pos = line_end + 1


class Channel:
    """The worker's end of the socket: blocking reads and writes of whole frames."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def read(self) -> tuple[dict[str, Any], bytes] | None:
        head = self._exactly(HEAD.size)
        if head is None:
            return None
        header_size, body_size = HEAD.unpack(head)
        header = self._exactly(header_size)
        body = self._exactly(body_size) if body_size else b""
        if header is None or body is None:
            return None
        return json.loads(header), body

    def _exactly(self, size: int) -> bytes | None:
        buf = bytearray(size)
        view, got = memoryview(buf), 0
        while got < size:
            n = self.sock.recv_into(view[got:])
            if n == 0:
                return None  # the proxy is gone
            got += n
        return bytes(buf) if size < (1 << 20) else buf  # type: ignore[return-value]  # a large body stays one buffer

    def send(self, header: dict[str, Any]) -> None:
        data = json.dumps(header).encode()
        self.sock.sendall(HEAD.pack(len(data), 0) + data)


def _limit_cpu(deadline: float) -> None:
    """The kernel stops an operation that outruns its deadline by `CPU_SLACK` CPU seconds,
    should the proxy fail to (the proxy kills a late worker itself; this is a safety net)."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = used.ru_utime + used.ru_stime
    soft = int(spent + max(0.0, deadline - time.monotonic()) + CPU_SLACK) + 1
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    except (ValueError, OSError):
        pass  # the proxy's deadline still holds


def _confine() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the proxy ends us
    try:  # short of memory (a container's limit), the kernel kills a worker, not the proxy
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = MEMORY_LIMIT if hard == resource.RLIM_INFINITY else min(MEMORY_LIMIT, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ValueError, OSError) as exc:  # not on Linux: the deadline (SIGKILL) still bounds a search
        print(f"context_search worker: no memory limit ({exc})", file=sys.stderr, flush=True)
    try:
        if os.getpriority(os.PRIO_PROCESS, 0) < NICE:
            os.setpriority(os.PRIO_PROCESS, 0, NICE)
    except OSError:
        pass


def serve(channel: Channel) -> None:
    compiled = None
    channel.send({"ready": os.getpid()})
    while (message := channel.read()) is not None:
        header, body = message
        del message
        _limit_cpu(header["deadline"])
        if header["op"] == "compile":
            compiled = None
            try:
                compiled = regex.compile(header["pattern"], FLAGS, cache_pattern=False)
            except (regex.error, OverflowError, RecursionError, ValueError, TypeError) as exc:
                channel.send({"error": str(exc)})
                continue
            channel.send({"compiled": True})
        elif header["op"] == "scan" and compiled is not None:
            text, cut = lines_text(body.decode("utf-8", "surrogatepass"), header["more"])
            del body
            hits = Hits(max_chars=header["chars"], max_lines=header["matches"])
            if text is not None:
                scan(
                    compiled,
                    header["ref"],
                    text,
                    deadline=header["deadline"],
                    hits=hits,
                    found=lambda entry: channel.send({"hit": entry}),
                )
            del text
            stopped = hits.stopped or (SIZE if cut or header["more"] else None)
            channel.send({"done": True, "stopped": stopped})
        else:
            channel.send({"error": f"unexpected {header['op']!r}"})


def main(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    sock.setblocking(True)
    channel = Channel(sock)
    try:
        _confine()
        serve(channel)
    except MemoryError:
        try:
            channel.send({"memory": True})
        except (MemoryError, OSError):
            pass
        os._exit(3)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the proxy went away mid-answer
    os._exit(0)


if __name__ == "__main__":
    main(int(sys.argv[1]))
