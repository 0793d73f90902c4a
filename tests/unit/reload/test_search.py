"""context_search in worker processes: patterns that are expensive to compile or to match cost
the proxy neither event-loop time nor memory; a lost worker is replaced; workers are bounded
and none outlives shutdown. The search's limits: the server's settings handed down
(proxy.reload never imports proxy.config)."""

from __future__ import annotations

import asyncio
import gc
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest
import regex

from proxy.config import ServerSettings
from proxy.core.compaction import Offload
from proxy.core.tokens import counter_for_model
from proxy.offload.records import RefStore
from proxy.reload import search
from proxy.reload import search as search_pool
from proxy.reload.search import SearchLimits
from proxy.reload.tools import ReloadTools
from proxy.store.sqlite import SQLiteStore
from tests.harness.inflight import loop_turns_while, spy_threads

pytestmark = pytest.mark.anyio
COUNTER = counter_for_model("gpt-4o")
MB = 1 << 20

# Each fools the expansion estimate (`[[]` is a complete class in regex's V0 syntax; a verbose
# comment hides the repeats) or is slow without any counted repeat; the last one would take
# every byte of memory there is if it were compiled in the proxy's own process.
COMPILE_BOMBS = [
    "[[](?:a{1000}){3000}]",
    "(?x)#[\n(?:a{1000}){1000}\n#]",
    "((?1)|a)",
    "[[](?:(?:a{1000}){1000}){1000}]",
]


