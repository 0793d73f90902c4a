"""The exit line (proxy.wrap._proxy)."""

from __future__ import annotations

import pytest

from proxy.wrap._proxy import FIELDS, describe_kept, difference, line

RUN = {
    "requests": 12,
    "tokens_before": 410_200,
    "tokens_after": 98_450,
    "reload_rounds": 3,
    "billed_usd": 0.082,
    "uncached_usd": 0.01,
    "reads_usd": 0.05,
    "writes_usd": 0.012,
    "output_usd": 0.01,
    "turns_without_usage": 0,
    "cf_usd": 0.2,
    "cf_billed_usd": 0.082,
}


def test_the_line():
    assert line(title="Codex CLI", status=0, run=RUN) == (
        "offload-proxy: 12 requests, 410,200 → 98,450 tokens (0.24), billed $0.0820 (uncached $0.0100, reads "
        "$0.0500, writes $0.0120, output $0.0100), ×0.41 of the raw history's (est.), 3 reloads"
    )
    one = {**RUN, "requests": 1, "reload_rounds": 1, "billed_usd": 0, "cf_usd": 0, "turns_without_usage": 1}
    assert line(title="aider", status=1, run=one) == (
        "offload-proxy: 1 request, 410,200 → 98,450 tokens (0.24), 1 reload, 1 turn without usage"
    )


def test_nothing_went_through():
    empty = dict.fromkeys(FIELDS, 0.0)
    assert line(title="aider", status=0, run=empty) == "offload-proxy: no requests went through the proxy"
    assert line(title="aider", status=2, run=empty) == (
        "offload-proxy: aider exited with status 2; no request went through the proxy"
    )
    assert line(title="aider", status=0, run=None) == (
        "offload-proxy: statistics unavailable (the proxy's admin token is needed: --admin-token)"
    )


def test_the_run_is_the_difference_of_two_readings():
    before = {**RUN, "requests": 10, "tokens_before": 400_000}
    assert difference(before, RUN)["requests"] == 2 and difference(before, RUN)["tokens_before"] == 10_200
    assert difference(None, RUN) == RUN
    assert difference({**RUN, "requests": 20}, RUN)["requests"] == 0  # never negative


def test_kept():
    url = "http://127.0.0.1:4100"
    assert describe_kept(url, 77, "tok", own_token=True) == (
        f"proxy still up at {url}: dashboard {url}/dashboard (admin token tok), stop it with kill 77"
    )
    assert describe_kept(url, 77, "tok", own_token=False) == (
        f"proxy still up at {url}: dashboard {url}/dashboard, stop it with kill 77"
    )  # the user's own token: not shown
    assert describe_kept(url, 77, None, own_token=False, scratch="/tmp/offload-wrap-x") == (
        f"proxy still up at {url}: dashboard {url}/dashboard, stop it with kill 77; "
        "its log and store stay in /tmp/offload-wrap-x until you remove it"
    )


def test_the_totals_of_the_first_answer_holding_nothing_count(monkeypatch):
    """An answer's `recorder` is taken before its totals (proxy.http.stats_api): the first answer
    that holds nothing unwritten counts every turn; earlier ones are waited past."""
    from proxy.wrap import _proxy as summary

    answers = iter([({"requests": 1.0}, 2), ({"requests": 2.0}, 1), ({"requests": 3.0}, 0), ({"requests": 9.0}, 0)])
    monkeypatch.setattr(summary, "read", lambda url, token: next(answers))
    monkeypatch.setattr(summary.time, "sleep", lambda seconds: None)
    assert summary.settled("http://proxy", "token") == {"requests": 3.0}


def test_the_line_says_why_there_are_no_statistics():
    assert line(title="Claude Code", status=7, run=None, unavailable="the proxy did not answer: refused") == (
        "offload-proxy: Claude Code exited with status 7; statistics unavailable (the proxy did not answer: refused)"
    )
    assert line(title="Claude Code", status=0, run=None, unavailable="x") == "offload-proxy: statistics unavailable (x)"


@pytest.mark.parametrize(
    "answer",
    [
        [1],
        "ok",
        None,
        {"totals": [1]},
        {"totals": {"requests": [1]}},
        {"totals": {"requests": "3"}},
        {"totals": {"requests": True}},
        {"totals": {"requests": float("inf")}},
        {"totals": {"requests": float("nan")}},
        {"totals": {}, "recorder": {"queued": "x"}},
        {"totals": {}, "recorder": [0]},
    ],
)
def test_an_answer_that_is_not_the_statistics_apis(monkeypatch, answer):
    """A --proxy-url whose server answers /v1/offload/stats with something else: no statistics, and
    no TypeError or OverflowError after the agent's run."""
    from proxy.wrap import _proxy as summary

    monkeypatch.setattr(summary, "get_json", lambda url, token: answer)
    totals, why = summary.safe_read("http://proxy", "token")
    assert totals is None and why.startswith("no statistics in the proxy's answer")


def test_the_reasons(monkeypatch):
    import urllib.error

    from proxy.wrap import _proxy as summary

    assert summary.safe_read("http://proxy", None) == (None, summary.NO_TOKEN)

    def refuse(url, token):
        raise urllib.error.HTTPError(url, 401, "Unauthorized", {}, None)  # type: ignore[arg-type]

    monkeypatch.setattr(summary, "get_json", refuse)
    assert summary.safe_read("http://proxy", "t") == (None, "the proxy answered HTTP 401 (a wrong --admin-token?)")

    def gone(url, token):
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(summary, "get_json", gone)
    assert summary.safe_read("http://proxy", "t") == (None, "the proxy did not answer: [Errno 111] Connection refused")
    monkeypatch.setattr(summary, "get_json", lambda url, token: {"totals": {"requests": 2}, "recorder": {"queued": 0}})
    totals, why = summary.safe_read("http://proxy", "t")
    assert (totals["requests"], totals["tokens_before"], why) == (2.0, 0.0, "")
