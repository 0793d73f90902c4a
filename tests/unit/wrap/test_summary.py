"""The exit line (proxy.wrap.summary)."""

from __future__ import annotations

from proxy.wrap.summary import FIELDS, describe_kept, difference, line

RUN = {"requests": 12, "tokens_before": 410_200, "tokens_after": 98_450, "cost_before_usd": 0.2,
       "cost_after_usd": 0.082, "reload_rounds": 3}


def test_the_line():
    assert line(title="Codex CLI", status=0, run=RUN) == (
        "offload-proxy: 12 requests, 410,200 → 98,450 tokens (0.24), cache-weighted cost ×0.41, 3 reloads")
    one = {**RUN, "requests": 1, "reload_rounds": 1, "cost_before_usd": 0}
    assert line(title="aider", status=1, run=one) == "offload-proxy: 1 request, 410,200 → 98,450 tokens (0.24), 1 reload"


def test_nothing_went_through():
    empty = dict.fromkeys(FIELDS, 0.0)
    assert line(title="aider", status=0, run=empty) == "offload-proxy: no requests went through the proxy"
    assert line(title="aider", status=2, run=empty) == ("offload-proxy: aider exited with status 2; no request "
                                                        "went through the proxy")
    assert line(title="aider", status=0, run=None) == ("offload-proxy: statistics unavailable (the proxy's admin "
                                                       "token is needed: --admin-token)")


def test_the_run_is_the_difference_of_two_readings():
    before = {**RUN, "requests": 10, "tokens_before": 400_000}
    assert difference(before, RUN)["requests"] == 2 and difference(before, RUN)["tokens_before"] == 10_200
    assert difference(None, RUN) == RUN
    assert difference({**RUN, "requests": 20}, RUN)["requests"] == 0  # never negative


def test_kept():
    url = "http://127.0.0.1:4100"
    assert describe_kept(url, 77, "tok", own_token=True) == (
        f"proxy still up at {url}: dashboard {url}/dashboard (admin token tok), stop it with kill 77")
    assert describe_kept(url, 77, "tok", own_token=False) == (
        f"proxy still up at {url}: dashboard {url}/dashboard, stop it with kill 77")  # the user's own token: not shown


def test_the_totals_of_the_first_answer_holding_nothing_count(monkeypatch):
    """An answer's `recorder` is taken before its totals (proxy.http.stats_api): the first answer
    that holds nothing unwritten counts every turn; earlier ones are waited past."""
    from proxy.wrap import summary

    answers = iter([({"requests": 1.0}, 2), ({"requests": 2.0}, 1), ({"requests": 3.0}, 0), ({"requests": 9.0}, 0)])
    monkeypatch.setattr(summary, "read", lambda url, token: next(answers))
    monkeypatch.setattr(summary.time, "sleep", lambda seconds: None)
    assert summary.settled("http://proxy", "token") == {"requests": 3.0}
