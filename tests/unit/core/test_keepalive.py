"""Keep-alive pings' schedule and bounds (proxy.core.keepalive) and their bodies
(proxy.formats.prompt_cache)."""

from __future__ import annotations

import dataclasses

import pytest

from proxy.core import keepalive as ka
from proxy.core import provider_cache as pc
from proxy.formats.prompt_cache import ping

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
