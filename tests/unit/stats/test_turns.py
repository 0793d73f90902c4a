"""A turn's counters and the headline read back: observed turns apart from managed ones."""

from __future__ import annotations

from types import SimpleNamespace

from proxy.core.answers import Bill, Meter
from proxy.stats._prices import PriceTable
from proxy.stats._recorder import turn_of
from proxy.stats._turns import OBSERVED, Turn, headline, turn_fields

PRICES = PriceTable()


def turn(**kw) -> Turn:
    base = dict(
        namespace="t",
        session="s",
        time=0.0,
        route="chat",
        model="gpt-4o",
        status=200,
        stream=False,
        tokens_before=10_000,
        tokens_after=4_000,
        action="compact+compress",
        bill=Bill(uncached=9_000, cache_read=1_000, output=50, answers=1),
    )
    return Turn(**{**base, **kw})


def summed(*turns: Turn) -> dict:
    out: dict = {}
    for t in turns:
        for k, v in turn_fields(t, PRICES).items():
            out[k] = out.get(k, 0) + v
    return out


def test_an_observed_turns_counters_stay_apart():
    fields = turn_fields(turn(observed=True), PRICES)
    assert fields and all(k.startswith(OBSERVED) for k in fields)
    shown = headline(summed(turn(observed=True), turn(tokens_before=500, tokens_after=500, action="none")))
    assert shown["requests"] == 1 and shown["tokens_before"] == 500  # the managed turn alone
    observed = shown["observed"]
    assert observed["requests"] == 1 and observed["tokens_forwarded"] == 10_000
    assert observed["tokens_would_forward"] == 4_000 and observed["would_forward_ratio"] == 0.4
    assert observed["actions"]["compact+compress"] == 1
    assert observed["bill"]["tokens"]["uncached"] == 9_000  # what was billed: the raw history
    assert "observed" not in headline(summed(turn()))


def record(**kw) -> SimpleNamespace:
    meter = Meter()
    meter.add(Bill(uncached=9_000, cache_read=1_000, output=50, answers=1))
    base = dict(
        tokens_before=10_000,
        tokens_after=4_000,
        model="gpt-4o",
        status=200,
        stream=False,
        action="compact",
        refs=0,
        refs_created=0,
        route="chat",
        reload_rounds=0,
        warnings=[],
        bill=meter,
        summary_bill=Bill(),
        session="s",
    )
    return SimpleNamespace(**{**base, **kw})


def test_the_estimate_beside_an_observed_bill_is_what_would_have_been_billed():
    scope = {
        "state": {"caller": SimpleNamespace(namespace="t", kind="client", label=None)},
        "headers": [],
        "path": "/v1/chat/completions",
    }
    managed = turn_of(record(), scope)
    observed = turn_of(record(observed=True), scope)
    assert managed is not None and observed is not None and observed.observed and not managed.observed
    # managed: the raw history's bill, scaled up; observed: the planned turn's, scaled down
    assert managed.counterfactual.input == 25_000 and observed.counterfactual.input == 4_000
    assert observed.counterfactual.output == 50
    shown = headline(summed(observed))["observed"]
    assert shown["would_bill"]["estimate"] is True and shown["would_bill"]["tokens"]["uncached"] == 3_600
    assert shown["would_save_usd"] > 0
