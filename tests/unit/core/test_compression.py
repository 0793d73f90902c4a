"""proxy.core.compression: what to summarise, summaries started ahead of time, a client's own
compaction."""

from __future__ import annotations

import json

import pytest

from proxy.core import compression
from proxy.core import compression as cc
from proxy.core import compression as cp
from proxy.core.settings import OffloadSettings
from proxy.core.tokens import counter_for_model
from proxy.formats.chat import VIEW
from proxy.formats.chat import VIEW as CHAT
from proxy.formats.messages import MESSAGES
from proxy.formats.messages import history as messages_history
from proxy.formats.responses import RESPONSES

# ==================== compression
# The pure compression planner: split, pairing, groups, decisions, assembly.

COUNTER = counter_for_model("gpt-4o")


def call(i, n=1):
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"c{i}_{k}", "type": "function", "function": {"name": "f", "arguments": "{}"}} for k in range(n)
        ],
    }


def result(i, k=0, text="x"):
    return {"role": "tool", "tool_call_id": f"c{i}_{k}", "content": text}


def test_split_keeps_pairs_together():
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        call(1),
        result(1),
        call(2, 3),
        result(2, 0),
        result(2, 1),
        result(2, 2),
    ]
    head, tail = cp.split(msgs, VIEW, keep_recent=2)
    assert head == 2 and tail == 4  # the head holds the task; the tail starts at the assistant message of call 2
    assert cp.split(msgs, VIEW, keep_recent=1) == (2, 4)
    assert cp.split(msgs, VIEW, keep_recent=4) == (2, 4)
    assert cp.split(msgs, VIEW, keep_recent=5) == (2, 2)


def test_split_with_no_tail():
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, call(1), result(1)]
    assert cp.split(msgs, VIEW, keep_recent=0) == (2, 4)
    assert cp.split([None], VIEW, keep_recent=0) == (0, 1)


def test_split_tiny_empty_and_all_system():
    assert cp.split([], VIEW, 2) == (0, 0)
    assert cp.split([{"role": "user", "content": "hi"}], VIEW, 2) == (1, 1)  # the task alone
    assert cp.split([{"role": "system", "content": "a"}, {"role": "developer", "content": "b"}], VIEW, 2) == (2, 2)


def test_decide_triggers_only_above_threshold():
    msgs = [{"role": "system", "content": "s"}] + [{"role": "assistant", "content": "word " * 100} for _ in range(10)]
    settings = OffloadSettings(max_total_tokens=500)
    d = cp.decide(msgs, VIEW, settings, counter=COUNTER, prior=None)
    assert (d.action, d.head, d.cut, d.new_items) == ("summarize", 1, 9, (1, 9))
    assert (
        cp.decide(msgs, VIEW, OffloadSettings(max_total_tokens=100_000), counter=COUNTER, prior=None).action == "none"
    )


def test_decide_reuses_prior_until_the_rest_grows_past_the_trigger():
    msgs = [{"role": "system", "content": "s"}] + [{"role": "user", "content": "word " * 100} for _ in range(10)]
    prior = cp.PriorSummary(cut=7, text="<state_snapshot/>", ref="r", tokens=3, message={})
    settings = OffloadSettings(max_total_tokens=500)
    assert cp.decide(msgs, VIEW, settings, counter=COUNTER, prior=prior).action == "reuse"  # 2 messages after the cut
    longer = msgs + [{"role": "user", "content": "word " * 100} for _ in range(8)]
    d = cp.decide(longer, VIEW, settings, counter=COUNTER, prior=prior)
    assert d.action == "summarize" and d.new_items == (7, d.cut) and d.prior is prior


def test_system_messages_do_not_count_and_stay_verbatim():
    sys_mid = {"role": "system", "content": "mid " * 1000}
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "assistant", "content": "u"},
        sys_mid,
        {"role": "assistant", "content": "v"},
        {"role": "assistant", "content": "w"},
        {"role": "assistant", "content": "z"},
    ]
    assert cp.decide(msgs, VIEW, OffloadSettings(max_total_tokens=50), counter=COUNTER, prior=None).action == "none"
    summary = cp.summary_item(VIEW, "S", "ref1", count=2, tokens=10)
    out = cp.assemble(msgs, VIEW, 1, cut=4, summary=summary)
    assert out == [msgs[0], summary, sys_mid, msgs[4], msgs[5]]


