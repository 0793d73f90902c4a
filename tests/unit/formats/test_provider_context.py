"""Each format reads the provider's context management of a request (`provider_context`), and a
compressed history keeps the provider's compaction item/block verbatim and in place."""

from __future__ import annotations

import copy

from proxy.core import compression as cp
from proxy.core.compaction import NONE, ProviderContext
from proxy.core.settings import OffloadSettings
from proxy.core.tokens import counter_for_model
from proxy.formats.chat import CHAT
from proxy.formats.messages import MESSAGES
from proxy.formats.responses import RESPONSES

COUNTER = counter_for_model("gpt-4o")


def test_responses_context_management_and_trigger():
    assert RESPONSES.provider_context({"input": "hi"}) is NONE
    body = {"input": "hi", "context_management": [{"type": "compaction", "compact_threshold": 200000}]}
    assert RESPONSES.provider_context(body) == ProviderContext(compacts=True)
    triggered = {"input": [{"role": "user", "content": "hi"}, {"type": "compaction_trigger"}]}
    assert RESPONSES.provider_context(triggered) == ProviderContext(compacts=True, trigger=True)
    for odd in (
        {"context_management": "compaction"},
        {"context_management": [{"type": "other"}]},
        {"context_management": [None, 3]},
        {"input": 5},
    ):
        assert RESPONSES.provider_context(odd) is NONE


def test_messages_context_management_edits():
    assert MESSAGES.provider_context({"messages": []}) is NONE
    thinking = {"context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}}
    assert MESSAGES.provider_context(thinking) is NONE  # thinking blocks: the proxy never alters them
    compact = {
        "context_management": {
            "edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 150000}}]
        }
    }
    assert MESSAGES.provider_context(compact) == ProviderContext(compacts=True)
    clear = {
        "context_management": {
            "edits": [
                {
                    "type": "clear_tool_uses_20250919",
                    "keep": {"type": "tool_uses", "value": 5},
                    "exclude_tools": ["web_search", 7],
                }
            ]
        }
    }
    assert MESSAGES.provider_context(clear) == ProviderContext(
        clears_tool_results=True, keep_tool_uses=5, exclude_tools=frozenset({"web_search"})
    )
    default = {"context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}}
    assert MESSAGES.provider_context(default).keep_tool_uses == 3
    for odd in (
        {"context_management": []},
        {"context_management": {"edits": "x"}},
        {"context_management": {"edits": [None]}},
    ):
        assert MESSAGES.provider_context(odd) is NONE


def test_chat_has_none():
    assert CHAT.provider_context({"messages": [], "context_management": [{"type": "compaction"}]}) is NONE


def test_messages_compression_keeps_the_compaction_block_message_in_place():
    block = {"type": "compaction", "content": "what happened so far", "encrypted_content": "opaque=="}
    old = [{"role": "user", "content": "word " * 400}, {"role": "assistant", "content": "ok " * 400}]
    compaction = {"role": "assistant", "content": [block, {"type": "text", "text": "continuing"}]}
    new = []
    for k in range(6):
        new += [
            {"role": "user", "content": f"question {k} " + "word " * 80},
            {"role": "assistant", "content": f"answer {k} " + "word " * 80},
        ]
    body = {
        "model": "claude",
        "messages": [*old, {"role": "user", "content": "go"}, compaction, *new, {"role": "user", "content": "last"}],
    }
    frozen = copy.deepcopy(body)
    items = MESSAGES.history(body)
    settings = OffloadSettings(max_total_tokens=300)
    d = cp.decide(items, MESSAGES.view, settings, counter=COUNTER, prior=None)
    assert d.action == "summarize" and d.head == 4  # after the message holding the block
    reduced = cp.assemble(items, MESSAGES.view, d.head, cut=d.cut, summary=MESSAGES.view.summary_item("S"))
    out = MESSAGES.with_history(body, reduced)["messages"]
    assert out[:4] == frozen["messages"][:4]  # the block's message and all before it: verbatim, in place
    assert out[4]["role"] == "user" and out[4]["content"][0]["text"] == "S"  # the summary opens the next user turn
    roles = [m["role"] for m in out]
    assert all(a != b for a, b in zip(roles, roles[1:]))  # roles still alternate
    assert body == frozen


def test_responses_compression_never_summarises_the_compaction_item():
    compaction = {"type": "compaction", "id": "cmp_9", "encrypted_content": "gAAAA" + "z" * 300}
    items = [
        {"role": "user", "content": "word " * 400},
        compaction,
        *({"role": "user", "content": f"m{k} " + "word " * 100} for k in range(8)),
        {"type": "compaction_trigger"},
    ]
    d = cp.decide(
        items, RESPONSES.view, OffloadSettings(max_total_tokens=300, keep_recent=0), counter=COUNTER, prior=None
    )
    assert d.action == "summarize" and d.head == 2 and d.cut == len(items) - 1
    reduced = cp.assemble(items, RESPONSES.view, d.head, cut=d.cut, summary=RESPONSES.view.summary_item("S"))
    assert reduced[:2] == items[:2] and reduced[-1] == {"type": "compaction_trigger"}
