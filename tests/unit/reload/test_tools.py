"""context_reload and context_search against a real store."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from proxy.core.compaction import Offload
from proxy.core.tokens import counter_for_model
from proxy.formats.chat._request import colliding_tool_names
from proxy.offload.records import RefStore
from proxy.reload import search as search_pool
from proxy.reload.search import SearchLimits, expansion
from proxy.reload.tools import BadArguments, ReloadTools, parse_arguments, segments
from proxy.store.sqlite import SQLiteStore
from tests.harness.inflight import loop_turns_while

pytestmark = pytest.mark.anyio
COUNTER = counter_for_model("gpt-4o")


@pytest.fixture(autouse=True)
def _search_workers_ended():
    yield
    search_pool.end_all()  # each test's event loop has search workers of its own


def test_segments_rebuild_the_text_exactly():
    text = "a\r\nb\n" + "x" * 5000 + "\nlast"
    assert "".join(segments(text)) == text
    assert max(len(s) for s in segments(text)) <= 2000


def test_segments_of_a_large_text_are_its_lines(monkeypatch):
    monkeypatch.setattr("proxy.reload.tools.BLOCK_CHARS", 64)  # many blocks, cut after a \n
    text = "".join(f"line {i}\r\n" if i % 3 else f"row {i}\u2028x\n" for i in range(200)) + "y" * 300 + "\rend"
    assert segments(text) == [*text.splitlines(keepends=True)[:-2], "y" * 300 + "\r", "end"]


@pytest.fixture
async def tools(tmp_path):
    store = SQLiteStore(tmp_path)
    refs = RefStore(store, "n" * 32, ttl=60)
    items = [
        Offload("small1", "tool_result", "alpha\nBeta line\ngamma", 5),
        Offload("large1", "tool_result", "".join(f"row {i} data\n" for i in range(3000)), 20000),
        Offload("crlf01", "tool_result", "first\r\nsecond line\r\nthird", 5),
    ]
    await refs.save(items, [], session="s1")
    yield ReloadTools(refs, COUNTER, max_tokens=500, request_refs=["small1"], session="s1")
    await store.close()


async def test_reload_small_is_exact(tools):
    assert await tools.reload("small1") == "alpha\nBeta line\ngamma"


async def test_reload_pages_cover_everything(tools):
    pages, offset = [], 0
    while True:
        page = await tools.reload("large1", offset)
        body, note = page.rsplit("\n", 1)
        pages.append(body)
        assert COUNTER.text(body) <= 500
        if "this is the end" in note:
            break
        offset = int(note.split("offset=")[1].rstrip(").]"))
    assert "".join(pages) == "".join(f"row {i} data\n" for i in range(3000))


async def test_reload_limit_and_bad_offset(tools):
    page = await tools.reload("large1", 10, 2)
    assert page.startswith("row 10 data\nrow 11 data\n\n[context_reload: lines 10-11 of 3000")
    assert "past the end" in await tools.reload("large1", 5000)
    assert "not available" in await tools.reload("nope")


async def test_search_scope_session_and_single_ref(tools):
    found = await tools.search("beta")
    assert found == "ref=small1 line 1: Beta line"
    assert "ref=large1 line 2999" in await tools.search(r"^row 2999\b")
    assert "No match" in await tools.search("zzz", "small1")
    assert "not available" in await tools.search("x", "nope")
    assert "Invalid regular expression" in await tools.search("(")
    many = await tools.search("row")
    assert "more exist" in many


async def test_run_parses_arguments(tools):
    assert await tools.run("context_reload", '{"ref": "small1"}') == "alpha\nBeta line\ngamma"
    assert "Invalid arguments" in await tools.run("context_reload", "{oops")


BAD_NUMBERS = [
    "Infinity",
    "-Infinity",
    "NaN",
    "1e999",
    "-1e999",
    "1" + "0" * 30,
    "-1",
    '"5"',
    "true",
    "[1]",
    "{}",
    "1.5",
    "1" + "0" * 5000,
]


@pytest.mark.parametrize("field", ["offset", "limit"])
@pytest.mark.parametrize("value", BAD_NUMBERS)
async def test_reload_with_bad_numbers_answers_the_model(tools, field, value):
    answer = await tools.run("context_reload", f'{{"ref": "large1", "{field}": {value}}}')
    assert answer.startswith("Invalid arguments for context_reload:"), answer
    assert field in answer or "JSON" in answer


async def test_bad_search_arguments_answer_the_model(tools):
    for arguments in (
        '{"pattern": 5}',
        '{"pattern": null}',
        '{"pattern": ["a"]}',
        "{}",
        "[]",
        '"x"',
        "5",
        '{"pattern": "a", "ref": 7}',
        '{"pattern": "a", "ref": {"x": 1}}',
        "[" * 100_000,
    ):
        answer = await tools.run("context_search", arguments)
        assert answer.startswith("Invalid arguments for context_search:"), (arguments[:20], answer)


def test_parse_arguments_accepts_what_the_schema_allows():
    assert parse_arguments("context_reload", '{"ref": "large1", "offset": 10, "limit": 2.0}') == {
        "ref": "large1",
        "offset": 10,
        "limit": 2,
    }
    assert parse_arguments("context_reload", {"ref": "large1"}) == {"ref": "large1", "offset": None, "limit": None}
    assert parse_arguments("context_search", '{"pattern": "x", "ref": ""}') == {"pattern": "x", "ref": None}
    with pytest.raises(BadArguments):
        parse_arguments("context_reload", '{"ref": "' + "r" * 500 + '"}')


async def test_search_matches_lines_as_before(tools):
    assert await tools.search("first$|^third", "crlf01") == "ref=crlf01 line 0: first\nref=crlf01 line 2: third"
    assert await tools.search(r"line\s+third", "crlf01") == "ref=crlf01 line 1: second line"  # spans: its first line
    assert "ref=large1 line 0: row 0 data" in await tools.search("", "large1")


async def test_search_stops_at_its_deadline_with_what_it_found(tmp_path):
    store = SQLiteStore(tmp_path)
    refs = RefStore(store, "n" * 32, ttl=60)
    needles = "".join(f"needle {i}\n" for i in range(5))
    hard = "".join("a" * 40 + "!\n" for _ in range(2000))  # (a|a)+$ backtracks exponentially on each line
    await refs.save([Offload("needles", "tool_result", needles, 10), Offload("hard01", "tool_result", hard, 9000)], [])
    tools = ReloadTools(
        refs,
        COUNTER,
        max_tokens=500,
        request_refs=["needles", "hard01"],
        session=None,
        limits=SearchLimits(timeout=0.5),
    )
    answer = await tools.run("context_search", '{"pattern": "needle|(a|a)+$"}')  # without the deadline: hours
    assert answer.startswith("ref=needles line 0: needle 0\n")
    assert "ref=needles line 4: needle 4" in answer
    assert "Search stopped early" in answer and "time limit of 0.5 s" in answer
    # the request's reload budget bounds a search too
    tools = ReloadTools(
        refs, COUNTER, max_tokens=500, request_refs=["hard01"], session=None, limits=SearchLimits(timeout=30)
    )
    answer = await tools.run("context_search", '{"pattern": "(a|a)+$"}', deadline=time.monotonic() + 0.3)
    assert answer.startswith("No match for '(a|a)+$' so far.") and "reload budget" in answer
    await store.close()


async def test_search_leaves_the_event_loop_free(tmp_path):
    store = SQLiteStore(tmp_path)
    refs = RefStore(store, "n" * 32, ttl=60)
    await refs.save([Offload("hard01", "tool_result", "".join("a" * 40 + "!\n" for _ in range(2000)), 9000)], [])
    tools = ReloadTools(
        refs, COUNTER, max_tokens=500, request_refs=["hard01"], session=None, limits=SearchLimits(timeout=1.0)
    )
    search = asyncio.ensure_future(tools.search("(a|a)+$"))
    # in-process, the match would hold the loop for the search's whole second: no turn meanwhile
    assert await loop_turns_while(search) >= 3
    assert "Search stopped early" in search.result()
    await store.close()


async def test_search_scans_at_most_max_bytes(tools):
    tools.limits = SearchLimits(max_bytes=1024)
    answer = await tools.search(r"^row (1|2999) ", "large1")
    assert answer.startswith("ref=large1 line 1: row 1 data\n")
    assert "2999" not in answer.split("[")[0] and "scans at most 1024 bytes" in answer


async def test_patterns_that_expand_too_far_are_refused_before_compiling(tools, monkeypatch):
    async def no_worker(*args, **kwargs):
        raise AssertionError("a worker was asked for: the pattern was not refused before compiling")

    monkeypatch.setattr(search_pool.Pool, "acquire", no_worker)
    answer = await tools.search("(?:a{1000}){1000}")
    assert answer.startswith("Invalid regular expression"), answer
    assert expansion("(a{10}){10}") == 100 and expansion(r"\{1000\}[{}]{2}x") < 20
    assert "Invalid regular expression" in await tools.search("x" * 1001)


def test_colliding_tool_names():
    def fn(name):
        return {"type": "function", "function": {"name": name, "parameters": {}}}

    assert colliding_tool_names({"tools": [fn("bash"), fn("context_search")]}) == ["context_search"]
    assert colliding_tool_names({"functions": [{"name": "context_reload"}], "tools": [fn("context_search")]}) == [
        "context_reload",
        "context_search",
    ]
    assert colliding_tool_names({"tools": [{"type": "custom", "custom": {"name": "context_reload"}}]}) == [
        "context_reload"
    ]
    assert colliding_tool_names({"tools": [{"type": "function", "name": "context_reload"}]}) == ["context_reload"]
    for body in (
        {},
        {"tools": None},
        {"tools": "context_search"},
        {"tools": {"name": "context_search"}},
        {"tools": [None, 5, "context_search", {"function": "context_search"}, {"function": {"name": 5}}]},
        {"functions": [["context_reload"]]},
        {"tools": [fn("bash")]},
        [],
        None,
    ):
        assert colliding_tool_names(body) == [], body


@pytest.mark.parametrize(
    "arguments",
    [
        "[" * 200_000 + "]" * 200_000,  # past the parser's recursion: RecursionError, not a crash
        '{"ref": ' + "[" * 40 + "]" * 40 + "}",  # parsed, but past MAX_ARGUMENT_DEPTH
        {"ref": json.loads("[" * 900 + "]" * 900)},  # an object the upstream sent (never written out, never repr'd)
    ],
)
def test_arguments_nested_too_deep_are_refused_as_such(arguments):
    with pytest.raises(BadArguments, match="arguments nest deeper than 32 levels"):
        parse_arguments("context_reload", arguments)


async def test_a_deep_call_is_answered_and_recorded_without_recursion(tools):
    deep = {"ref": json.loads("[" * 900 + "]" * 900)}
    told = await tools.run("context_reload", deep)
    assert told.startswith("Invalid arguments for context_reload: arguments nest deeper than 32 levels")
    assert tools.events[-1]["arguments"] == "(arguments nested too deeply to repeat here)"


async def test_an_image_ref_reloads_as_the_image_and_search_skips_it(tmp_path):
    from proxy.core import texts
    from proxy.core.media import Reloaded

    store = SQLiteStore(tmp_path)
    refs = RefStore(store, "n" * 32, ttl=60)
    url = "data:image/png;base64," + "iVBORw0KGgo" + "A" * 200_001  # a base64 payload past any page size
    await refs.save(
        [Offload("image1", "image", url, 1105), Offload("text01", "tool_result", "row needle\n", 3)], [], session="s1"
    )
    tools = ReloadTools(refs, COUNTER, max_tokens=500, request_refs=["image1", "text01"], session="s1")
    try:
        assert await tools.run("context_reload", '{"ref": "image1"}') == Reloaded("image1", "image", url)
        assert await tools.search("needle") == "ref=text01 line 0: row needle\n" + texts.media_skipped(1)
        assert await tools.search("A", "image1") == texts.media_not_searchable("image1", "image")
    finally:
        await store.close()
