"""proxy.core.prompt_cache: a provider's prompt cache billed, the cuts priced at its prices, the
keep-alive pings."""

from __future__ import annotations

import dataclasses

import pytest

from proxy.core import prompt_cache as ka
from proxy.core import prompt_cache as pc
from proxy.core.prompt_cache import (
    ANTHROPIC,
    COLD_MARGIN,
    MAX_REMAINING,
    OPENAI,
    Billed,
    Block,
    Cache,
    CutContext,
    LastSent,
    Request,
    decode,
    digest,
    early,
    keep_previous,
    price,
)
from proxy.formats.prompt_cache import ping

# ==================== prompt cache
# The provider-cache model: what each request of a sequence is billed, by provider profile.


def blocks(*sizes: int, marks: dict[int, str] | None = None, tag: str = "b") -> tuple[Block, ...]:
    """Blocks of these token counts, keyed by position (the same sizes = the same content)."""
    marks = marks or {}
    return tuple(Block(f"{tag}{i}:{n}", n, marks.get(i)) for i, n in enumerate(sizes))


def run(profile, *requests: Request) -> tuple[Billed, ...]:
    return pc.bill_all(profile, requests)


# ------------------------------------------------------------------------------ anthropic


def test_anthropic_caches_nothing_without_a_breakpoint():
    first, second = run(ANTHROPIC, Request(0, blocks(2000, 500)), Request(10, blocks(2000, 500, 300)))
    assert first == Billed(uncached=2500) and second == Billed(uncached=2800)


def test_anthropic_writes_up_to_the_breakpoint_and_reads_it_next_time():
    prefix = blocks(2000, 500, marks={1: "5m"})
    first, second = run(
        ANTHROPIC, Request(0, prefix + blocks(100, tag="q")), Request(60, prefix + blocks(200, tag="r"))
    )
    assert first == Billed(uncached=100, write_5m=2500)
    assert second == Billed(uncached=200, read=2500)
    assert first.cost(ANTHROPIC) == 100 + 1.25 * 2500 and second.cost(ANTHROPIC) == pytest.approx(200 + 250)


def test_anthropic_request_level_caching_moves_the_breakpoint_to_the_last_block():
    one, two = blocks(3000, 400), blocks(3000, 400, 600)
    first, second = run(ANTHROPIC, Request(0, one, automatic="5m"), Request(30, two, automatic="5m"))
    assert first == Billed(write_5m=3400)
    assert second == Billed(read=3400, write_5m=600)  # found by the lookback, one boundary back


def test_moving_a_breakpoint_keeps_the_cache():
    """The key hashes the content, not the mark: the previous last block without its mark still hits."""
    first = blocks(3000, 400, marks={1: "5m"})
    second = blocks(3000, 400, 600, marks={2: "5m"})
    assert run(ANTHROPIC, Request(0, first), Request(5, second))[1] == Billed(read=3400, write_5m=600)


def test_the_lookback_reaches_twenty_boundaries_and_no_further():
    base = blocks(2000)
    near = base + blocks(*[10] * 19, tag="t")  # the breakpoint on the 20th block: 19 more back to the write
    far = base + blocks(*[10] * 20, tag="t")
    written = Request(0, base, automatic="5m")
    assert run(ANTHROPIC, written, Request(1, near, automatic="5m"))[1] == Billed(read=2000, write_5m=190)
    assert run(ANTHROPIC, written, Request(1, far, automatic="5m"))[1] == Billed(write_5m=2200)


def test_an_expired_prefix_is_written_again_and_a_read_renews_it():
    prefix = blocks(5000, marks={0: "5m"})
    bills = run(ANTHROPIC, Request(0, prefix), Request(299, prefix), Request(598, prefix), Request(899, prefix))
    assert [b.read for b in bills] == [0, 5000, 5000, 0]  # each read renews 300 s; 301 s idle expires it
    assert bills[3].write_5m == 5000


def test_the_one_hour_ttl_outlives_five_minutes_and_costs_two_times():
    prefix = blocks(5000, marks={0: "1h"})
    first, second = run(ANTHROPIC, Request(0, prefix), Request(1800, prefix))
    assert first == Billed(write_1h=5000) and first.cost(ANTHROPIC) == 10_000
    assert second == Billed(read=5000)


