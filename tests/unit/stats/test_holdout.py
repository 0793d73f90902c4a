"""The holdout's sessions in the store: each turn added to its (arm, session) by the recorder,
read back as one outcome per session, bounded per arm; the report's shape; and the comparison
over sessions recorded with a known difference (found) and with none (not claimed)."""

from __future__ import annotations

import random
import time

import pytest

from proxy.core.answers import Bill
from proxy.stats import _holdout as holdout
from proxy.stats._holdout import MIN_SESSIONS
from proxy.stats._prices import PriceTable
from proxy.stats._recorder import Recorder
from proxy.stats._turns import Turn
from proxy.store.memory import MemoryStore
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore

pytestmark = pytest.mark.anyio
A, B = "a" * 32, "b" * 32
PRICES = PriceTable()


def turn(session: str | None, arm: str | None, *, ns: str = A, t: float | None = None, **fields) -> Turn:
    base = dict(
        namespace=ns,
        session=session,
        time=t if t is not None else time.time(),
        route="chat",
        model="gpt-4o",
        status=200,
        stream=False,
        tokens_before=1000,
        tokens_after=400,
        action="compact",
        arm=arm,
        finish="stop",
    )
    return Turn(**{**base, **fields})


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    return MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "s.sqlite3")


def test_finish_codes_round_trip_and_bound_what_the_upstream_sends():
    assert holdout.finish_of(holdout.finish_code(None)) is None
    for finish in holdout.FINISHES:
        assert holdout.finish_of(holdout.finish_code(finish)) == finish
    assert holdout.finish_of(holdout.finish_code("something_new")) == "other"
    assert holdout.finish_of(999) is None and holdout.finish_of(-1) is None


async def test_turns_add_up_per_session_and_arm(store):
    recorder = Recorder(PRICES, retention=86400)
    recorder.start(store, Sealer(None))
    t0 = time.time() - 100
    bill = Bill(uncached=1000, output=100, answers=1)
    recorder.record(turn("s1", "control", t=t0, tokens_after=1000, bill=bill, repeated_calls=0))
    recorder.record(
        turn(
            "s1",
            "control",
            t=t0 + 30,
            tokens_after=1200,
            bill=bill,
            reload_rounds=0,
            status=502,
            answer_error=True,
            finish="error",
            repeated_calls=2,
        )
    )
    recorder.record(
        turn(
            "s1",
            "control",
            t=t0 + 60,
            tokens_after=1300,
            bill=bill,
            context_error=True,
            answer_error=True,
            status=400,
            finish="error",
            repeated_calls=3,
        )
    )
    recorder.record(turn("s2", "managed", t=t0 + 5, reload_rounds=2, finish="length"))
    recorder.record(turn("s3", None))  # outside the holdout
    recorder.record(turn(None, "managed"))  # no session: nothing to add to
    recorder.record(turn("s4", "managed", ns=B))  # another tenant's
    await recorder.flush()
    recorder.record(turn("s2", "managed", t=t0 + 50, finish="stop", summary_bill=bill))  # a later flush
    recorder.record(turn("s2", "managed", t=t0 + 1, finish="tool_calls"))  # served earlier, flushed later
    await recorder.flush()
    outcomes, kept = await holdout.holdout_outcomes(store, A)
    assert kept == {"control": 1, "managed": 1}
    by_arm = {o.arm: o for o in outcomes}
    control, managed = by_arm["control"], by_arm["managed"]
    usd = bill.cost(PRICES.price("gpt-4o")).total
    assert control.turns == 3 and control.tokens_forwarded == 3500 and control.cost == pytest.approx(3 * usd)
    assert control.upstream_errors == 2 and control.context_errors == 1
    assert control.duration == pytest.approx(60, abs=0.01) and control.finish == "error" and control.ended == 0.0
    assert control.repeated_calls == 3  # the last turn's history holds every call
    assert managed.turns == 3 and managed.reload_rounds == 2 and managed.cost == pytest.approx(usd)
    assert managed.finish == "stop" and managed.ended == 1.0  # the last turn's (t0 + 50), not the last flushed
    assert managed.duration == pytest.approx(45, abs=0.01)  # the first writer's first turn: t0 + 5
    other, _ = await holdout.holdout_outcomes(store, B)
    assert [(o.arm, o.turns) for o in other] == [("managed", 1)]


