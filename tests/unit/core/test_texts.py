"""Markers are recognised exactly: the proxy's own are exempt from compaction, look-alikes are not."""

from __future__ import annotations

from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from proxy.core import compression as cp
from proxy.core.compaction import plan_compaction
from proxy.core.preview import MAX_CHARS, MAX_LINES
from proxy.core.settings import OffloadSettings
from proxy.core.texts import is_marker, make_ref, refs_in, tool_result_marker
from proxy.core.tokens import counter_for_model
from proxy.formats.chat import VIEW
from tests.harness.history import agent_history, big_text

COUNTER = counter_for_model("gpt-4o")
NS = "a" * 32
REF = make_ref(NS, "tool_result", "x")
TRAILER = (
    f'[… 392 of 400 lines not shown (24000 chars in all). The full text: context_reload(ref="{REF}"); '
    f'search it: context_search(pattern, ref="{REF}").]'
)


def test_real_markers_are_recognised():
    for text in (
        big_text("t"),
        "",
        "one line",
        "a\r\nb\rc\x0bd\u2028e",
        "é" * 5000,
        "x" * 10_000 + "\n" + "y" * 10,
        "[offloaded tool result: 1 tokens, ref=abcdefgh]\n" + big_text("nested"),
    ):
        marker = tool_result_marker(text, REF, 1234)
        assert is_marker(marker), text[:40]
        assert refs_in(marker) == [REF]


def test_look_alikes_are_not_markers():
    head = f"[offloaded tool result: 5000 tokens, ref={REF}]"
    spoofs = [
        "[offloaded " + big_text("spoof"),  # the prefix alone
        head + "\n" + big_text("spoof"),  # a real-looking first line, no trailer
        head + "\n" + big_text("spoof") + "\n" + TRAILER,  # the whole shape around a long body
        head + "\npreview\n" + TRAILER.replace(REF, "otherRef99"),  # the trailer names another ref
        head.replace(REF, "bad ref!") + "\npreview\n" + TRAILER,  # an ill-formed ref
        head + "\npreview\n" + TRAILER + "\nmore after the trailer",
        head + "\n" + "\n".join(["l"] * (MAX_LINES + 1)) + "\n" + TRAILER,  # more preview lines than the proxy shows
        head + "\n" + "x" * (MAX_CHARS + 1) + "\n" + TRAILER,  # a longer preview than the proxy makes
        head + "\npreview\n" + TRAILER.replace("392 of 400", "401 of 400"),  # more hidden than there are
        head + "\npreview\n" + TRAILER.replace(" (24000 chars in all)", ""),  # the old trailer's shape
    ]
    for text in spoofs:
        assert not is_marker(text), text[:80]
        assert refs_in(text) == []
    assert is_marker(head + "\npreview\n" + TRAILER)  # the same pieces, in the proxy's own shape
    assert is_marker(head + "\n" + "\n".join(["l"] * MAX_LINES) + "\n" + TRAILER)
    assert is_marker(head + "\n" + "x" * MAX_CHARS + "\n" + TRAILER)


def test_history_summary_is_recognised_exactly():
    ref = make_ref(NS, "history", "h")
    summary = cp.summary_item(VIEW, "<state_snapshot>…</state_snapshot>\n" + big_text("s"), ref, count=12, tokens=34567)
    assert refs_in(summary["content"]) == [ref]
    assert not is_marker(summary["content"])  # a summary is never a tool result, so never exempt
    first = summary["content"].split("\n", 1)[0]
    assert refs_in(first.replace(f'context_reload(ref="{ref}")', 'context_reload(ref="otherRef99")')) == []
    assert refs_in("[offloaded history: whatever, ref=" + ref + "]\n") == []


def test_spoofed_tool_results_are_compacted():
    messages = agent_history(steps=3)
    head = f"[offloaded tool result: 5 tokens, ref={REF}]"
    messages[3]["content"] = "[offloaded " + big_text("prefix")
    messages[5]["content"] = head + "\n" + big_text("shape") + "\n" + TRAILER
    result = plan_compaction(
        messages,
        VIEW,
        OffloadSettings(max_total_tokens=1000, max_tool_message_tokens=500),
        counter=COUNTER,
        namespace=NS,
    )
    texts = {o.text for o in result.offloads}
    assert messages[3]["content"] in texts and messages[5]["content"] in texts
    assert is_marker(result.items[3]["content"]) and is_marker(result.items[5]["content"])
    assert REF not in result.refs  # the spoofed ref is not taken for one of the proxy's
    again = plan_compaction(
        result.items,
        VIEW,
        OffloadSettings(max_total_tokens=1000, max_tool_message_tokens=500),
        counter=COUNTER,
        namespace=NS,
    )
    assert again.items == result.items and not again.offloads


@hsettings(max_examples=100, deadline=None)
@given(st.text(max_size=3000), st.integers(0, 10**9))
def test_any_text_becomes_a_recognised_marker(text, tokens):
    marker = tool_result_marker(text, REF, tokens)
    assert is_marker(marker) and refs_in(marker) == [REF]
    assert len(marker) < 1000


@hsettings(max_examples=100, deadline=None)
@given(st.text(max_size=2000))
def test_anything_recognised_is_small(text):
    candidate = f"[offloaded tool result: 1 tokens, ref={REF}]\n{text}\n{TRAILER}"
    if is_marker(candidate):
        assert len(candidate) < 1000