def test_writes_split_by_ttl_between_breakpoints():
    request = blocks(2000, 1000, 500, marks={0: "1h", 1: "5m"})
    assert run(ANTHROPIC, Request(0, request))[0] == Billed(uncached=500, write_1h=2000, write_5m=1000)


def test_a_prefix_below_the_minimum_is_not_cached_its_tokens_go_to_the_next_breakpoint():
    request = blocks(600, 300, 2000, marks={0: "5m", 2: "5m"})
    first, second = run(ANTHROPIC, Request(0, request), Request(1, request))
    assert first == Billed(write_5m=2900)
    assert second == Billed(read=2900)
    assert run(ANTHROPIC, Request(0, blocks(900, marks={0: "5m"})))[0] == Billed(uncached=900)


def test_model_minimums():
    assert pc.profile_for("anthropic", "claude-opus-4-5-20251101").minimum == 4096
    assert pc.profile_for("anthropic", "claude-haiku-4-5").minimum == 4096
    assert pc.profile_for("anthropic", "claude-sonnet-4-5").minimum == 1024
    assert pc.profile_for("anthropic", "anthropic/claude-3-5-haiku-latest").minimum == 2048
    assert pc.profile_for("anthropic", None) == ANTHROPIC
    opus = pc.profile_for("anthropic", "claude-opus-4-5")
    assert run(opus, Request(0, blocks(3000, marks={0: "5m"})))[0] == Billed(uncached=3000)


def test_an_earlier_breakpoint_still_hits_when_the_later_prefix_changed():
    """Tools and system cached apart: a rewrite after them (a summary) rereads them."""
    system = blocks(3000, marks={0: "5m"}, tag="s")
    first = system + blocks(4000, 500, marks={1: "5m"}, tag="h")
    rewritten = system + blocks(700, 500, marks={1: "5m"}, tag="summary")
    assert run(ANTHROPIC, Request(0, first), Request(10, rewritten))[1] == Billed(read=3000, write_5m=1200)


def test_a_breakpoint_read_each_turn_stays_alive_beyond_the_first_ttl():
    system = blocks(3000, marks={0: "5m"}, tag="s")
    turns = [
        Request(t, system + blocks(*[100] * (k + 1), marks={k: "5m"}, tag="h"))
        for k, t in enumerate(range(0, 1200, 200))
    ]
    rewritten = Request(1250, system + blocks(50, marks={0: "5m"}, tag="new"))
    assert run(ANTHROPIC, *turns, rewritten)[-1].read == 3000


def test_too_many_breakpoints_or_a_long_ttl_after_a_short_one_are_refused():
    with pytest.raises(pc.CacheRequestError, match="maximum of 4"):
        run(ANTHROPIC, Request(0, blocks(1, 1, 1, 1, 1, marks={i: "5m" for i in range(5)})))
    with pytest.raises(pc.CacheRequestError, match="maximum of 4"):  # the automatic one counts
        run(ANTHROPIC, Request(0, blocks(1, 1, 1, 1, 1, marks={i: "5m" for i in range(4)}), automatic="5m"))
    with pytest.raises(pc.CacheRequestError, match="1h"):
        run(ANTHROPIC, Request(0, blocks(2000, 2000, marks={0: "5m", 1: "1h"})))
    with pytest.raises(pc.CacheRequestError, match="ttl"):
        run(ANTHROPIC, Request(0, blocks(2000, marks={0: "10m"})))
    # the automatic breakpoint on a block already marked is the same one
    assert (
        run(ANTHROPIC, Request(0, blocks(1, 1, 1, 2000, marks={i: "5m" for i in range(4)}), automatic="5m"))[0].write_5m
        == 2003
    )


def test_empty_request():
    assert run(ANTHROPIC, Request(0, (), automatic="5m")) == (Billed(),)
    assert run(OPENAI, Request(0, ())) == (Billed(),)


# --------------------------------------------------------------------------------- openai


def test_openai_caches_every_prefix_in_128_token_steps_without_a_write_premium():
    first, second = run(OPENAI, Request(0, blocks(1100, 200)), Request(10, blocks(1100, 200, 50)))
    assert first == Billed(uncached=1300)
    assert second == Billed(uncached=1350 - 1280, read=1280)  # 1,300 cached: 1,024 + 2 x 128
    assert second.cost(OPENAI) == pytest.approx(70 + 128)


