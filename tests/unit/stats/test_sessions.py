"""Sessions derived from the conversation: stable over its turns, different between
conversations and tenants, blind to the cache_control markers a client moves every turn.

Which session a stored Responses answer belongs to (`proxy.stats._sessions`).

The holdout's sessions in the store: each turn added to its (arm, session) by the recorder,
read back as one outcome per session, bounded per arm; the report's shape; and the comparison
over sessions recorded with a known difference (found) and with none (not claimed).

The holdout's comparison: a known difference is found, none is not claimed, few sessions say so.
"""

from __future__ import annotations

import random
import time

import pytest

from proxy.core.answers import Bill
from proxy.formats.chat import CHAT
from proxy.formats.messages import MESSAGES
from proxy.formats.responses import RESPONSES
from proxy.stats import _sessions as holdout
from proxy.stats._counters import PriceTable, Turn
from proxy.stats._recorder import Recorder
from proxy.stats._sessions import (
    FIGURES,
    MAX_ID_CHARS,
    MIN_SESSIONS,
    Replies,
    SessionOutcome,
    compare,
    session_from_history,
    session_from_name,
)
from proxy.store.memory import MemoryStore
from proxy.store.sealing import Sealer
from proxy.store.sqlite import SQLiteStore

A, B = "a" * 32, "b" * 32


