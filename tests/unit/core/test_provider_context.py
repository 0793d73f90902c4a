"""The providers' own context management in the pure planners: a provider compaction item is
opaque, what precedes it is neither counted nor summarised, cuts fall after it, a
compaction_trigger stays last, and compaction leaves to a clear edit what it may clear."""

from __future__ import annotations

import copy

from proxy.core import compression as cp
from proxy.core.compaction import plan_compaction
from proxy.core.markers import is_marker
from proxy.core.provider_context import (
    CLIENT_SUMMARY_PREFIXES,
    ProviderContext,
    clearable_calls,
    client_summary_end,
    live_start,
    trigger_index,
)
from proxy.core.settings import OffloadSettings
from proxy.core.tokens import counter_for_model
from proxy.formats.chat import VIEW as CHAT_VIEW
from proxy.formats.messages import MESSAGES
from proxy.formats.responses import RESPONSES

COUNTER = counter_for_model("gpt-4o")
NS = "a" * 32
RV = RESPONSES.view
MV = MESSAGES.view
COMPACTION = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAB" + "Q" * 400}


def user(text):
    return {"role": "user", "content": text}


def call(i, name="exec"):
    return {"type": "function_call", "call_id": f"c{i}", "name": name, "arguments": "{}"}


def output(i, text):
    return {"type": "function_call_output", "call_id": f"c{i}", "output": text}


