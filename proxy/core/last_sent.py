"""When a session's prefix was last sent upstream: the record a fleet shares (in the store).

A provider's prompt cache holds a prefix for a few minutes after it was last sent; whether a cut
is cheap (the cache is cold anyway: `proxy.core.cache_cuts`) and whether a keep-alive ping is due
(`proxy.core.keepalive`) both depend on when the session's forwarded prefix last went out, on
whichever replica sent it. This is that record, as a value: what was sent (a digest of the bytes,
never the bytes), its tokens, when (wall-clock seconds, so replicas agree), the model, where it
went (the endpoint and the API family) and with which kind of credential (the client's own or
the proxy's), the turns the session has made and the proxy summary it forwarded (the prefix hash
that summary is stored under, "" for none). `encode`/`decode` are its stored form; a stored value
that is not one (another version, a client-sized model name) reads as None.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from hashlib import blake2b

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
