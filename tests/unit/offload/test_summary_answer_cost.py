"""Reading a summary answer: the snapshot block is found in linear time (summarizer.snapshot_in).

A lazy regex (`<state_snapshot>.*?</state_snapshot>`, re.S) is quadratic when the answer opens
the tag many times and never closes it: 16 s for 256 KB, on the event loop, for an answer the
model (steerable by the history it summarises) or an upstream the caller names writes. The
linear search must find exactly what the regex found."""

from __future__ import annotations

import re

import httpx2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.formats.chat._request import summary_answer
from proxy.offload.summarizer import SummaryFailed, snapshot_in, summarize_prefix

pytestmark = pytest.mark.anyio
LAZY = re.compile(r"<state_snapshot>.*?</state_snapshot>", re.S)


class Canned:
    def __init__(self, content: str) -> None:
        self.content = content

    async def send(self, method, path, *, headers, content=None, base=None, query=b"", record=None):
        body = {"choices": [{"message": {"role": "assistant", "content": self.content}}], "usage": {}}
        return httpx2.Response(200, json=body)


async def test_an_answer_of_unclosed_snapshot_tags_is_refused():
    with pytest.raises(SummaryFailed):
        await summarize_prefix(
            Canned("<state_snapshot>" * 16_000), [], ("chat/completions", {}), read=summary_answer, timeout=30
        )
    made = await summarize_prefix(
        Canned("x <state_snapshot>a</state_snapshot> y"), [], ("chat/completions", {}), read=summary_answer, timeout=30
    )
    assert made.text == "<state_snapshot>a</state_snapshot>"


pieces = st.sampled_from(["<state_snapshot>", "</state_snapshot>", "<state_", "snapshot>", "a", "\n", "</"])


@given(st.lists(pieces, max_size=12).map("".join))
def test_the_linear_search_finds_what_the_regex_found(text):
    match = LAZY.search(text)
    assert snapshot_in(text) == (match.group(0) if match else None)