def test_openai_below_the_minimum_and_a_changed_prefix():
    assert run(OPENAI, Request(0, blocks(1000)), Request(1, blocks(1000, 10)))[1] == Billed(uncached=1010)
    # the first block changed: nothing of the prefix is shared
    assert run(OPENAI, Request(0, blocks(3000, 10)), Request(1, blocks(2999, 10)))[1] == Billed(uncached=3009)
    # a shared first block is still read when a later one changed
    first, second = blocks(2048, 500, tag="a"), blocks(2048, tag="a") + blocks(700, tag="z")
    assert run(OPENAI, Request(0, first), Request(1, second))[1] == Billed(uncached=700, read=2048)


def test_openai_prefixes_expire_after_the_idle_ttl():
    request = blocks(4000)
    bills = run(OPENAI, Request(0, request), Request(200, request), Request(600, request))
    assert [b.read for b in bills] == [0, 3968, 0]
    assert pc.profile_for("openai", "gpt-4o-2024-08-06").read == 0.5
    assert pc.profile_for("openai", "gpt-5.1").read == 0.1


def test_openai_ignores_breakpoints():
    assert run(OPENAI, Request(0, blocks(2000, marks={0: "5m"}), automatic="5m")) == (Billed(uncached=2000),)


# ------------------------------------------------------------------------ state and queries


def test_the_cache_is_an_immutable_value():
    empty = Cache(ANTHROPIC)
    request = Request(0, blocks(2000, marks={0: "5m"}))
    billed, after = empty.bill(request)
    assert empty.entries == {} and len(after.entries) == 1
    assert empty.bill(request)[0] == billed  # billing again from the same state: the same
    with pytest.raises(TypeError):
        after.entries["x"] = None  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        billed.read = 1  # type: ignore[misc]


def test_last_written_and_quote_answer_without_changing_the_cache():
    prefix = blocks(2000, 500, marks={1: "5m"})
    _, cache = Cache(ANTHROPIC).bill(Request(100, prefix))
    assert cache.last_written(prefix, 200) == 100
    assert cache.last_written(prefix + blocks(5, tag="x"), 200) == 100  # its longest cached prefix
    assert cache.last_written(prefix, 401) is None  # expired: a cut now costs no extra write
    assert cache.last_written(blocks(1, tag="other"), 200) is None
    assert cache.quote(Request(200, prefix)) == Billed(read=2500)
    assert cache.quote(Request(401, prefix)) == Billed(write_5m=2500)
    assert cache.last_written(prefix, 200) == 100  # unchanged by the quotes
    _, renewed = cache.bill(Request(250, prefix))
    assert renewed.last_written(prefix, 450) == 100  # a read renews the entry, not its write time


def test_billed_sums_and_costs():
    a, b = Billed(1, 2, 3, 4), Billed(10, 20, 30, 40)
    assert a + b == Billed(11, 22, 33, 44) and pc.total([a, b]) == a + b and pc.total([]) == Billed()
    assert (a + b).total == 110 and (a + b).written == 77
    assert Billed(100, 1000, 100, 100).cost(ANTHROPIC) == pytest.approx(100 + 100 + 125 + 200)


def test_chain_hashes_depend_on_everything_before():
    a, b, c = Block("a", 1), Block("b", 1), Block("c", 1)
    assert pc.chain([a, b])[1] != pc.chain([c, b])[1]
    assert pc.chain([a, b])[0] == pc.chain([a, c])[0]
    assert pc.chain([a, b]) == pc.chain([Block("a", 9, "5m"), Block("b", 7)])  # tokens and marks not hashed


# ==================== cache cuts
# Cuts priced at cache prices (proxy.core.prompt_cache) and the session record they read
# (proxy.core.prompt_cache).

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


# ==================== keepalive
# Keep-alive pings' schedule and bounds (proxy.core.prompt_cache) and their bodies
# (proxy.formats.prompt_cache).

LIMITS = ka.Limits(min_tokens=20_000, max_pings=3, idle=900.0, ttl=300.0)
HELD = ka.Held(tokens=50_000, turn_at=1000.0, sent_at=1000.0)


