"""A provider's prompt cache, as a pure function of the requests it sees: what each one is billed.

Providers bill a request's input in three kinds of tokens: uncached, read from the cache (cheap)
and written to it (Anthropic: dearer than uncached). Which is which depends on what earlier
requests left in the cache and on how long ago: a prefix lives `ttl` seconds after it was last
written or read. This module is that bookkeeping, format-neutral: a request is its prefix as a
sequence of `Block`s (a content hash and a token count each, in the order the provider caches
them), the breakpoints it marks, and the time it is sent. The wire formats turn a body into
blocks (`proxy.formats.messages.cache_blocks`, `proxy.formats.chat.cache_blocks`); the test
harness's fake upstream, `replay` and the bench bill with it.

Two profiles:

- `anthropic`: caching only where the request asks. A `cache_control` on a block is a breakpoint
  (at most 4; a request-level `cache_control` puts one on the last block, and counts); the prefix
  up to each breakpoint is looked up at the breakpoint and at the boundaries before it, 20 in all
  (`lookback`), where an earlier request wrote one. The longest live hit is read
  (0.1 x), everything after it up to the last breakpoint is written (1.25 x for 5 minutes, 2 x
  for 1 hour; a 1-hour breakpoint may not follow a 5-minute one), the rest is uncached. A prefix
  shorter than the model's minimum (1,024 tokens; 2,048 or 4,096 for some models) is never
  written.
- `openai`: automatic: every request's prefix is cached at every block boundary; the longest live
  one is read, in 128-token steps from 1,024 tokens; no write premium. OpenAI keeps an idle prefix
  5 to 10 minutes; the profile takes 5 (the bill is then an upper bound).

The state (`Cache`) is an immutable value: `bill` returns the request's `Billed` and the cache
after it. `last_written` and `quote` answer what keep-alive and cold-cache cuts need to know:
when a prefix was last written, and what a request would cost now, without sending it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from proxy.errors import Failure, Kind

FIVE_MINUTES = "5m"
ONE_HOUR = "1h"
TTLS = (FIVE_MINUTES, ONE_HOUR)


class CacheRequestError(Failure, ValueError):
    """A request the provider would refuse (a 400): too many breakpoints, a 1-hour one after a 5-minute one."""

    kind = Kind.UNPROCESSABLE


@dataclass(frozen=True)
class Profile:
    """How one provider caches and bills, prices in input tokens (1.0 = an uncached token)."""

    name: str
    ttl: float  # seconds a prefix written with the default TTL lives idle (every read renews it)
    long_ttl: float  # the longer TTL a breakpoint may ask for (`ONE_HOUR`); = ttl where there is none
    read: float  # a token read from the cache
    write: float  # a token written with the default TTL
    long_write: float  # a token written with the long TTL
    minimum: int  # tokens a cached prefix holds at least
    granularity: int  # a hit is the minimum plus a multiple of this many tokens (1: exact)
    explicit: bool  # True: only at breakpoints the request marks (Anthropic); False: every prefix (OpenAI)
    max_breakpoints: int = 0  # more is refused (0: no breakpoints at all)
    lookback: int = 0  # block boundaries looked up at a breakpoint, its own included

    def ttl_of(self, mark: str | None) -> float:
        return self.long_ttl if mark == ONE_HOUR else self.ttl


ANTHROPIC = Profile(
    "anthropic",
    ttl=300.0,
    long_ttl=3600.0,
    read=0.1,
    write=1.25,
    long_write=2.0,
    minimum=1024,
    granularity=1,
    explicit=True,
    max_breakpoints=4,
    lookback=20,
)
OPENAI = Profile(
    "openai",
    ttl=300.0,
    long_ttl=300.0,
    read=0.1,
    write=1.0,
    long_write=1.0,
    minimum=1024,
    granularity=128,
    explicit=False,
)
PROFILES: Mapping[str, Profile] = MappingProxyType({p.name: p for p in (ANTHROPIC, OPENAI)})

# Anthropic's minimum cacheable prefix by model name prefix (the first that matches; else 1,024).
ANTHROPIC_MINIMUMS = (
    ("claude-opus-4-5", 4096),
    ("claude-opus-4-6", 4096),
    ("claude-haiku-4-5", 4096),
    ("claude-sonnet-4-6", 2048),
    ("claude-3-5-haiku", 2048),
    ("claude-3-haiku", 2048),
    ("claude-haiku-3", 2048),
)
# OpenAI's cached-input price by model name prefix (the first that matches; else 0.1, the gpt-5 family's).
OPENAI_READS = (("gpt-4o", 0.5), ("gpt-4.1", 0.25), ("o1", 0.5), ("o3", 0.25), ("o4", 0.25))


def profile_for(name: str, model: str | None = None) -> Profile:
    """The named profile, with the minimum (Anthropic) or read price (OpenAI) of `model` when known."""
    profile = PROFILES[name]
    model = (model or "").lower().rsplit("/", 1)[-1]
    if profile is ANTHROPIC:
        minimum = next((n for prefix, n in ANTHROPIC_MINIMUMS if model.startswith(prefix)), profile.minimum)
        return replace(profile, minimum=minimum)
    if profile is OPENAI:
        read = next((r for prefix, r in OPENAI_READS if model.startswith(prefix)), profile.read)
        return replace(profile, read=read)
    return profile


@dataclass(frozen=True)
class Block:
    """One cacheable unit of a request's prefix: a tool, a system block, a message's content block.
    `key` hashes its content (not its breakpoint: moving a breakpoint keeps the cache);
    `mark` is its breakpoint's TTL (`FIVE_MINUTES`, `ONE_HOUR`), None for none."""

    key: str
    tokens: int
    mark: str | None = None