def test_the_task_is_never_summarised_and_the_summary_follows_it():
    task = {"role": "user", "content": "Fix the bug in astropy/io/fits/card.py " + "detail " * 300}
    msgs = [{"role": "system", "content": "s"}, task] + [
        m for i in range(6) for m in (call(i), result(i, 0, "r " * 200))
    ]
    d = cp.decide(msgs, VIEW, OffloadSettings(max_total_tokens=300), counter=COUNTER, prior=None)
    assert d.action == "summarize" and d.head == 2 and d.new_items[0] == 2  # the task is in the head
    summary = cp.summary_item(VIEW, "S", "ref1", count=3, tokens=10)
    out = cp.assemble(msgs, VIEW, d.head, cut=d.cut, summary=summary)
    assert out[:3] == [msgs[0], task, summary] and out[3:] == msgs[d.cut :]
    # however long, the task alone is never summarised
    long_task = [{"role": "system", "content": "s"}, {"role": "user", "content": "word " * 5000}, call(1), result(1)]
    assert (
        cp.decide(long_task, VIEW, OffloadSettings(max_total_tokens=100), counter=COUNTER, prior=None).action == "none"
    )
    # a history that starts with no user message pins nothing
    assert cp.split([{"role": "system", "content": "s"}, call(1), result(1), call(2), result(2)], VIEW, 2) == (1, 3)


def test_the_task_counts_against_the_trigger_down_to_half_of_it():
    settings = OffloadSettings(max_total_tokens=1000)
    short = [{"role": "system", "content": "s " * 500}, {"role": "user", "content": "word " * 100}, call(1)]
    task_tokens = COUNTER.message(short[1])
    assert (
        cp.trigger(short, VIEW, 2, settings=settings, counter=COUNTER) == 1000 - task_tokens
    )  # the system message does not count
    long = [{"role": "system", "content": "s"}, {"role": "user", "content": "word " * 5000}, call(1)]
    assert cp.trigger(long, VIEW, 2, settings=settings, counter=COUNTER) == 500

    # a window that fits the trigger alone but not beside the task is summarised: the results are
    # padded until it no longer fits beside the task by the counter in use (tiktoken or the estimate)
    def padded(words: int) -> list:
        return short + [result(1, 0, "r " * words), call(2), result(2, 0, "r " * words), call(3), result(3)]

    assert cp.split(padded(1), VIEW, cp.COMPRESS_KEEP_RECENT) == (2, 6)  # the window: call(1) to result(2)
    msgs = next(
        m
        for m in map(padded, range(1, 2000))
        if cp.tokens_between(m, VIEW, 2, end=6, counter=COUNTER) + task_tokens > 1000
    )
    window = cp.tokens_between(msgs, VIEW, 2, end=6, counter=COUNTER)
    assert window <= 1000 < window + task_tokens
    assert cp.decide(msgs, VIEW, settings, counter=COUNTER, prior=None).action == "summarize"


def test_later_user_messages_stay_verbatim_most_recent_first_up_to_the_budget():
    def user(n, size=10):
        return {"role": "user", "content": f"u{n} " + "x" * size}

    big = cp.USER_KEEP_CHARS // 2
    msgs = [
        {"role": "system", "content": "s"},
        user(0),
        call(1),
        result(1),
        user(1, big),
        call(2),
        result(2),
        user(2, big),
        call(3),
        result(3),
        user(3),
        call(4),
        result(4),
        user(4),
    ]
    summary = cp.summary_item(VIEW, "S", "ref1", count=9, tokens=10)
    assert cp.kept_users(msgs, VIEW, 2, cut=12) == {10, 7}  # user(3), then user(2); user(1) no longer fits
    out = cp.assemble(msgs, VIEW, 2, cut=12, summary=summary)
    assert out == [msgs[0], msgs[1], summary, msgs[7], msgs[10], *msgs[12:]]
    # a pure function of the summarised range: the same range, the same bytes, whatever follows it
    longer = msgs + [call(5), result(5), user(5)]
    assert json.dumps(cp.assemble(longer, VIEW, 2, cut=12, summary=summary)[:5]) == json.dumps(out[:5])
    # the budget stops at the first message that does not fit: the kept ones are the most recent
    assert cp.kept_users(msgs, VIEW, 2, cut=9) == {7}