def test_a_ping_is_due_shortly_before_the_ttl_of_the_last_send():
    at = ka.next_ping(HELD, LIMITS, pc.ANTHROPIC)
    assert at == pytest.approx(1000.0 + 300 - LIMITS.lead)
    assert HELD.sent_at < at < HELD.sent_at + LIMITS.ttl
    after_one = dataclasses.replace(HELD, pings=1, sent_at=at)
    assert ka.next_ping(after_one, LIMITS, pc.ANTHROPIC) == pytest.approx(at + 300 - LIMITS.lead)


def test_no_ping_for_a_small_prefix_past_the_pings_or_past_the_idle_limit():
    assert ka.next_ping(dataclasses.replace(HELD, tokens=19_999), LIMITS, pc.ANTHROPIC) is None
    assert ka.next_ping(dataclasses.replace(HELD, pings=3), LIMITS, pc.ANTHROPIC) is None
    late = dataclasses.replace(HELD, pings=2, sent_at=HELD.turn_at + 700)  # the next would be 970 s after the turn
    assert ka.next_ping(late, LIMITS, pc.ANTHROPIC) is None


def test_the_pings_never_cost_more_than_the_write_they_avoid():
    many = dataclasses.replace(LIMITS, max_pings=100, idle=1e9)
    counts = {}
    for profile in (pc.ANTHROPIC, pc.OPENAI):
        held, n = HELD, 0
        while ka.next_ping(held, many, profile) is not None:
            n += 1
            held = dataclasses.replace(held, pings=n)
        counts[profile.name] = n
        assert (
            n * ka.ping_cost(profile, HELD) <= ka.write_avoided(profile, HELD) < (n + 1) * ka.ping_cost(profile, HELD)
        )
    # Anthropic: a read at 0.1 against a write at 1.25 less the read (11); OpenAI: 0.9 of an uncached prefix
    assert counts == {"anthropic": 11, "openai": 8}


def test_a_held_prefix_expires_past_the_idle_limit_and_its_ttl():
    assert not ka.expired(HELD, LIMITS, 1000.0 + 800)
    assert ka.expired(HELD, LIMITS, 1000.0 + 901 + 300)


MESSAGES = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 4096,
    "stream": True,
    "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
    "messages": [{"role": "user", "content": "hi"}],
}


def test_ping_bodies_keep_the_prompt_and_ask_for_the_least_output():
    body = ping("messages", MESSAGES)
    assert body == {**{k: v for k, v in MESSAGES.items() if k != "stream"}, "max_tokens": 1}
    chat = ping(
        "chat/completions",
        {
            "model": "gpt-4o",
            "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 99,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert chat == {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "x"}],
        "max_completion_tokens": 1,
        "n": 1,
        "store": False,
    }
    responses = ping("responses", {"model": "gpt-5", "input": "x", "stream": True, "previous_response_id": "resp_1"})
    assert responses == {
        "model": "gpt-5",
        "input": "x",
        "previous_response_id": "resp_1",
        "max_output_tokens": 16,
        "store": False,
        "background": False,
    }


def test_no_ping_where_it_keeps_nothing_warm():
    assert ping("messages", {**MESSAGES, "system": "sys"}) is None  # Anthropic caches only where asked
    assert ping("messages", {**MESSAGES, "cache_control": {"type": "ephemeral"}}) is not None
    assert ping("messages", {**MESSAGES, "thinking": {"type": "enabled", "budget_tokens": 2048}}) is None
    assert ping("embeddings", {"input": "x"}) is None
    assert ping("messages", ["not", "an", "object"]) is None


def test_no_ping_adds_to_a_conversation_kept_upstream():
    """The upstream adds each response's input and output to the `conversation` it names: a ping
    would write the turn's input again, and its own 16-token answer, into the client's conversation."""
    assert ping("responses", {"model": "gpt-5", "input": "x", "conversation": "conv_1"}) is None
    assert ping("responses", {"model": "gpt-5", "input": "x", "conversation": {"id": "conv_1"}}) is None
    assert ping("responses", {"model": "gpt-5", "input": "x", "conversation": None}) is not None