@dataclass(frozen=True)
class Request:
    """What the provider sees of one request: when, its prefix, and a request-level breakpoint
    (`automatic`: Anthropic's top-level `cache_control`, on the last block)."""

    at: float
    blocks: tuple[Block, ...]
    automatic: str | None = None


@dataclass(frozen=True)
class Billed:
    """A request's input as billed: uncached, read and written (by TTL) tokens."""

    uncached: int = 0
    read: int = 0
    write_5m: int = 0
    write_1h: int = 0

    @property
    def written(self) -> int:
        return self.write_5m + self.write_1h

    @property
    def total(self) -> int:
        return self.uncached + self.read + self.written

    def cost(self, profile: Profile) -> float:
        """In input tokens: what the provider charges for this input over the price of one token."""
        return (
            self.uncached
            + profile.read * self.read
            + profile.write * self.write_5m
            + profile.long_write * self.write_1h
        )

    def __add__(self, other: Billed) -> Billed:
        return Billed(
            self.uncached + other.uncached,
            self.read + other.read,
            self.write_5m + other.write_5m,
            self.write_1h + other.write_1h,
        )


@dataclass(frozen=True)
class Entry:
    """A cached prefix: its tokens, when it was written, until when it lives, its TTL mark."""

    tokens: int
    written: float
    expires: float
    mark: str | None


def chain(blocks: Sequence[Block]) -> tuple[str, ...]:
    """The hash of each prefix blocks[:i+1]: what the cache is keyed by."""
    out, previous = [], b""
    for block in blocks:
        previous = hashlib.sha256(previous + b"\0" + block.key.encode()).digest()[:16]
        out.append(previous.hex())
    return tuple(out)