def big(n=3000):
    return "\n".join(f"line {k} of a long tool output" for k in range(n // 6))


def test_views_mark_provider_compaction_items():
    assert RV.is_provider_compaction(COMPACTION)
    assert not RV.is_provider_compaction(user("x")) and not RV.is_provider_compaction(call(1))
    assert RV.is_compaction_trigger({"type": "compaction_trigger"})
    assert not RV.is_compaction_trigger(COMPACTION)
    block = {"type": "compaction", "content": "summary", "encrypted_content": "opaque"}
    assert MV.is_provider_compaction({"role": "assistant", "content": [block, {"type": "text", "text": "go on"}]})
    assert not MV.is_provider_compaction({"role": "assistant", "content": "compaction"})
    assert not MV.is_provider_compaction({"role": "user", "content": [{"type": "text", "text": "compaction"}]})
    assert not CHAT_VIEW.is_provider_compaction({"role": "user", "content": "compaction"})


def test_live_start_is_after_the_newest_compaction_item():
    items = [user("a"), COMPACTION, user("b"), dict(COMPACTION, id="cmp_2"), user("c")]
    assert live_start(items, RV) == 4
    assert live_start([user("a")], RV) == 0
    assert trigger_index([user("a"), {"type": "compaction_trigger"}], RV) == 1
    assert trigger_index([user("a")], RV) is None


def test_split_starts_after_the_newest_compaction_item():
    items = [
        {"role": "developer", "content": "d"},
        user("old " * 50),
        COMPACTION,
        {"role": "developer", "content": "d2"},
        *(user(f"new {k}") for k in range(6)),
    ]
    head, tail = cp.split(items, RV, keep_recent=2)
    assert head == 4 and tail == len(items) - 2  # the compaction item and what precedes it are the kept head


def test_compaction_trigger_stays_in_the_tail_even_with_no_kept_tail():
    items = [*(user(f"m {k}") for k in range(5)), {"type": "compaction_trigger"}]
    assert cp.split(items, RV, keep_recent=0) == (1, 5)  # the first user message is the task: never summarised


def test_items_before_the_compaction_never_count_nor_go_into_a_summary():
    old = [user("word " * 300) for _ in range(10)]  # far above the trigger, but ignored by the provider
    new = [user(f"new {k}") for k in range(4)]
    items = [*old, COMPACTION, *new]
    settings = OffloadSettings(max_total_tokens=500)
    assert cp.decide(items, RV, settings, counter=COUNTER, prior=None).action == "none"
    assert cp.decide(old + new, RV, settings, counter=COUNTER, prior=None).action == "summarize"  # the same without it
    newer = [*items, *(user("word " * 100) for _ in range(8))]
    d = cp.decide(newer, RV, settings, counter=COUNTER, prior=None)
    assert d.action == "summarize" and d.head == len(old) + 1  # the summarised part starts after it
    assembled = cp.assemble(newer, RV, d.head, cut=d.cut, summary=RV.summary_item("S"))
    assert assembled[: len(old) + 1] == [*old, COMPACTION]  # kept verbatim, in place


def test_compaction_ignores_what_precedes_the_compaction_item():
    old = [call(1), output(1, big()), user("u")]
    items = [*old, COMPACTION, user("new"), call(2), output(2, big()), user("last")]
    frozen = copy.deepcopy(items)
    plan = plan_compaction(
        items, RV, OffloadSettings(max_total_tokens=1000, max_tool_message_tokens=100), counter=COUNTER, namespace=NS
    )
    assert plan.items[:4] == frozen[:4]  # the old output is not compacted: the provider ignores it
    assert is_marker(plan.items[6]["output"]) and len(plan.offloads) == 1
    assert plan.tokens_before == COUNTER.messages(frozen)  # the headers still count what is forwarded
    # the trigger counts only what follows the compaction item
    small_after = [*old, COMPACTION, user("new")]
    quiet = plan_compaction(
        small_after,
        RV,
        OffloadSettings(max_total_tokens=1000, max_tool_message_tokens=100),
        counter=COUNTER,
        namespace=NS,
    )
    assert quiet.items == small_after and not quiet.offloads


def test_clearable_calls_spare_the_recent_and_the_excluded():
    items = [call(1), output(1, "a"), call(2, "read"), output(2, "b"), call(3), output(3, "c"), call(4), output(4, "d")]
    ctx = ProviderContext(clears_tool_results=True, keep_tool_uses=2, exclude_tools=frozenset({"read"}))
    assert clearable_calls(items, RV, ctx) == {"c1"}
    assert clearable_calls(items, RV, ProviderContext()) == set()
    assert clearable_calls(items, RV, ProviderContext(clears_tool_results=True, keep_tool_uses=0)) == {
        "c1",
        "c2",
        "c3",
        "c4",
    }


def test_compaction_leaves_to_the_clear_edit_what_it_may_clear():
    items = [
        user("go"),
        call(1),
        output(1, big()),
        call(2, "read"),
        output(2, big()),
        call(3),
        output(3, big()),
        call(4),
        output(4, big()),
        user("last"),
    ]
    settings = OffloadSettings(max_total_tokens=1000, max_tool_message_tokens=100)
    ctx = ProviderContext(clears_tool_results=True, keep_tool_uses=2, exclude_tools=frozenset({"read"}))
    plan = plan_compaction(items, RV, settings, counter=COUNTER, namespace=NS, provider=ctx)
    compacted = {
        i
        for i, item in enumerate(plan.items)
        if item.get("type") == "function_call_output" and is_marker(item["output"])
    }
    assert compacted == {4, 6, 8}  # c2 (excluded), c3 and c4 (the 2 kept); c1 is the provider's to clear
    assert (
        len(plan_compaction(items, RV, settings, counter=COUNTER, namespace=NS).offloads) == 4
    )  # without the edit: all


# Codex CLI's local compaction: the summary user message it builds (codex-rs/core/templates/compact/summary_prefix.md)
CODEX_SUMMARY = (
    CLIENT_SUMMARY_PREFIXES[0] + " You also have access to the state of the tools that were used by "
    "that language model. [...] use the information in this summary to assist with your own analysis:\n"
    "steps 1-3 done"
)


def codex_summary(view_kind="responses"):
    if view_kind == "chat":
        return user(CODEX_SUMMARY)
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": CODEX_SUMMARY}]}


def test_client_summary_end_is_after_the_newest_client_summary():
    first, second = codex_summary(), codex_summary()
    items = [user("task"), first, call(1), output(1, "x"), second, user("go on")]
    assert client_summary_end(items, RV) == 5  # the newest one
    assert client_summary_end(items[:4], RV) == 2
    assert client_summary_end([user("task"), call(1)], RV) == 0
    assert client_summary_end([user("task"), call(1)], RV, start=1) == 1
    assert client_summary_end([user("a"), user(CODEX_SUMMARY)], CHAT_VIEW) == 2
    assert client_summary_end([{"role": "user", "content": [{"type": "text", "text": CODEX_SUMMARY}]}], MV) == 1
    # only a user message: the same text from the model, or inside a tool result, is no boundary
    said = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": CODEX_SUMMARY}]}
    assert client_summary_end([user("task"), said, call(1), output(1, CODEX_SUMMARY)], RV) == 0
    # nor a user message that merely quotes it later on
    assert client_summary_end([user("task"), user("see: " + CODEX_SUMMARY)], RV) == 0


def test_claude_codes_compaction_summary_is_a_boundary_too():
    claude = {
        "role": "user",
        "content": [
            {
                "type": "text",
                "text": CLIENT_SUMMARY_PREFIXES[1] + " The summary below "
                "covers the earlier portion of the conversation.\n\nSummary: ...",
            }
        ],
    }
    items = [{"role": "user", "content": "task"}, claude, {"role": "user", "content": "go on"}]
    assert client_summary_end(items, MV) == 2


def test_no_summary_folds_a_client_summary_with_what_follows_it():
    """After Codex compacted, its history is [instructions, context, recent user messages, the
    summary, new work]: the proxy summarises only the new work, the rest stays verbatim, in place."""
    kept = [
        {"role": "developer", "content": "d"},
        user("<environment_context/>"),
        user("Run six steps."),
        codex_summary(),
    ]
    work = [x for k in range(4, 12) for x in (call(k), output(k, "word " * 120))]
    items = [*kept, *work]
    head, tail = cp.split(items, RV, keep_recent=2)
    assert head == len(kept) and tail == len(items) - 2
    d = cp.decide(items, RV, OffloadSettings(max_total_tokens=500), counter=COUNTER, prior=None)
    assert d.action == "summarize" and d.head == len(kept)
    assembled = cp.assemble(items, RV, d.head, cut=d.cut, summary=RV.summary_item("S"))
    assert assembled[: len(kept)] == kept and assembled[len(kept)] == RV.summary_item("S")
    # without the client summary the same history is summarised from after the task (its first user message)
    plain = [*kept[:3], *work]
    assert cp.decide(plain, RV, OffloadSettings(max_total_tokens=500), counter=COUNTER, prior=None).head == 2
    # and nothing is summarised while the work after the client summary stays small
    assert (
        cp.decide([*kept, *work[:2]], RV, OffloadSettings(max_total_tokens=500), counter=COUNTER, prior=None).action
        == "none"
    )


def test_a_provider_compaction_item_after_a_client_summary_wins():
    items = [user("task"), codex_summary(), user("a"), COMPACTION, *(user(f"new {k}") for k in range(6))]
    assert cp.split(items, RV, keep_recent=2) == (4, len(items) - 2)
    items = [user("task"), COMPACTION, user("a"), codex_summary(), *(user(f"new {k}") for k in range(6))]
    assert cp.split(items, RV, keep_recent=2) == (4, len(items) - 2)
