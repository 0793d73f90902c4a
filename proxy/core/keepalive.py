"""Keep-alive pings: when a session's prompt cache is kept warm, and until when. Pure.

A provider drops a cached prefix `ttl` seconds after it was last sent; the session's next turn
then writes it again (Anthropic: 1.25 x an uncached token; OpenAI: billed uncached). A 1-token
request with the exact prefix, sent shortly before (`lead` seconds), is billed as a cache read
(0.1 x) and renews it. For a session whose forwarded prefix holds `min_tokens` at least:

- a ping is due at `lead` seconds before the TTL of the last send (the turn's, or the last ping's);
- none once the session has been idle past `idle` seconds since its turn (a ping due later is
  not sent), nor past `max_pings` since its turn;
- none that would take the pings since the turn past the write they avoid: their cost (each a
  read of the prefix and its few output tokens) stays at most what the next turn would pay
  more with the cache cold than warm, both quoted by `proxy.core.provider_cache`.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.core import provider_cache as pc

OUTPUT_PRICE = 5.0  # an output token in input tokens (both providers' flagship ratio)
MAX_LEAD = 30.0  # seconds before the TTL a ping goes, at most


@dataclass(frozen=True)
class Limits:
    min_tokens: int
    max_pings: int
    idle: float  # seconds after its turn a session gets no more pings
    ttl: float  # the provider's idle TTL the proxy assumes

    @property
    def lead(self) -> float:
        """How long before the TTL a ping goes: a fifth of it, at most MAX_LEAD seconds."""
        return min(MAX_LEAD, self.ttl / 5)


@dataclass(frozen=True)
class Held:
    """A session's forwarded prefix as one worker holds it."""

    tokens: int
    turn_at: float  # when its turn sent it
    sent_at: float  # when it was last sent: the turn, or the last ping
    pings: int = 0  # pings since the turn
    output_tokens: int = 1  # what one ping may generate (the API's least: 16 on Responses)


def ping_cost(profile: pc.Profile, held: Held) -> float:
    """One ping, in input tokens: the prefix read from the cache, and its output."""
    block = (pc.Block("prefix", held.tokens, pc.FIVE_MINUTES),)
    _, warm = pc.Cache(profile).bill(pc.Request(0.0, block))
    read = warm.quote(pc.Request(profile.ttl / 2, block)).cost(profile)
    return read + OUTPUT_PRICE * held.output_tokens


def write_avoided(profile: pc.Profile, held: Held) -> float:
    """What the next turn pays more on a cold cache than on a warm one, in input tokens."""
    block = (pc.Block("prefix", held.tokens, pc.FIVE_MINUTES),)
    cold = pc.Cache(profile).quote(pc.Request(0.0, block)).cost(profile)
    _, warm = pc.Cache(profile).bill(pc.Request(0.0, block))
    return cold - warm.quote(pc.Request(profile.ttl / 2, block)).cost(profile)


def next_ping(held: Held, limits: Limits, profile: pc.Profile) -> float | None:
    """When this session's next ping is due (time.time() seconds); None: it gets no more."""
    if held.tokens < limits.min_tokens or held.pings >= limits.max_pings:
        return None
    due = held.sent_at + limits.ttl - limits.lead
    if due - held.turn_at > limits.idle:
        return None
    if (held.pings + 1) * ping_cost(profile, held) > write_avoided(profile, held):
        return None
    return due


def expired(held: Held, limits: Limits, now: float) -> bool:
    """Nothing of it is worth holding any more: past the idle limit and the TTL of its last send."""
    return now - held.turn_at > limits.idle and now - held.sent_at > limits.ttl
