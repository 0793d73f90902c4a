"""When a summary is started ahead of time, and the hard limit above which a turn waits."""

from __future__ import annotations

from proxy.core import compression as cp
from proxy.core import precompress
from proxy.core.settings import OffloadSettings
from proxy.core.tokens import counter_for_model
from proxy.formats.chat import VIEW

COUNTER = counter_for_model("gpt-4o")
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
    d = precompress.ahead(items, VIEW, at, counter=COUNTER, prior=None)
    assert d is not None and (d.action, d.head, d.cut, d.new_items, d.prior) == ("summarize", 1, 9, (1, 9), None)
    # the summary an inline one of this turn would be: the same head, cut and range as decide()
    inline = cp.decide(items, VIEW, at.model_copy(update={"max_total_tokens": tokens - 1}), counter=COUNTER, prior=None)
    assert (inline.head, inline.cut, inline.new_items) == (d.head, d.cut, d.new_items)
    below = OffloadSettings(max_total_tokens=int(tokens / 0.8) + 50, precompress_ratio=0.8)
    assert precompress.ahead(items, VIEW, below, counter=COUNTER, prior=None) is None
    assert (
        precompress.ahead(items, VIEW, at.model_copy(update={"precompress_ratio": 0}), counter=COUNTER, prior=None)
        is None
    )


def test_ahead_folds_after_the_prior_summary_only_once_that_part_has_grown():
    items = history(20)
    prior = cp.PriorSummary(cut=9, text="<state_snapshot/>", ref="r", tokens=3, message={})
    after_prior = cp.tokens_between(items, VIEW, 9, end=19, counter=COUNTER)
    settings = OffloadSettings(max_total_tokens=int(after_prior / 0.8), precompress_ratio=0.8)
    d = precompress.ahead(items, VIEW, settings, counter=COUNTER, prior=prior)
    assert d is not None and (d.cut, d.new_items, d.prior) == (19, (9, 19), prior)
    short = history(12)  # 2 messages after the prior's cut: not yet
    assert precompress.ahead(short, VIEW, settings, counter=COUNTER, prior=prior) is None
    # a prior that does not fit this history (cut past the tail) is not folded
    far = cp.PriorSummary(cut=30, text="x", ref="r", tokens=1, message={})
    d = precompress.ahead(items, VIEW, OffloadSettings(max_total_tokens=100), counter=COUNTER, prior=far)
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
    d = precompress.ahead(items, VIEW, OffloadSettings(max_total_tokens=100), counter=COUNTER, prior=None)
    assert d is not None and cp.can_cut(items, VIEW, d.cut) and items[d.cut] is call


def test_hard_limit_defaults_to_twice_the_trigger_capped_by_the_models_window():
    settings = OffloadSettings(max_total_tokens=20_000)
    assert precompress.hard_limit(settings, None) == 40_000
    assert precompress.hard_limit(settings, "some-local-model") == 40_000
    assert precompress.hard_limit(settings.model_copy(update={"hard_max_tokens": 25_000}), "gpt-4o") == 25_000
    big = OffloadSettings(max_total_tokens=100_000)
    assert precompress.hard_limit(big, "gpt-4o-2024-08-06") == 128_000  # a dated name: its family's window
    assert precompress.hard_limit(big, "openai/gpt-4o-mini") == 128_000
    assert precompress.hard_limit(big, "gpt-4.1-mini") == 200_000  # 2 x trigger, under gpt-4.1's 1M
    assert precompress.hard_limit(big, "gpt-3.5-turbo") == 16_385
    assert precompress.context_window("claude-sonnet-4-5") == 200_000 and precompress.context_window("") is None
