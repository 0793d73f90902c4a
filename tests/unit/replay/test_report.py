"""Leave-one-framework-out: the setting is chosen without the framework it is measured on."""

from __future__ import annotations

from dataclasses import dataclass

from proxy.replay import _report as report


@dataclass
class Conv:  # what `overall` needs of a replayed conversation, here: its figures summed
    kept: int
    found: int
    cost: float
    raw: float = 100.0


def overall(convs):
    kept, found = sum(c.kept for c in convs), sum(c.found for c in convs)
    cost, raw = sum(c.cost for c in convs), sum(c.raw for c in convs)
    return {
        "recall": found / kept if kept else 1.0,
        "cache_cost_ratio": cost / raw if raw else 1.0,
        "prefix_reuse": 0.95,
        "forwarded_ratio": cost / raw if raw else 1.0,
    }


def test_framework_of_reads_the_trace():
    assert report.framework_of({"framework": "openhands-sdk"}) == "openhands-sdk"
    assert report.framework_of({"meta": {"framework": "aider"}}) == "aider"
    assert report.framework_of({"messages": []}) == "unknown"


def test_choose_takes_the_knee_within_the_prefix_budget():
    rows = [
        {"recall": 0.86, "cache_cost_ratio": 0.46, "prefix_reuse": 0.95},
        {"recall": 0.92, "cache_cost_ratio": 0.68, "prefix_reuse": 0.975},  # +0.06 recall for +0.22 cost
        {"recall": 0.84, "cache_cost_ratio": 0.30, "prefix_reuse": 0.90},  # best score, too little reuse
        {"recall": 0.88, "cache_cost_ratio": 0.48, "prefix_reuse": 0.95},
    ]  # +0.02 for +0.02: worth it
    assert report.choose(rows) == 3
    assert report.choose(rows, cost_weight=0.0) == 1  # the highest recall
    assert report.choose(rows, prefix_budget=0.99) == 2  # none keeps it: all are candidates


def test_each_framework_is_measured_with_the_setting_chosen_on_the_others():
    frameworks = ["a", "a", "b", "c"]
    # setting 0 is cheap but loses recall on framework a; setting 1 keeps it at a price
    cheap = [Conv(10, 5, 30), Conv(10, 5, 30), Conv(10, 10, 30), Conv(10, 10, 30)]
    dear = [Conv(10, 10, 90), Conv(10, 10, 90), Conv(10, 10, 90), Conv(10, 10, 90)]
    held = report.leave_one_out([cheap, dear], frameworks, overall)
    # chosen on b and c, the cheap one looks free of loss; with a among the training traces, it does not
    assert [(h.framework, h.chosen) for h in held] == [("a", 0), ("b", 1), ("c", 1)]
    # framework a pays for what was chosen without it: recall 0.5
    assert held[0].figures["recall"] == 0.5 and held[1].figures["recall"] == 1.0
    assert report.mean([h.figures for h in held])["recall"] == (0.5 + 1 + 1) / 3
    assert report.pooled(held, overall)["recall"] == 30 / 40  # weighted by the conversations
    assert report.leave_one_out([cheap], ["a"] * 4, overall) == []  # one framework: nothing to leave out
    per = report.by_framework(cheap, frameworks, overall)
    assert list(per) == ["a", "b", "c"] and per["a"]["recall"] == 0.5