def search_workers(zombies: bool = True) -> list[int]:
    """Pids of this process's search worker children (exited but unreaped ones too, if `zombies`)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == os.getpid() and b"proxy.reload.search_worker" in cmdline and (zombies or state != "Z"):
            found.append(int(entry.name))
    return found


OTHERS: set[int] = set()


def own_workers(zombies: bool = True) -> list[int]:
    """The search workers this test started (not those of the session's other proxies)."""
    return [pid for pid in search_workers(zombies) if pid not in OTHERS]


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture(autouse=True)
async def _no_worker_left_behind():
    OTHERS.clear()
    OTHERS.update(search_workers())  # other proxies of this test session (the shared one) keep theirs
    gc.freeze()  # as the app does at startup: what is measured is the search, not a collection of pytest's objects
    yield
    gc.unfreeze()
    await search_pool.shutdown()
    assert own_workers() == []


@pytest.fixture
async def refs(tmp_path):
    store = SQLiteStore(tmp_path)
    refs = RefStore(store, "n" * 32, ttl=60)
    needles = "".join(f"needle {i}\n" for i in range(5))
    hard = "".join("a" * 40 + "!\n" for _ in range(2000))  # (a|a)+$ backtracks exponentially on each line
    rows = "".join(f"row {i} " + "a" * 30 + "\n" for i in range(2000))
    await refs.save(
        [
            Offload("needles", "tool_result", needles, 10),
            Offload("hard01", "tool_result", hard, 9000),
            Offload("rows01", "tool_result", rows, 9000),
            Offload("mixed1", "tool_result", needles + "".join(f"row {i} zzz\n" for i in range(2000)), 9000),
        ],
        [],
    )
    yield refs
    await store.close()


def tools_for(refs: RefStore, items: list[str], timeout: float) -> ReloadTools:
    return ReloadTools(
        refs, COUNTER, max_tokens=500, request_refs=items, session=None, limits=SearchLimits(timeout=timeout)
    )


def compiled_here(monkeypatch) -> list[str]:
    """The patterns `regex` compiles in this (the proxy's) process from now on: a search must
    compile none, its worker does."""
    patterns: list[str] = []
    for name in ("compile", "search", "match", "fullmatch", "finditer", "findall", "split", "sub"):
        real = getattr(regex, name)

        def spy(pattern, *args, _real=real, **kwargs):
            patterns.append(pattern)
            return _real(pattern, *args, **kwargs)

        monkeypatch.setattr(regex, name, spy)
    return patterns


async def test_compile_bombs_cost_the_proxy_neither_the_loop_nor_memory(refs, monkeypatch):
    tools = tools_for(refs, ["rows01"], timeout=1.0)
    assert "ref=rows01 line 1: row 1 " in await tools.search(r"^row 1\b")
    before = rss()
    here = compiled_here(monkeypatch)
    for pattern in COMPILE_BOMBS:  # in this order: on a proxy that compiles in-process, fail before the last
        # a worker is running (the bomb before killed its own): measure from here, not a process's start
        assert "ref=rows01 line 1: row 1 " in await tools.search(r"^row 1\b")
        answer = await tools.search(pattern)
        # where the work runs, not how fast: compiled in this process, the first alone holds the
        # loop 0.5 to 25 s and the last never ends in 1 GiB
        assert pattern not in here, pattern
        assert rss() - before < 100 * MB, (pattern, (rss() - before) // MB)
        assert answer.startswith((f"The pattern {pattern!r} is too expensive", f"No match for {pattern!r}")), answer
    assert "compiling it" in answer  # the last one can never be compiled in 1 GiB
    assert "ref=rows01 line 7: row 7 " in await tools.search(r"^row 7\b")  # replaced: the next search works


async def test_a_worker_still_starting_does_not_count_against_the_deadline(refs, monkeypatch):
    """A worker that takes longer to start than the whole search may (a loaded host): the
    pattern is not reported too expensive, and the search gets its whole time once it runs."""
    monkeypatch.setattr(search_pool, "_BOOT", "import time; time.sleep(1.5); " + search_pool._BOOT)
    tools = tools_for(refs, ["rows01"], timeout=1.0)
    started = time.monotonic()
    answer = await tools.search(r"^row 1\b")
    assert time.monotonic() - started > 1.5
    assert answer == "ref=rows01 line 1: row 1 " + "a" * 30, answer
    assert "ref=rows01 line 1999: row 1999" in await tools.search(r"^row 1999\b")  # the same worker, started


async def test_a_worker_that_never_starts_is_no_verdict_on_the_pattern(refs, monkeypatch):
    monkeypatch.setattr(search_pool, "_BOOT", "import time; time.sleep(30)")
    monkeypatch.setattr(search, "START_TIMEOUT", 0.5)
    tools = tools_for(refs, ["rows01"], timeout=1.0)
    answer = await tools.search(r"^row 1\b")
    assert "too expensive" not in answer and "every search worker was busy" in answer, answer
    assert search_pool.pool().workers == set()  # killed, replaced when next needed


async def test_warm_starts_the_workers_ahead_of_the_searches(refs):
    search_pool.warm()
    search_pool.warm()  # once is enough: no second set
    warming = search_pool.pool().warming
    assert warming is not None
    await warming
    await asyncio.sleep(0)
    pids = {w.pid for w in search_pool.pool().idle}
    assert len(pids) == search_pool.WORKERS and set(own_workers(zombies=False)) == pids
    tools = tools_for(refs, ["rows01"], timeout=1.0)
    assert "ref=rows01 line 1: row 1 " in await tools.search(r"^row 1\b")
    assert {w.pid for w in search_pool.pool().workers} == pids
    search_pool.warm()  # every worker started: nothing to do
    assert search_pool.pool().warming is None


async def test_many_large_counted_repeats_leave_no_memory_behind(refs):
    tools = tools_for(refs, ["needles"], timeout=30.0)  # each compiles in well under a second: loaded, in a few
    assert await tools.search("needle 3") == "ref=needles line 3: needle 3"
    before = rss()
    for i in range(12):  # each one different: in-process, regex's cache would keep every one (~14 MB each)
        assert (await tools.search(f"a{{{99_999 - i}}}")).startswith("No match")
    assert rss() - before < 100 * MB, (rss() - before) // MB


async def test_matches_found_before_a_runaway_match_are_returned(refs):
    """((?1)|a) ignores regex's timeout and grows until it runs out of memory or is killed at
    the deadline: the needles before it are kept either way, and the loop turns meanwhile (the
    match runs for the whole second of its deadline: held in-process, the loop would not turn)."""
    tools = tools_for(refs, ["mixed1"], timeout=1.0)
    task = asyncio.ensure_future(tools.search("needle|((?1)|a)"))
    assert await loop_turns_while(task) >= 3
    answer = task.result()
    assert answer.startswith("".join(f"ref=mixed1 line {i}: needle {i}\n" for i in range(5))), answer
    assert "Search stopped early" in answer and "5 match(es)" in answer


async def test_a_worker_that_does_not_answer_is_killed_at_the_deadline(refs):
    tools = tools_for(refs, ["needles", "hard01"], timeout=2.0)
    assert await tools.search("needle 0", "needles") == "ref=needles line 0: needle 0"  # the worker has started
    task = asyncio.ensure_future(tools.search("needle|(a|a)+$"))
    pid = await busy_worker(task)
    os.kill(pid, signal.SIGSTOP)  # as a match that never returns to check regex's timeout
    answer = await asyncio.wait_for(task, 60)  # (a hang guard: a stopped worker never answers by itself)
    assert answer.startswith("ref=needles line 0: needle 0\n") and "ref=needles line 4: needle 4" in answer
    assert re.search(r"Search stopped early after \d+\.\d s \(the search time limit of 2 s\); 5 match\(es\)", answer)
    assert pid not in [w.pid for w in search_pool.pool().workers]
    for _ in range(500):  # reaped in a thread: soon
        if pid not in own_workers():
            break
        await asyncio.sleep(0.01)
    assert pid not in own_workers()


async def busy_worker(task: asyncio.Future) -> int:
    """The worker running `task`'s search, once it has been matching for 0.1 s of CPU (after
    what it used before: starting, earlier searches)."""
    spent: dict[int, float] = {w.pid: cpu_seconds(w.pid) for w in search_pool.pool().idle}
    for _ in range(1000):
        await asyncio.sleep(0.01)
        assert not task.done()
        for pid in [w.pid for w in search_pool.pool().workers if w not in search_pool.pool().idle]:
            spent.setdefault(pid, 0.0)
            if cpu_seconds(pid) > spent[pid] + 0.1:
                return pid
    raise AssertionError("no busy worker")


async def test_a_worker_killed_mid_search_is_replaced(refs):
    tools = tools_for(refs, ["needles", "hard01"], timeout=30)
    assert await tools.search("needle 1", "needles") == "ref=needles line 1: needle 1"  # a started, idle worker:
    task = asyncio.ensure_future(tools.search("needle|(a|a)+$"))  # its start-up CPU is not mistaken for matching
    pid = await busy_worker(task)  # matching (a|a)+$ for a while: past the needles
    os.kill(pid, signal.SIGKILL)
    answer = await task  # the crash is the answer, not its 30 s deadline:
    assert "time limit" not in answer, answer
    assert answer.startswith("ref=needles line 0: needle 0\n") and "ref=needles line 4: needle 4" in answer
    assert "the pattern was too expensive" in answer and "crashed the search worker" in answer
    assert await tools.search("needle 2", "needles") == "ref=needles line 2: needle 2"
    assert pid not in own_workers() and [w.pid for w in search_pool.pool().workers] != [pid]


async def test_concurrent_searches_are_bounded_and_wait_within_their_deadline(refs):
    hogs = [
        asyncio.ensure_future(tools_for(refs, ["hard01"], timeout=3.0).search("(a|a)+$"))
        for _ in range(search_pool.WORKERS)
    ]
    for _ in range(1000):
        await asyncio.sleep(0.01)
        if len(search_pool.pool().workers) == search_pool.WORKERS and not search_pool.pool().idle:
            break
    waiting = [asyncio.ensure_future(tools_for(refs, ["needles"], timeout=0.5).search("needle")) for _ in range(4)]
    most = 0
    while not all(t.done() for t in waiting):
        most = max(most, len(own_workers(zombies=False)))
        await asyncio.sleep(0.01)
    assert not any(hog.done() for hog in hogs)  # they waited within their own 0.5 s, not for a worker
    assert most <= search_pool.WORKERS
    for task in waiting:
        answer = task.result()
        assert answer.startswith("No match for 'needle' so far.") and "every search worker was busy" in answer
    for answer in await asyncio.gather(*hogs):
        assert "Search stopped early" in answer and "time limit of 3 s" in answer
    # once free, the workers serve the next searches
    assert await tools_for(refs, ["needles"], timeout=1.0).search("needle 1") == "ref=needles line 1: needle 1"


async def test_shutdown_ends_every_worker_even_mid_search(refs):
    tools = tools_for(refs, ["hard01"], timeout=30)
    assert (await tools.search("zzz")).startswith("No match")
    task = asyncio.ensure_future(tools.search("(a|a)+$"))
    for _ in range(1000):
        await asyncio.sleep(0.01)
        if search_pool.pool().workers and not search_pool.pool().idle:
            break
    assert len(own_workers()) == 1
    await search_pool.shutdown()
    assert own_workers() == []
    answer = await task  # at once, not at its 30 s deadline:
    assert "interrupted" in answer and "time limit" not in answer, answer


async def test_large_items_are_prepared_off_the_loop(tmp_path, monkeypatch):
    """A 40 MB item: reloading a page and searching it leave the event loop free (the pages cut
    and the bytes for the worker made in the CPU pool's threads)."""
    pages = spy_threads(monkeypatch, ReloadTools, "_reload")
    chunks = spy_threads(monkeypatch, search, "prefix_chunks")
    store = SQLiteStore(tmp_path)
    refs = RefStore(store, "n" * 32, ttl=60)
    text = "".join(f"line {i} path=/src/mod{i % 97}.py status=ok value={i * 7}\n" for i in range(750_000))
    await refs.save([Offload("huge01", "tool_result", text, 10_000_000)], [])
    tools = ReloadTools(
        refs, COUNTER, max_tokens=500, request_refs=["huge01"], session=None, limits=SearchLimits(timeout=5.0)
    )
    item = await refs.load("huge01")  # loading (decompressing) is the store's part; here: what follows
    refs.load = lambda ref: _async(item)  # type: ignore[method-assign]
    page = await tools.reload("huge01")
    assert page.startswith("line 0 path=/src/mod0.py") and "offset=" in page.rsplit("\n", 1)[1]
    page = await tools.reload("huge01", 700_000, 2)
    assert page.startswith("line 700000 path=")
    answer = await tools.search(r"^line (1|500000|749999) ")  # 32 MiB: lines 0 to ~580000
    assert answer.startswith(
        "ref=huge01 line 1: line 1 path=/src/mod1.py status=ok value=7\nref=huge01 line 500000: line 500000 path="
    ), answer[:200]
    assert "749999" not in answer and "scans at most 33554432 bytes" in answer, answer[-300:]
    loop = threading.current_thread().name
    assert len(pages) == 2 and chunks and loop not in pages + chunks, (pages, chunks)
    await store.close()


async def _async(value):
    return value


async def test_prefix_chunks_cut_at_a_character_boundary():
    assert search.prefix_chunks("abc\ndef", 5) == ([b"abc\nd"], True)
    assert search.prefix_chunks("abc", 5) == ([b"abc"], False)
    chunks, more = search.prefix_chunks("é" * 10, 5)  # 2 bytes each: 2 characters fit
    assert b"".join(chunks).decode() == "éé" and more
    chunks, more = search.prefix_chunks("\udcff€x", 6)  # a lone surrogate passes through
    assert b"".join(chunks).decode("utf-8", "surrogatepass") == "\udcff€" and more
    assert search.prefix_chunks("é" * 4, 8) == (["é".encode() * 4], False)


async def test_lines_text_is_the_text_of_splitlines():
    from proxy.reload.search_worker import lines_text

    for text in ["a\r\nb\rc\n", "a\n\n", "x\x0by\x85z\u2028", "\n", "plain"]:
        assert lines_text(text, False) == ("\n".join(text.splitlines()), False), text
    assert lines_text("first\nsecond\nthi", True) == ("first\nsecond", True)  # the cut line is not searched
    assert lines_text("first\nsecond\r", True) == ("first\nsecond", False)
    assert lines_text("", False) == (None, False)  # no line at all: not even an empty one to match ^$
    assert lines_text("one long line cut", True) == (None, True)


async def test_a_worker_that_cannot_start_is_an_internal_error_not_the_patterns(refs, monkeypatch, caplog):
    monkeypatch.setattr(search_pool, "_BOOT", "raise SystemExit(5)")
    answer = await tools_for(refs, ["needles"], timeout=2.0).run("context_search", '{"pattern": "needle"}')
    assert answer.startswith("context_search failed with an internal error")
    assert "a search worker did not start" in caplog.text
    monkeypatch.undo()
    assert await tools_for(refs, ["needles"], timeout=2.0).search("needle 0") == "ref=needles line 0: needle 0"


async def test_a_line_cut_by_the_size_limit_is_not_searched(tmp_path):
    store = SQLiteStore(tmp_path)
    refs = RefStore(store, "n" * 32, ttl=60)
    await refs.save([Offload("long01", "tool_result", "x" * 5000 + "\nshort\n", 2000)], [])
    tools = ReloadTools(
        refs, COUNTER, max_tokens=500, request_refs=["long01"], session=None, limits=SearchLimits(max_bytes=1024)
    )
    for pattern in ("^$", "x", "short"):
        answer = await tools.search(pattern)
        assert answer.startswith(f"No match for {pattern!r} so far.") and "scans at most 1024 bytes" in answer
    await store.close()


async def test_the_search_limits_default_to_the_server_settings_defaults():
    fields = ServerSettings.model_fields
    assert SearchLimits() == SearchLimits(fields["search_timeout"].default, fields["search_max_bytes"].default)
    assert SearchLimits.of(ServerSettings(search_timeout=3.5)) == SearchLimits(3.5, fields["search_max_bytes"].default)
