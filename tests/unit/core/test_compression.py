"""The pure compression planner: split, pairing, groups, decisions, assembly."""

from __future__ import annotations

import json

from proxy.core import compression as cp
from proxy.core.settings import OffloadSettings
from proxy.core.tokens import counter_for_model
from proxy.formats.chat import VIEW

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