def chat(*later: dict, first: str = "fix the bug") -> list[dict]:
    return [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": first}, *later]


def test_chat_turns_of_one_conversation_share_a_session():
    role = CHAT.view.role
    turn1 = chat()
    turn2 = chat({"role": "assistant", "content": "on it"}, {"role": "user", "content": "and now?"})
    turn3 = turn2 + [{"role": "assistant", "content": None, "tool_calls": []}, {"role": "user", "content": "go"}]
    ids = {session_from_history(A, t, role) for t in (turn1, turn2, turn3)}
    assert len(ids) == 1
    [sid] = ids
    assert sid.startswith("auto-") and len(sid) == 5 + 16 and int(sid[5:], 16) >= 0
    assert session_from_history(A, chat(first="another task"), role) != sid
    assert session_from_history(B, turn1, role) != sid  # another tenant's
    other_system = [{"role": "system", "content": "Another agent."}, *turn1[1:]]
    assert session_from_history(A, other_system, role) != sid
    assert session_from_history(A, [], role) is None


def test_responses_input_and_instructions():
    role = RESPONSES.view.role
    first = [{"role": "user", "content": [{"type": "input_text", "text": "hello"}]}]
    later = first + [
        {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "a b"},
    ]
    assert session_from_history(A, first, role, system=(None, "be brief")) == session_from_history(
        A, later, role, system=(None, "be brief")
    )
    assert session_from_history(A, first, role, system=(None, "be brief")) != session_from_history(
        A, first, role, system=(None, "be long")
    )
    # a developer message first, then the user's: both are the start
    dev = [{"type": "message", "role": "developer", "content": "rules"}, *first]
    assert session_from_history(A, dev, role) != session_from_history(A, first, role)
    assert session_from_history(A, dev + later[1:], role) == session_from_history(A, dev, role)


def test_anthropic_system_and_moving_cache_control():
    role = MESSAGES.view.role
    system = [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}]
    user = {
        "role": "user",
        "content": [
            {"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
            {"type": "text", "text": "fix it", "cache_control": {"type": "ephemeral"}},
        ],
    }
    turn1 = [user]
    plain_user = {
        "role": "user",
        "content": [
            {"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
            {"type": "text", "text": "fix it"},
        ],
    }
    turn2 = [
        plain_user,
        {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
        {"role": "user", "content": [{"type": "text", "text": "thanks", "cache_control": {"type": "ephemeral"}}]},
    ]
    plain_system = [{"type": "text", "text": "You are Claude Code."}]
    assert session_from_history(A, turn1, role, system=(system, None)) == session_from_history(
        A, turn2, role, system=(plain_system, None)
    )
    assert session_from_history(A, turn1, role, system=(system, None)) != session_from_history(
        A, turn1, role, system=("Another prompt", None)
    )


def test_no_user_message_hashes_the_first_items():
    role = CHAT.view.role
    items = [{"role": "system", "content": f"s{i}"} for i in range(40)]
    assert session_from_history(A, items, role) == session_from_history(
        A, items[:32] + [{"role": "user", "content": "x"}], role
    )


def test_named_sessions():
    assert session_from_name(A, "conversation", "conv_1") == session_from_name(A, "conversation", "conv_1")
    assert session_from_name(A, "conversation", "conv_1") != session_from_name(A, "response", "conv_1")
    assert session_from_name(A, "conversation", "conv_1") != session_from_name(B, "conversation", "conv_1")
    assert session_from_name(A, "response", "resp_1").startswith("auto-")


pytestmark = pytest.mark.anyio
NS = "n" * 32


async def test_a_noted_link_is_found_before_the_store_has_it():
    """The turn continuing from an answer can come before its link is written to the store."""
    replies, store = Replies(), MemoryStore()
    replies.note(NS, "resp_1", session="s-1")
    assert await replies.find(store, NS, "resp_1", sealer=Sealer(None)) == "s-1"
    assert await Replies().find(store, NS, "resp_1", sealer=Sealer(None)) is None  # another worker: the store only


async def test_a_remembered_link_is_found_by_another_worker():
    store = MemoryStore()
    await Replies().remember(store, NS, "resp_2", session="s-2", ttl=60, sealer=Sealer(None))
    assert await Replies().find(store, NS, "resp_2", sealer=Sealer(None)) == "s-2"
    assert await Replies().find(store, "o" * 32, "resp_2", sealer=Sealer(None)) is None  # another tenant's


async def test_bounded_and_long_ids_ignored():
    replies = Replies(max_known=2)
    for n in range(3):
        replies.note(NS, f"resp_{n}", session=f"s{n}")
    store = MemoryStore()
    assert [await replies.find(store, NS, f"resp_{n}", sealer=Sealer(None)) for n in range(3)] == [None, "s1", "s2"]
    replies.note(NS, "r" * (MAX_ID_CHARS + 1), session="x")
    assert await replies.find(store, NS, "r" * (MAX_ID_CHARS + 1), sealer=Sealer(None)) is None


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


def sessions(arm: str, n: int, *, cost: float, seed: int, repeats: float = 0.0) -> list[SessionOutcome]:
    rng = random.Random(seed)
    return [
        SessionOutcome(
            arm,
            turns=rng.randint(5, 40),
            cost=max(0.0, rng.gauss(cost, cost / 3)),
            repeated_calls=int(rng.random() < repeats),
            finish="stop",
        )
        for _ in range(n)
    ]


def test_a_known_difference_is_found():
    got = compare(sessions("control", 200, cost=1.0, seed=1) + sessions("managed", 200, cost=0.6, seed=2))
    cost = got.of("cost")
    assert got.enough and got.control_sessions == got.managed_sessions == 200
    assert cost.verdict == "managed lower" and cost.low < cost.difference < cost.high < 0
    assert abs(cost.difference + 0.4) < 0.1 and abs(cost.relative + 0.4) < 0.1


def test_no_difference_is_not_claimed():
    got = compare(sessions("control", 200, cost=1.0, seed=3) + sessions("managed", 200, cost=1.0, seed=4))
    assert got.of("cost").verdict == "no difference found" and got.of("cost").low < 0 < got.of("cost").high
    assert got.of("ended").verdict == "no difference found" and got.of("ended").control == 1.0
    assert {d.figure for d in got.differences} == set(FIGURES)


def test_repeated_calls_rising_in_the_managed_arm_are_found():
    got = compare(
        sessions("control", 300, cost=1.0, seed=5, repeats=0.05)
        + sessions("managed", 300, cost=1.0, seed=6, repeats=0.4)
    )
    assert got.of("repeated_calls").verdict == "managed higher"


def test_too_few_sessions_say_so_whatever_the_difference():
    few = sessions("control", MIN_SESSIONS - 1, cost=1.0, seed=7) + sessions("managed", 100, cost=0.1, seed=8)
    got = compare(few)
    assert not got.enough and all(d.verdict == "too few sessions" for d in got.differences)
    empty = compare(sessions("managed", 10, cost=1.0, seed=9))
    assert empty.control_sessions == 0 and empty.of("cost").low == empty.of("cost").high == 0.0


def test_deterministic_for_a_seed():
    data = sessions("control", 60, cost=1.0, seed=10) + sessions("managed", 60, cost=0.9, seed=11)
    assert compare(data, seed=3) == compare(data, seed=3)
