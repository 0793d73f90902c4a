"""What a test asserts instead of how fast: that work ran elsewhere while the proxy went on.

CI is a loaded, shared 2-core machine: a bound on seconds fails there whatever the code does.
These helpers turn "the event loop stayed free" into what happened: where a function ran
(`spy_threads`), how many times the loop turned while the work was still under way
(`loop_turns_while`), and how many other requests were answered before the work was done
(`answered_while`). Each relies on the test making the work long itself (a deadline it holds,
a worker it freezes, an upstream that has not answered yet), so that a loop held by the work
shows as no turns or no answers, whatever the machine's load.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable
from typing import Any


def spy_threads(monkeypatch, owner: Any, name: str) -> list[str]:
    """Wrap `owner.name` (a function or method) to record the name of the thread of each call."""
    real = getattr(owner, name)
    threads: list[str] = []

    @functools.wraps(real)
    def spy(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)
    return threads


async def loop_turns_while(task: asyncio.Future) -> int:
    """Times this event loop came back to a 5 ms sleeper while `task` was still not done (the
    task awaited afterwards): a loop held by the task's work has none to count for that time."""
    turns = 0
    while not task.done():
        await asyncio.sleep(0.005)
        if not task.done():
            turns += 1
    await task
    return turns


def answered_while(
    in_flight: Callable[[], bool], probe: Callable[[], object], *, most: int = 10, pause: float = 0.01
) -> int:
    """Call `probe` (a request to the proxy: it raises or asserts when not answered right) while
    `in_flight()`, up to `most` times; the number answered with the work still in flight after."""
    answered = 0
    while in_flight() and answered < most:
        probe()
        if in_flight():
            answered += 1
        time.sleep(pause)
    return answered