def test_an_earlier_summary_in_the_range_is_summarised_not_kept():
    earlier = cp.summary_item(
        VIEW, "older summary", "refOld12", count=5, tokens=100
    )  # a user message, e.g. a token's record
    later = {"role": "user", "content": "later"}
    msgs = [{"role": "user", "content": "task"}, earlier, later, call(1), result(1)]
    assert cp.kept_users(msgs, VIEW, 1, cut=5) == {2}
    summary = cp.summary_item(VIEW, "S", "refNew12", count=4, tokens=10)
    assert cp.assemble(msgs, VIEW, 1, cut=5, summary=summary) == [msgs[0], summary, later]


def test_groups_respect_threshold_and_pairs():
    msgs = [
        {"role": "user", "content": "word " * 50},
        call(1, 2),
        result(1, 0, "r " * 50),
        result(1, 1, "r " * 50),
        {"role": "user", "content": "word " * 50},
    ]
    spans = cp.groups(msgs, VIEW, 0, end=5, threshold=80, counter=COUNTER)
    assert spans[0] == (0, 1) and spans[-1][1] == 5
    for start, end in spans:
        assert VIEW.role(msgs[start]) != "tool"  # a group never begins inside a call's results
    assert cp.groups(msgs, VIEW, 0, end=5, threshold=0, counter=COUNTER) == [(0, 5)]
    assert cp.groups(msgs, VIEW, 2, end=2, threshold=0, counter=COUNTER) == []


def test_groups_never_make_more_summary_calls_than_the_cap():
    words = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"word{i}"} for i in range(2000)]
    spans = cp.groups(
        words, VIEW, 0, end=2000, threshold=1, counter=COUNTER
    )  # a threshold of 1 token: one group per message asked
    assert len(spans) == 8, len(spans)  # compress_plan.MAX_GROUPS, not 2,000
    assert spans[0][0] == 0 and spans[-1][1] == 2000
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # contiguous, in order, nothing left out
    sizes = [sum(COUNTER.message(m) for m in words[a:b]) for a, b in spans]
    assert max(sizes) - min(sizes) <= 2 * max(COUNTER.message(m) for m in words)  # alike units: even groups

    # pairs still never split, and a unit bigger than the grown threshold is a group of its own
    msgs = [{"role": "user", "content": "u"}]
    for i in range(30):
        msgs += [call(i, 3), result(i, 0), result(i, 1), result(i, 2, "big " * (400 if i == 7 else 1))]
    spans = cp.groups(msgs, VIEW, 0, end=len(msgs), threshold=1, counter=COUNTER)
    assert len(spans) <= cp.MAX_GROUPS == 8 and spans[-1][1] == len(msgs)
    assert all(VIEW.role(msgs[a]) != "tool" for a, _ in spans)

    # under the cap, the threshold is kept as asked
    few = words[:6]
    assert cp.groups(few, VIEW, 0, end=6, threshold=1, counter=COUNTER) == [(i, i + 1) for i in range(6)]


def test_chain_hashes_identify_prefixes():
    a = [{"role": "user", "content": "1"}, {"role": "user", "content": "2"}]
    b = [{"role": "user", "content": "1"}, {"role": "user", "content": "3"}]
    ha, hb = cp.PrefixHashes(a), cp.PrefixHashes(b)
    assert hb[2] != ha[2] and ha[1] == hb[1] and ha[0] == hb[0]
    assert cp.PrefixHashes(a)[2] == ha[2]  # the same prefix, the same hash, in any order of asking


def test_history_lines_are_json_per_message():
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "a\nb"}, call(1)]
    lines = cp.history_lines(msgs, VIEW).splitlines()
    assert [json.loads(line) for line in lines] == msgs[1:]


# ==================== client compaction
# Recognising a client's own compaction request, and the thresholds its turn gets.

CLAUDE = (
    "Your task is to create a detailed summary of the conversation so far, paying close attention to the "
    "user's explicit requests and your previous actions."
)
CODEX = "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for another LLM."
EARLIER = [{"role": "user", "content": "fix the bug"}, {"role": "assistant", "content": "done"}]


def test_claude_code_in_the_messages_format_even_after_a_reminder():
    body = {
        "messages": [
            *EARLIER,
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>files changed</system-reminder>"},
                    {"type": "text", "text": CLAUDE.replace(" ", "\n  ", 3)},
                ],
            },
        ]
    }
    assert cc.asked(messages_history(body), MESSAGES.view) == "claude-code"


def test_codex_in_the_responses_format():
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": CODEX.lower()}]},
    ]
    assert cc.asked(items, RESPONSES.view) == "codex"


