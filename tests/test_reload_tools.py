"""context_reload and context_search against a real store."""

from __future__ import annotations

import pytest

from proxy.plan import Offload
from proxy.refs import RefStore
from proxy.reload_tools import ReloadTools, segments
from proxy.store.sqlite import SQLiteStore
from proxy.tokens import counter_for_model

pytestmark = pytest.mark.anyio
COUNTER = counter_for_model("gpt-4o")


def test_segments_rebuild_the_text_exactly():
    text = "a\r\nb\n" + "x" * 5000 + "\nlast"
    assert "".join(segments(text)) == text
    assert max(len(s) for s in segments(text)) <= 2000


@pytest.fixture
async def tools(tmp_path):
    store = SQLiteStore(tmp_path)
    refs = RefStore(store, "n" * 32, ttl=60)
    items = [Offload("small1", "tool_result", "alpha\nBeta line\ngamma", 5),
             Offload("large1", "tool_result", "".join(f"row {i} data\n" for i in range(3000)), 20000)]
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
