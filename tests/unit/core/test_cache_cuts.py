"""Cuts priced at cache prices (proxy.core.cache_cuts) and the session record they read
(proxy.core.last_sent)."""

from __future__ import annotations

import dataclasses

import pytest

from proxy.core import provider_cache as pc
from proxy.core.cache_cuts import COLD_MARGIN, MAX_REMAINING, CutContext, early, keep_previous, price
from proxy.core.last_sent import LastSent, decode, digest

SENT = LastSent(
    digest(b"body"),
    tokens=30_000,
    at=1000.0,
    model="claude-sonnet-4-5",
    endpoint="messages",
    family="anthropic",
    credential="client",
    turns=6,
    summary="ab" * 32,
)


def ctx(idle: float, *, turns: int = 6, profile: pc.Profile = pc.ANTHROPIC) -> CutContext:
    return CutContext(dataclasses.replace(SENT, turns=turns), SENT.at + idle, profile)


def test_the_record_round_trips_and_counts_turns_on():
    assert decode(SENT.encode()) == SENT
    later = SENT.then(dataclasses.replace(SENT, digest=digest(b"next"), at=1200.0, turns=1))
    assert (later.turns, later.at, later.digest) == (7, 1200.0, digest(b"next"))
    assert SENT.idle(900.0) == 0.0  # a clock that went back


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"null",
        b"[]",
        b"{}",
        b'{"v": 2}',
        b"\xff",
        SENT.encode().replace(b'"tokens":30000', b'"tokens":"30000"'),
        SENT.encode().replace(b'"tokens":30000', b'"tokens":true'),
        SENT.encode().replace(b'"at":1000.0', b'"at":NaN'),
        SENT.encode().replace(b'"claude-sonnet-4-5"', b'"' + b"m" * 300 + b'"'),
    ],
)
def test_a_stored_value_that_is_no_record_reads_as_none(raw):
    assert decode(raw) is None


def test_cold_is_idle_past_the_ttl_and_unknown_is_not_cold():
    assert not ctx(299).cold and ctx(301).cold
    assert not CutContext(None, 10_000.0, pc.ANTHROPIC).cold


def test_a_cut_due_soon_is_made_early_only_on_a_cold_cache():
    trigger = 10_000
    due = int((1 - COLD_MARGIN) * trigger)
    assert early(ctx(600), foldable=due, trigger=trigger)
    assert not early(ctx(600), foldable=due - 1, trigger=trigger)  # not due soon
    assert not early(ctx(60), foldable=trigger, trigger=trigger)  # warm
    assert not early(None, foldable=trigger, trigger=trigger)


def test_the_price_of_a_warm_cut_is_its_write_against_the_reads_it_saves():
    # after 12k rewritten at 1.25 instead of 100k read at 0.1; 88k fewer read over 6 turns
    cut = price(ctx(60), after=12_000, removed=88_000)
    assert cut.extra == pytest.approx(12_000 * 1.25 - 100_000 * 0.1)
    assert cut.saved == pytest.approx(88_000 * 0.1 * 6)
    assert cut.worth and not keep_previous(ctx(60), after=12_000, removed=88_000)


def test_a_warm_cut_that_saves_little_waits_and_a_cold_one_never_does():
    # re-summarising: 30k rewritten to take 2.7k out of each later request
    assert not price(ctx(60, turns=3), after=30_000, removed=2_700).worth
    assert keep_previous(ctx(60, turns=3), after=30_000, removed=2_700)
    assert price(ctx(600, turns=3), after=30_000, removed=2_700).worth  # cold: written either way
    assert not keep_previous(ctx(600, turns=3), after=30_000, removed=2_700)
    assert not keep_previous(None, after=30_000, removed=2_700)


def test_the_expected_remaining_turns_are_the_turns_so_far_bounded():
    assert ctx(60, turns=1).remaining == 1
    assert ctx(60, turns=10_000).remaining == MAX_REMAINING
    long = price(ctx(60, turns=10_000), after=30_000, removed=2_700)
    assert long.saved == pytest.approx(2_700 * 0.1 * MAX_REMAINING)


def test_openai_prices_a_cut_without_a_write_premium():
    cut = price(ctx(60, profile=pc.OPENAI), after=12_000, removed=88_000)
    assert cut.extra == pytest.approx(12_000 * 1.0 - 100_000 * 0.1)