@pytest.mark.parametrize(
    "messages",
    [
        [*EARLIER, {"role": "user", "content": "what is next?"}],
        [{"role": "user", "content": CLAUDE}, {"role": "assistant", "content": "<summary>…</summary>"}],  # answered
        [*EARLIER, {"role": "user", "content": CLAUDE + "x" * 50_000}],  # past what is read
        [],
        [{"role": "user", "content": None}],
        [{"role": "user", "content": [{"type": "image_url"}]}],
    ],
)
def test_anything_else_is_not_a_compaction(messages):
    assert cc.asked(messages, CHAT) is None


def test_claude_code_after_a_tool_round_in_one_user_message():
    """What Claude Code 2.x sends for `/compact` after a Bash call (seen through the proxy)."""
    body = {
        "messages": [
            *EARLIER,
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "cat notes.txt"}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "note\n" * 5000},
                    {"type": "text", "text": "CRITICAL: Respond with TEXT ONLY.\n\n" + CLAUDE},
                ],
            },
        ]
    }
    assert cc.asked(messages_history(body), MESSAGES.view) == "claude-code"


def test_only_the_last_items_are_looked_at():
    many = [*EARLIER, {"role": "user", "content": CLAUDE}, *({"role": "user", "content": "more"} for _ in range(8))]
    assert cc.asked(many, CHAT) is None
    assert cc.asked(many[:-1], CHAT) == "claude-code"


def test_the_window_becomes_every_threshold():
    settings = OffloadSettings()
    got = cc.settings_for(settings, model="claude-sonnet-4-5", output=32_000)
    budget = int(200_000 * cc.FILL)  # the output fits in the rest
    assert cc.settings_for(settings, model="claude-sonnet-4-5", output=128_000).max_total_tokens == 72_000
    assert (got.max_total_tokens, got.hard_max_tokens) == (budget,) * 2
    assert got.precompress_ratio == 0 and got.mode == settings.mode
    # what a result must reach to be compacted once the history is past the trigger: unchanged
    assert (got.tool_result_limit(), got.max_fresh_tool_message_tokens) == (
        settings.tool_result_limit(),
        settings.max_fresh_tool_message_tokens,
    )
    unknown = cc.settings_for(settings, model="my-local-model", output=16_000)
    assert unknown.max_total_tokens == int(cc.DEFAULT_WINDOW * cc.FILL)
    tiny = cc.settings_for(settings, model="gpt-3.5-turbo", output=16_000)  # never below the proxy's own trigger
    assert tiny.max_total_tokens == settings.max_total_tokens


@pytest.mark.parametrize("mode", ["off", "observe"])
def test_a_mode_that_offloads_nothing_is_left_alone(mode):
    settings = OffloadSettings(mode=mode)
    assert cc.settings_for(settings, model="gpt-4o", output=1000) is settings


@pytest.mark.parametrize(
    "body, output",
    [
        ({"max_tokens": 20_000}, 20_000),
        ({"max_completion_tokens": 500}, 500),
        ({"max_output_tokens": 9}, 9),
        ({}, cc.DEFAULT_OUTPUT),
        ({"max_tokens": "many"}, cc.DEFAULT_OUTPUT),
        ({"max_tokens": True}, cc.DEFAULT_OUTPUT),
        ({"max_tokens": -5}, cc.DEFAULT_OUTPUT),
        ({"max_tokens": 10**12}, 10**12),
    ],
)
def test_the_output_room(body, output):
    assert cc.max_output(body) == output


def test_a_huge_output_limit_keeps_the_proxys_trigger():
    assert cc.settings_for(OffloadSettings(), model="gpt-4o", output=10**12).max_total_tokens == 18_000


# ==================== precompress
# When a summary is started ahead of time, and the hard limit above which a turn waits.

SYSTEM = {"role": "system", "content": "s"}


def history(n: int) -> list[dict]:
    """The system message and `n` assistant messages (no user message: no task pinned in the head)."""
    return [SYSTEM] + [{"role": "assistant", "content": f"m{i} " + "word " * 99} for i in range(n)]


def foldable(items: list[dict]) -> int:
    head, tail = cp.split(items, VIEW, cp.COMPRESS_KEEP_RECENT)
    return cp.tokens_between(items, VIEW, head, end=tail, counter=COUNTER)