def content_key(*parts: str) -> str:
    """A block key from the parts of its content (canonical text), as the adapters make them."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


def _cumulative(blocks: Sequence[Block]) -> list[int]:
    out, total = [], 0
    for block in blocks:
        total += max(0, block.tokens)
        out.append(total)
    return out


def breakpoints(profile: Profile, request: Request) -> list[tuple[int, str]]:
    """The request's breakpoints (block index, TTL mark), in order; raises CacheRequestError for
    what the provider refuses."""
    if not profile.explicit:
        return []
    marks = {i: b.mark for i, b in enumerate(request.blocks) if b.mark is not None}
    if request.automatic is not None and request.blocks:
        marks.setdefault(len(request.blocks) - 1, request.automatic)
    found = sorted(marks.items())
    if len(found) > profile.max_breakpoints:
        raise CacheRequestError(
            f"A maximum of {profile.max_breakpoints} blocks with cache_control may be provided. Found {len(found)}."
        )
    seen_short = False
    for _, mark in found:
        if mark not in TTLS:
            raise CacheRequestError(f"cache_control.ttl must be one of {', '.join(TTLS)}")
        if mark == ONE_HOUR and seen_short:
            raise CacheRequestError("a ttl='1h' cache_control block must not come after a ttl='5m' one")
        seen_short = seen_short or mark == FIVE_MINUTES
    return found


@dataclass(frozen=True)
class Cache:
    """The provider's cache for one prefix space (a tenant's key, an organisation): prefix hash →
    live entry. Immutable: `bill` returns the next one."""

    profile: Profile
    entries: Mapping[str, Entry] = field(default_factory=lambda: MappingProxyType({}))

    def live(self, at: float) -> dict[str, Entry]:
        return {k: e for k, e in self.entries.items() if e.expires > at}

    def _rounded(self, tokens: int) -> int:
        """A hit's billed length: at least the minimum, then in steps of the granularity."""
        if tokens < self.profile.minimum:
            return 0
        step = self.profile.granularity
        return self.profile.minimum + (tokens - self.profile.minimum) // step * step

    def bill(self, request: Request) -> tuple[Billed, Cache]:
        """What `request` is billed, and the cache after it."""
        if self.profile.explicit:
            return self._bill_explicit(request)
        return self._bill_automatic(request)

    def quote(self, request: Request) -> Billed:
        """What `request` would be billed now, the cache left as it is."""
        return self.bill(request)[0]

    def last_written(self, blocks: Sequence[Block], at: float) -> float | None:
        """When the longest live cached prefix of `blocks` was written (None: nothing of it is
        cached at `at`): how cold a cut made now would find the cache."""
        live = self.live(at)
        for h in reversed(chain(blocks)):
            if h in live:
                return live[h].written
        return None

    def _bill_automatic(self, request: Request) -> tuple[Billed, Cache]:
        profile, at = self.profile, request.at
        hashes, cum = chain(request.blocks), _cumulative(request.blocks)
        live = self.live(at)
        hit = next((i for i in range(len(hashes) - 1, -1, -1) if hashes[i] in live), None)
        read = self._rounded(cum[hit]) if hit is not None else 0
        for i, h in enumerate(hashes):  # every prefix of this request is now cached (or renewed)
            if cum[i] >= profile.minimum:
                old = live.get(h)
                live[h] = Entry(cum[i], old.written if old else at, at + profile.ttl, None)
        total = cum[-1] if cum else 0
        return Billed(uncached=total - read, read=read), Cache(profile, MappingProxyType(live))

    def _bill_explicit(self, request: Request) -> tuple[Billed, Cache]:
        profile, at = self.profile, request.at
        marks = breakpoints(profile, request)
        hashes, cum = chain(request.blocks), _cumulative(request.blocks)
        live = self.live(at)
        hit: int | None = None
        renewed: set[int] = set()
        for (
            index,
            _,
        ) in marks:  # each breakpoint looks up its own prefix, and the boundaries before it (`lookback` in all)
            for j in range(index, max(-1, index - profile.lookback), -1):
                if hashes[j] in live:
                    renewed.add(j)
                    hit = j if hit is None or j > hit else hit
                    break
        read = cum[hit] if hit is not None else 0
        for j in renewed:
            entry = live[hashes[j]]
            live[hashes[j]] = replace(entry, expires=max(entry.expires, at + profile.ttl_of(entry.mark)))
        write_5m = write_1h = 0
        covered = read
        for index, mark in marks:
            if cum[index] <= covered or cum[index] < profile.minimum:
                continue  # already read, or too short to cache: its tokens go to the next breakpoint
            if mark == ONE_HOUR:
                write_1h += cum[index] - covered
            else:
                write_5m += cum[index] - covered
            covered = cum[index]
            live[hashes[index]] = Entry(cum[index], at, at + profile.ttl_of(mark), mark)
        total = cum[-1] if cum else 0
        billed = Billed(uncached=total - covered, read=read, write_5m=write_5m, write_1h=write_1h)
        return billed, Cache(profile, MappingProxyType(live))


def bill_all(profile: Profile, requests: Iterable[Request], cache: Cache | None = None) -> tuple[Billed, ...]:
    """Each request's bill, in order, through one cache (empty unless given)."""
    state = cache or Cache(profile)
    out = []
    for request in requests:
        billed, state = state.bill(request)
        out.append(billed)
    return tuple(out)


def total(bills: Iterable[Billed]) -> Billed:
    out = Billed()
    for billed in bills:
        out = out + billed
    return out