async def test_background_bills_of_a_holdout_session_are_its_cost(store):
    recorder = Recorder(PRICES, retention=86400)
    recorder.start(store, Sealer(None))
    recorder.record(turn("s1", "managed"))
    await recorder.flush()
    bill = Bill(uncached=2000, output=300, answers=1)
    recorder.bill_call(A, bill, call="summary", model="gpt-4o", session="s1")  # made in the background
    recorder.bill_call(A, bill, call="summary", model="gpt-4o", session="elsewhere")  # not a holdout session
    await recorder.flush()
    [managed], _ = await holdout.holdout_outcomes(store, A)
    assert managed.cost == pytest.approx(bill.cost(PRICES.price("gpt-4o")).total)


async def test_sealed_session_names_and_a_bounded_read(store):
    sealer = Sealer("k" * 32)
    recorder = Recorder(PRICES, retention=86400)
    recorder.start(store, sealer)
    now = time.time()
    for i in range(12):
        recorder.record(turn(f"secret-{i}", "control", t=now - 100 + i))
    await recorder.flush()
    outcomes, kept = await holdout.holdout_outcomes(store, A, limit=5)
    assert kept == {"control": 12, "managed": 0} and len(outcomes) == 5
    _, page = await store.ranked(holdout.index_key(A, "control"), 0, 12)
    assert not any(name.startswith("secret-") for name, _ in page)  # as the session list keys them


def synthetic(count: int, *, managed_cost: float, seed: int) -> list[Turn]:
    """`count` one-to-five-turn sessions per arm, each turn's cost drawn around 1.0 (control) or
    `managed_cost` (managed) dollars: known bills at gpt-4o's price."""
    rng = random.Random(seed)
    price = PRICES.price("gpt-4o")
    per_token = price.input / 1e6
    turns = []
    now = time.time() - 3600
    for arm, mean in (("control", 1.0), ("managed", managed_cost)):
        for i in range(count):
            for j in range(rng.randint(1, 5)):
                dollars = max(0.01, rng.gauss(mean, 0.3))
                turns.append(
                    turn(
                        f"{arm}-{i}",
                        arm,
                        t=now + i + j * 0.01,
                        bill=Bill(uncached=round(dollars / per_token), answers=1),
                    )
                )
    return turns


@pytest.mark.parametrize("managed_cost, found", [(0.6, "managed lower"), (1.0, "no difference found")])
async def test_a_known_difference_recorded_is_found_and_none_is_not_claimed(store, managed_cost, found):
    recorder = Recorder(PRICES, retention=86400)
    recorder.start(store, Sealer(None))
    for t in synthetic(40, managed_cost=managed_cost, seed=7):
        recorder.record(t)
    await recorder.flush()
    outcomes, kept = await holdout.holdout_outcomes(store, A)
    section = holdout.holdout_report(outcomes, kept=kept, fraction=0.5)
    assert section["arms"]["control"]["sessions"] == section["arms"]["managed"]["sessions"] == 40
    assert section["enough"]
    cost = next(f for f in section["figures"] if f["figure"] == "cost")
    assert cost["verdict"] == found
    assert cost["low"] <= cost["difference"] <= cost["high"]
    turns_mean = next(f for f in section["figures"] if f["figure"] == "turns")
    if found == "managed lower":
        assert cost["high"] < 0 and cost["relative"] < -0.2
        assert "billed cost per session (USD) lower" in section["verdict"]
    else:
        assert cost["low"] < 0 < cost["high"]
        assert turns_mean["control"] > 0


def test_the_report_says_plainly_when_there_are_too_few_sessions():
    few = [holdout.outcome("control", {"turns": 3, "usd": 1.0})] * 5 + [holdout.outcome("managed", {"turns": 2})] * 40
    section = holdout.holdout_report(few, kept={"control": 5, "managed": 40}, fraction=0.1)
    assert not section["enough"] and section["min_sessions"] == MIN_SESSIONS
    assert section["verdict"] == (
        f"Too few sessions to tell: 5 control and 40 managed; at least {MIN_SESSIONS} in "
        "each arm are needed before any difference is claimed."
    )
    assert {f["verdict"] for f in section["figures"]} == {"too few sessions"}
    assert [f["figure"] for f in section["figures"]] == list(holdout.FIGURE_LABELS)
    assert set(section["figures"][0]) == {
        "figure",
        "label",
        "worse_when",
        "control",
        "managed",
        "difference",
        "relative",
        "low",
        "high",
        "verdict",
    }
    empty = holdout.holdout_report([], kept={"control": 0, "managed": 0}, fraction=0.0)
    assert empty["arms"] == {"control": {"sessions": 0, "turns": 0}, "managed": {"sessions": 0, "turns": 0}}
    assert empty["verdict"].startswith("Too few sessions to tell: 0 control and 0 managed")
