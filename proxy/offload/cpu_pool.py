"""The CPU-heavy, pure part of a request's pipeline, off the event loop when it is large.

Planning a large request (counting its tokens with tiktoken, hashing and serialising its
messages, zlib-compressing what is stored) takes seconds of CPU for tens of MB: on the event
loop it would stall every other request of the process (and make store timeouts fire late).
So a large request runs that work in a small thread pool of its own: tiktoken, zlib and
hashlib release the GIL on large inputs, and Python code between them gives the loop its turn
every switch interval (5 ms), so other requests go on meanwhile. Small requests run it inline:
a thread hop costs more than their whole plan.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

# A request is large, and planned off the loop, past either bound.
LARGE_CHARS = 256 * 1024  # characters in the strings of the messages (or items)
LARGE_MESSAGES = 2_000
WORKERS = max(2, min(4, os.cpu_count() or 1))  # large requests planned at once per process

_executor: ThreadPoolExecutor | None = None


def executor() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:  # created on first use, so a forked worker makes its own
        _executor = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="offload-cpu")
    return _executor


def text_size(items: Iterable[Any], limit: int | None = None) -> int:
    """Characters in the strings of `items`, plus one for every other value (an object, an
    array, a number: each costs the token counter a visit, as a character does), counted up to
    `limit` (then a little past it: the walk stops there, at any depth).

    Any JSON shape: chat messages (contents, content parts, tool call arguments), Responses API
    items, wherever a format keeps its text. Sizes only: no text is read or copied. A body of
    many small values in few messages (a tool input of deep objects, a long array of numbers)
    is large too.
    """
    chars = 0
    for item in items:
        kind = type(item)
        if kind is str:
            chars += len(item) or 1
        elif kind is dict:
            chars += 1 + text_size(item.values(), None if limit is None else limit - chars)
        elif kind is list:
            chars += 1 + text_size(item, None if limit is None else limit - chars)
        else:
            chars += 1
        if limit is not None and chars > limit:
            break
    return chars


class CPU:
    """Runs the pure steps of one request's pipeline: inline, or in the pool when large.

    `await cpu(fn, …)`: work that grows with the text (token counting, hashing, serialising,
    compressing): in the pool when the request holds more than LARGE_CHARS of text or more
    than LARGE_MESSAGES messages. `await cpu.light(fn, …)`: work that grows only with the
    number of messages (sums of token counts already made): in the pool only past
    LARGE_MESSAGES, so a large but short history pays no thread hop for it.

    The functions must not touch the event loop; the caller awaits each one before going on,
    so a request's own state is never used by two threads at once.
    """

    def __init__(self, large: bool, many: bool = False) -> None:
        self.large, self.many = large or many, many

    @classmethod
    def for_messages(cls, messages: list[Any]) -> CPU:
        many = len(messages) > LARGE_MESSAGES
        return cls(many or text_size(messages, LARGE_CHARS) > LARGE_CHARS, many)

    def sized(self, chars: int, count: int) -> CPU:
        """For a step over `count` items holding `chars` characters, a part of the request."""
        if not self.large:
            return self
        many = count > LARGE_MESSAGES
        return CPU(many or chars > LARGE_CHARS, many)

    def for_part(self, messages: list[Any]) -> CPU:
        """For a step that only reads `messages`, a part of the request's."""
        if not self.large or len(messages) > LARGE_MESSAGES:
            return self.sized(0, len(messages))
        return self.sized(text_size(messages, LARGE_CHARS), len(messages))

    async def __call__(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await _run(functools.partial(fn, *args, **kwargs)) if self.large else fn(*args, **kwargs)

    async def light(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await _run(functools.partial(fn, *args, **kwargs)) if self.many else fn(*args, **kwargs)


async def _run(call: Callable[[], T]) -> T:
    return await asyncio.get_running_loop().run_in_executor(executor(), call)


INLINE = CPU(False)