def test_ahead_starts_at_the_ratio_of_the_trigger_and_cuts_at_this_turns_tail():
    items = history(10)  # 8 foldable messages of ~103 tokens
    tokens = foldable(items)
    at = OffloadSettings(max_total_tokens=int(tokens / 0.8), precompress_ratio=0.8)
    d = compression.ahead(items, VIEW, at, counter=COUNTER, prior=None)
    assert d is not None and (d.action, d.head, d.cut, d.new_items, d.prior) == ("summarize", 1, 9, (1, 9), None)
    # the summary an inline one of this turn would be: the same head, cut and range as decide()
    inline = cp.decide(items, VIEW, at.model_copy(update={"max_total_tokens": tokens - 1}), counter=COUNTER, prior=None)
    assert (inline.head, inline.cut, inline.new_items) == (d.head, d.cut, d.new_items)
    below = OffloadSettings(max_total_tokens=int(tokens / 0.8) + 50, precompress_ratio=0.8)
    assert compression.ahead(items, VIEW, below, counter=COUNTER, prior=None) is None
    assert (
        compression.ahead(items, VIEW, at.model_copy(update={"precompress_ratio": 0}), counter=COUNTER, prior=None)
        is None
    )


def test_ahead_folds_after_the_prior_summary_only_once_that_part_has_grown():
    items = history(20)
    prior = cp.PriorSummary(cut=9, text="<state_snapshot/>", ref="r", tokens=3, message={})
    after_prior = cp.tokens_between(items, VIEW, 9, end=19, counter=COUNTER)
    settings = OffloadSettings(max_total_tokens=int(after_prior / 0.8), precompress_ratio=0.8)
    d = compression.ahead(items, VIEW, settings, counter=COUNTER, prior=prior)
    assert d is not None and (d.cut, d.new_items, d.prior) == (19, (9, 19), prior)
    short = history(12)  # 2 messages after the prior's cut: not yet
    assert compression.ahead(short, VIEW, settings, counter=COUNTER, prior=prior) is None
    # a prior that does not fit this history (cut past the tail) is not folded
    far = cp.PriorSummary(cut=30, text="x", ref="r", tokens=1, message={})
    d = compression.ahead(items, VIEW, OffloadSettings(max_total_tokens=100), counter=COUNTER, prior=far)
    assert d is not None and d.prior is None and d.new_items == (1, 19)


def test_ahead_never_splits_a_call_from_its_result():
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }
    items = history(6) + [
        call,
        {"role": "tool", "tool_call_id": "c1", "content": "word " * 100},
        {"role": "assistant", "content": "next"},
    ]
    d = compression.ahead(items, VIEW, OffloadSettings(max_total_tokens=100), counter=COUNTER, prior=None)
    assert d is not None and cp.can_cut(items, VIEW, d.cut) and items[d.cut] is call


def test_hard_limit_defaults_to_twice_the_trigger_capped_by_the_models_window():
    settings = OffloadSettings(max_total_tokens=20_000)
    assert compression.hard_limit(settings, None) == 40_000
    assert compression.hard_limit(settings, "some-local-model") == 40_000
    assert compression.hard_limit(settings.model_copy(update={"hard_max_tokens": 25_000}), "gpt-4o") == 25_000
    big = OffloadSettings(max_total_tokens=100_000)
    assert compression.hard_limit(big, "gpt-4o-2024-08-06") == 128_000  # a dated name: its family's window
    assert compression.hard_limit(big, "openai/gpt-4o-mini") == 128_000
    assert compression.hard_limit(big, "gpt-4.1-mini") == 200_000  # 2 x trigger, under gpt-4.1's 1M
    assert compression.hard_limit(big, "gpt-3.5-turbo") == 16_385
    assert compression.context_window("claude-sonnet-4-5") == 200_000 and compression.context_window("") is None


def test_a_verified_prefix_known_without_comparing_is_held_as_the_items_own_objects():
    seen = cp.SeenPrefixes()
    earlier = [{"role": "user", "content": f"m{i}"} for i in range(5)]
    seen.add("h", earlier[:3])
    now = json.loads(json.dumps(earlier))  # equal, parsed anew
    assert seen.equal("h", now, 3, same=lambda prefix, items: all(a is b for a, b in zip(prefix, earlier)))
    assert all(a is b for a, b in zip(seen._prefixes["h"], now))  # held as the current objects now
    assert seen.equal("h", now, 3)  # compared: still equal
    assert not seen.equal("h", now, 4) and not seen.equal("other", now, 3)
    changed = [*now[:1], {"role": "user", "content": "edited"}, *now[2:]]
    assert not seen.equal("h", changed, 3, same=lambda prefix, items: False)
