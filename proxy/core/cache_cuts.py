"""Cuts priced at cache prices: when a compression cut is made early, and when it waits. Pure.

A cut (a summary standing for items[head:cut]) rewrites everything the request holds after the
head: the provider writes it to its cache again, at the write price (Anthropic: 1.25 x an
uncached token for 5 minutes; OpenAI: no premium, but a miss is billed in full), where without
the cut the same turn would have read it (0.1 x). So:

- the cache is cold anyway (the session's prefix was last sent longer ago than the provider's
  TTL, `LastSent`): everything is written this turn, cut or not, and a cut makes it smaller. A
  cut that is due soon (what it folds is within `COLD_MARGIN` of its trigger) and whose summary
  is ready is made now (`early`);
- the cache is warm: a cut is worth making when what it saves on the reads of the turns that
  follow outweighs what it costs now over reading (`price`). In input tokens, with r the read
  and w the write price of the provider's profile:

      extra  = after x w - (after + removed) x r     (this turn: the rewritten rest written, not read)
      saved  = removed x r x remaining               (each later turn reads `removed` fewer tokens)

  where `after` is what the turn forwards from the cut on (the summary and the kept rest),
  `removed` what the cut takes out of every later request, and `remaining` the expected turns
  still to come: as many as the session has made so far (a conversation that has gone n turns
  is expected to go about n more), at least 1, at most `MAX_REMAINING`. A cold cache makes
  `extra` negative (everything is written either way: `extra = (after - (after + removed)) x w`).

The decision applies only where not cutting leaves the turn within its trigger: a newer summary
is not taken while the one last forwarded still holds what follows it under the trigger
(`proxy.offload.summaries`); the trigger and the hard limit decide as before otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.core.last_sent import LastSent
from proxy.core.provider_cache import Profile

COLD_MARGIN = 0.2  # a cut is due soon when what it folds reaches 1 - this of its trigger
MAX_REMAINING = 20  # turns a cut is expected to pay back over, at most


@dataclass(frozen=True)
class CutContext:
    """What the cut decisions know of the session: its last forwarded prefix (None: unknown),
    now (time.time()), and the provider's profile (its TTL the one the proxy assumes)."""

    sent: LastSent | None
    now: float
    profile: Profile

    @property
    def cold(self) -> bool:
        """The provider's cache holds nothing of the session: its prefix was sent longer ago than
        the TTL. Unknown (no record) is not cold."""
        return self.sent is not None and self.sent.idle(self.now) > self.profile.ttl

    @property
    def remaining(self) -> int:
        turns = self.sent.turns if self.sent is not None else 1
        return max(1, min(MAX_REMAINING, turns))


@dataclass(frozen=True)
class CutPrice:
    """In input tokens (1.0 = an uncached token): what a cut costs this turn over not making it,
    and what it saves over the turns expected to follow."""

    extra: float
    saved: float

    @property
    def worth(self) -> bool:
        return self.saved > self.extra


def price(ctx: CutContext, *, after: int, removed: int) -> CutPrice:
    """The price of a cut that forwards `after` tokens from the cut on and takes `removed`
    tokens out of every later request (the formula in the module docstring)."""
    profile, after, removed = ctx.profile, max(0, after), max(0, removed)
    if ctx.cold:
        extra = (after - (after + removed)) * profile.write
    else:
        extra = after * profile.write - (after + removed) * profile.read
    return CutPrice(extra=extra, saved=removed * profile.read * ctx.remaining)


def early(ctx: CutContext | None, *, foldable: int, trigger: int) -> bool:
    """Make a cut below its trigger now: the cache is cold anyway and the cut is due soon."""
    return ctx is not None and ctx.cold and foldable >= (1 - COLD_MARGIN) * trigger


def keep_previous(ctx: CutContext | None, *, after: int, removed: int) -> bool:
    """Forward the summary last forwarded rather than a newer one (which both fit the trigger):
    the cache is warm and the newer cut would cost more than it saves."""
    return ctx is not None and not ctx.cold and not price(ctx, after=after, removed=removed).worth
