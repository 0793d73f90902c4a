"""A provider's prompt cache, pure: what each request is billed as a function of the requests
before it (`Cache`, `Profile`), when a session's prefix was last sent (the record a fleet
shares), when a compression cut is made early or waits (cuts priced at cache prices), and when
a keep-alive ping keeps the cache warm.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from hashlib import blake2b
from types import MappingProxyType

from proxy.errors import Failure, Kind

# ==================== the bill of a prompt cache
# A provider's prompt cache, as a pure function of the requests it sees: what each one is billed.
#
# Providers bill a request's input in three kinds of tokens: uncached, read from the cache (cheap)
# and written to it (Anthropic: dearer than uncached). Which is which depends on what earlier
# requests left in the cache and on how long ago: a prefix lives `ttl` seconds after it was last
# written or read. This module is that bookkeeping, format-neutral: a request is its prefix as a
# sequence of `Block`s (a content hash and a token count each, in the order the provider caches
# them), the breakpoints it marks, and the time it is sent. The wire formats turn a body into
# blocks (`proxy.formats.messages.cache_blocks`, `proxy.formats.chat.cache_blocks`); the test
# harness's fake upstream, `replay` and the bench bill with it.
#
# Two profiles:
#
# - `anthropic`: caching only where the request asks. A `cache_control` on a block is a breakpoint
#   (at most 4; a request-level `cache_control` puts one on the last block, and counts); the prefix
#   up to each breakpoint is looked up at the breakpoint and at the boundaries before it, 20 in all
#   (`lookback`), where an earlier request wrote one. The longest live hit is read
#   (0.1 x), everything after it up to the last breakpoint is written (1.25 x for 5 minutes, 2 x
#   for 1 hour; a 1-hour breakpoint may not follow a 5-minute one), the rest is uncached. A prefix
#   shorter than the model's minimum (1,024 tokens; 2,048 or 4,096 for some models) is never
#   written.
# - `openai`: automatic: every request's prefix is cached at every block boundary; the longest live
#   one is read, in 128-token steps from 1,024 tokens; no write premium. OpenAI keeps an idle prefix
#   5 to 10 minutes; the profile takes 5 (the bill is then an upper bound).
#
# The state (`Cache`) is an immutable value: `bill` returns the request's `Billed` and the cache
# after it. `last_written` and `quote` answer what keep-alive and cold-cache cuts need to know:
# when a prefix was last written, and what a request would cost now, without sending it.

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


# ==================== last sent
# When a session's prefix was last sent upstream: the record a fleet shares (in the store).
#
# A provider's prompt cache holds a prefix for a few minutes after it was last sent; whether a cut
# is cheap (the cache is cold anyway: cache cuts, below) and whether a keep-alive ping is due
# (keepalive, below) both depend on when the session's forwarded prefix last went out, on
# whichever replica sent it. This is that record, as a value: what was sent (a digest of the bytes,
# never the bytes), its tokens, when (wall-clock seconds, so replicas agree), the model, where it
# went (the endpoint and the API family) and with which kind of credential (the client's own or
# the proxy's), the turns the session has made and the proxy summary it forwarded (the prefix hash
# that summary is stored under, "" for none). `encode`/`decode` are its stored form; a stored value
# that is not one (another version, a client-sized model name) reads as None.

VERSION = 1
MAX_FIELD = 256  # characters of a text field (a model name, an endpoint)
MAX_TOKENS = 10**9
MAX_TURNS = 10**9


def digest(content: bytes) -> str:
    """What identifies a forwarded body: 16 bytes of blake2b, hex."""
    return blake2b(content, digest_size=16, person=b"offload-sent").hexdigest()


@dataclass(frozen=True)
class LastSent:
    digest: str  # `digest` of the forwarded body's bytes
    tokens: int  # its tokens as the proxy counted them
    at: float  # when it was sent (time.time())
    model: str | None = None
    endpoint: str = ""  # the upstream path it went to ("chat/completions", "messages", …)
    family: str = ""  # "openai" | "anthropic": whose API
    credential: str = ""  # "client" (its own key) | "shared" (the proxy's) | …
    turns: int = 1  # the session's turns sent so far (this one included)
    summary: str = ""  # the prefix hash of the proxy summary this body forwarded ("" none)

    def idle(self, now: float) -> float:
        """Seconds since it was sent (0 for a clock that went back)."""
        return max(0.0, now - self.at)

    def encode(self) -> bytes:
        return json.dumps({"v": VERSION, **asdict(self)}, separators=(",", ":")).encode()

    def then(self, sent: LastSent) -> LastSent:
        """`sent`, the next turn of this session: its turns counted on from these."""
        return LastSent(**{**asdict(sent), "turns": min(MAX_TURNS, self.turns + 1)})


def _text(value: object, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > MAX_FIELD:
        raise ValueError("not a short text")
    return value


def _count(value: object, high: int) -> int:
    if type(value) is not int or not 0 <= value <= high:
        raise ValueError("not a count")
    return value


def decode(raw: bytes | None) -> LastSent | None:
    """The record stored as `raw`; None for none, or for anything that is not one."""
    if not raw:
        return None
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("v") != VERSION:
            return None
        at = data.get("at")
        if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at):
            return None
        return LastSent(
            digest=_text(data.get("digest")) or "",
            tokens=_count(data.get("tokens"), MAX_TOKENS),
            at=float(at),
            model=_text(data.get("model"), optional=True),
            endpoint=_text(data.get("endpoint")) or "",
            family=_text(data.get("family")) or "",
            credential=_text(data.get("credential")) or "",
            turns=max(1, _count(data.get("turns"), MAX_TURNS)),
            summary=_text(data.get("summary")) or "",
        )
    except (ValueError, UnicodeDecodeError):
        return None


# ==================== cache cuts
# Cuts priced at cache prices: when a compression cut is made early, and when it waits. Pure.
#
# A cut (a summary standing for items[head:cut]) rewrites everything the request holds after the
# head: the provider writes it to its cache again, at the write price (Anthropic: 1.25 x an
# uncached token for 5 minutes; OpenAI: no premium, but a miss is billed in full), where without
# the cut the same turn would have read it (0.1 x). So:
#
# - the cache is cold anyway (the session's prefix was last sent longer ago than the provider's
#   TTL, `LastSent`): everything is written this turn, cut or not, and a cut makes it smaller. A
#   cut that is due soon (what it folds is within `COLD_MARGIN` of its trigger) and whose summary
#   is ready is made now (`early`);
# - the cache is warm: a cut is worth making when what it saves on the reads of the turns that
#   follow outweighs what it costs now over reading (`price`). In input tokens, with r the read
#   and w the write price of the provider's profile:
#
#       extra  = after x w - (after + removed) x r     (this turn: the rewritten rest written, not read)
#       saved  = removed x r x remaining               (each later turn reads `removed` fewer tokens)
#
#   where `after` is what the turn forwards from the cut on (the summary and the kept rest),
#   `removed` what the cut takes out of every later request, and `remaining` the expected turns
#   still to come: as many as the session has made so far (a conversation that has gone n turns
#   is expected to go about n more), at least 1, at most `MAX_REMAINING`. A cold cache makes
#   `extra` negative (everything is written either way: `extra = (after - (after + removed)) x w`).
#
# The decision applies only where not cutting leaves the turn within its trigger: a newer summary
# is not taken while the one last forwarded still holds what follows it under the trigger
# (`proxy.offload.summaries`); the trigger and the hard limit decide as before otherwise.

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


# ==================== keepalive
# Keep-alive pings: when a session's prompt cache is kept warm, and until when. Pure.
#
# A provider drops a cached prefix `ttl` seconds after it was last sent; the session's next turn
# then writes it again (Anthropic: 1.25 x an uncached token; OpenAI: billed uncached). A 1-token
# request with the exact prefix, sent shortly before (`lead` seconds), is billed as a cache read
# (0.1 x) and renews it. For a session whose forwarded prefix holds `min_tokens` at least:
#
# - a ping is due at `lead` seconds before the TTL of the last send (the turn's, or the last ping's);
# - none once the session has been idle past `idle` seconds since its turn (a ping due later is
#   not sent), nor past `max_pings` since its turn;
# - none that would take the pings since the turn past the write they avoid: their cost (each a
#   read of the prefix and its few output tokens) stays at most what the next turn would pay
#   more with the cache cold than warm, both quoted by the `Cache` above.

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


def ping_cost(profile: Profile, held: Held) -> float:
    """One ping, in input tokens: the prefix read from the cache, and its output."""
    block = (Block("prefix", held.tokens, FIVE_MINUTES),)
    _, warm = Cache(profile).bill(Request(0.0, block))
    read = warm.quote(Request(profile.ttl / 2, block)).cost(profile)
    return read + OUTPUT_PRICE * held.output_tokens


def write_avoided(profile: Profile, held: Held) -> float:
    """What the next turn pays more on a cold cache than on a warm one, in input tokens."""
    block = (Block("prefix", held.tokens, FIVE_MINUTES),)
    cold = Cache(profile).quote(Request(0.0, block)).cost(profile)
    _, warm = Cache(profile).bill(Request(0.0, block))
    return cold - warm.quote(Request(profile.ttl / 2, block)).cost(profile)


def next_ping(held: Held, limits: Limits, profile: Profile) -> float | None:
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
