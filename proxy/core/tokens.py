"""Token counting: tiktoken cached per content hash (an estimate when no encoding loads), and
images as providers bill them (their dimensions read from the file header, never decoded).
"""

from __future__ import annotations

import asyncio
import binascii
import itertools
import json
import logging
import math
import operator
import os
import re
import struct
import threading
from collections.abc import Callable, Iterable, MutableMapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import orjson

from proxy.core.jsonio import JsonObject, footprint

# ==================== images
# Images as providers bill them: their dimensions read from the file header, never decoded.
#
# A header reader of a few dozen lines rather than Pillow: the proxy needs only (format, width,
# height) of PNG, JPEG, GIF and WebP, from the first bytes of a base64 payload, on the request
# path; Pillow is a 10 MB native dependency whose lazy `open` still wants a file object of the
# whole image (so the whole base64 decoded first), and the decoders it loads are attack surface
# the proxy never needs. Here at most the first HEAD_CHARS of base64 are decoded (a JPEG whose
# frame header lies further, after a large EXIF block, up to MAX_SCAN_CHARS).
#
# Billing (what `image_tokens` returns):
#
# - OpenAI (`image_url`, `input_image`, computer screenshots): `detail: low` costs 85 tokens;
#   otherwise (high, auto) the image is scaled to fit 2048×2048, then its shortest side down to
#   768 px, and costs 85 + 170 per 512-px tile.
# - Anthropic (`image` blocks): scaled so that its long edge is at most 1568 px and its area at
#   most 1.15 megapixels, it costs about width × height / 750 tokens.
# - An image whose size cannot be read (a URL, a file id, invalid base64, an unknown or truncated
#   header) is counted as a 1024×1024 image: 765 tokens for OpenAI (85 at `detail: low`), 1,399
#   for Anthropic (`FALLBACK_*`).

HEAD_CHARS = 4096  # base64 characters decoded to read a header (3 KB of file)
MAX_SCAN_CHARS = 2 * 1024 * 1024  # a JPEG's frame header is looked for this far at most
FALLBACK_SIDE = 1024
OPENAI_LOW = 85
OPENAI_BASE, OPENAI_TILE = 85, 170


@dataclass(frozen=True)
class ImageInfo:
    format: str  # png | jpeg | gif | webp
    width: int
    height: int


MEDIA_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp"}


def split_data_url(url: str) -> tuple[str, str] | None:
    """(media type, base64 payload) of a `data:<type>;base64,<payload>` URL, else None."""
    if not url.startswith("data:"):
        return None
    head, comma, payload = url.partition(",")
    if not comma or not head.endswith(";base64"):
        return None
    return head[5:].split(";", 1)[0].strip().lower(), payload


def _decode(b64: str, chars: int) -> bytes | None:
    """The bytes of the first `chars` characters of `b64` (rounded down to a group of 4)."""
    head = b64[:chars]
    head = head[: len(head) - len(head) % 4]
    try:
        return binascii.a2b_base64(head.encode("ascii"), strict_mode=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        return None


def _png(data: bytes) -> ImageInfo | None:
    if len(data) >= 24 and data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        return ImageInfo("png", width, height)
    return None


def _gif(data: bytes) -> ImageInfo | None:
    if len(data) >= 10 and data[:6] in (b"GIF87a", b"GIF89a"):
        width, height = struct.unpack("<HH", data[6:10])
        return ImageInfo("gif", width, height)
    return None


def _webp(data: bytes) -> ImageInfo | None:
    if len(data) < 30 or data[:4] != b"RIFF" or data[8:12] != b"WEBP":
        return None
    chunk = data[12:16]
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", data[26:30])
        return ImageInfo("webp", width & 0x3FFF, height & 0x3FFF)
    if chunk == b"VP8L" and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return ImageInfo("webp", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1)
    if chunk == b"VP8X":
        return ImageInfo("webp", int.from_bytes(data[24:27], "little") + 1, int.from_bytes(data[27:30], "little") + 1)
    return None


_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg(data: bytes) -> ImageInfo | bool | None:
    """ImageInfo; True: a JPEG whose frame header lies past `data`; None: not a JPEG."""
    if data[:2] != b"\xff\xd8":
        return None
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return None  # not a marker where one must be: a broken file
        marker = data[i + 1]
        if marker == 0xFF:
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        length = struct.unpack(">H", data[i + 2 : i + 4])[0]
        if marker in _SOF:
            if i + 9 > len(data):
                return True
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return ImageInfo("jpeg", width, height)
        if length < 2:
            return None
        i += 2 + length
    return True


def read_header(b64: str) -> ImageInfo | None:
    """The format and size in the header of a base64 image, or None (not an image this reader
    knows, invalid base64, a header cut short, a 0×0 size)."""
    return _read_header(b64[:HEAD_CHARS], len(b64), lambda: b64[:MAX_SCAN_CHARS])


def data_url_header(url: str) -> tuple[str, ImageInfo | None] | None:
    """(declared media type, `read_header` of the payload) of a base64 data URL, else None;
    without copying the payload (a screenshot's 330 KB) as `split_data_url` does."""
    comma = url.find(",", 0, 1024) if url.startswith("data:") else -1
    if comma < 0:
        return None
    head = url[:comma]
    if not head.endswith(";base64"):
        return None
    start = comma + 1
    info = _read_header(url[start : start + HEAD_CHARS], len(url) - start, lambda: url[start : start + MAX_SCAN_CHARS])
    return head[5:].split(";", 1)[0].strip().lower(), info


def _read_header(head: str, length: int, scan: Callable[[], str]) -> ImageInfo | None:
    """`head`: the payload's first HEAD_CHARS of its `length`; `scan()`: its first MAX_SCAN_CHARS."""
    data = _decode(head, HEAD_CHARS)
    if not data:
        return None
    info = _png(data) or _gif(data) or _webp(data)
    if info is None:
        jpeg = _jpeg(data)
        if jpeg is True and length > HEAD_CHARS:
            jpeg = _long_jpeg(scan())
        info = jpeg if isinstance(jpeg, ImageInfo) else None
    if info is None or info.width <= 0 or info.height <= 0:
        return None
    return info


_long_scans: dict[tuple[int, int], ImageInfo | bool | None] = {}
LONG_SCAN_ENTRIES = 2_000


def _long_jpeg(scanned: str) -> ImageInfo | bool | None:
    """`_jpeg` over a payload's first MAX_SCAN_CHARS (up to 1.5 MB decoded): remembered per
    scanned prefix, as a session resends the same photos every turn."""
    key = (len(scanned), hash(scanned))
    if key not in _long_scans:
        more = _decode(scanned, MAX_SCAN_CHARS)
        if len(_long_scans) >= LONG_SCAN_ENTRIES:
            _long_scans.clear()
        _long_scans[key] = _jpeg(more) if more else None
    return _long_scans[key]


def openai_tokens(info: ImageInfo | None, detail: str | None = None) -> int:
    if detail == "low":
        return OPENAI_LOW
    width: float
    height: float
    width, height = (info.width, info.height) if info else (FALLBACK_SIDE, FALLBACK_SIDE)
    if max(width, height) > 2048:
        scale = 2048 / max(width, height)
        width, height = width * scale, height * scale
    if min(width, height) > 768:
        scale = 768 / min(width, height)
        width, height = width * scale, height * scale
    return OPENAI_BASE + OPENAI_TILE * math.ceil(width / 512) * math.ceil(height / 512)


def anthropic_tokens(info: ImageInfo | None) -> int:
    width, height = (info.width, info.height) if info else (FALLBACK_SIDE, FALLBACK_SIDE)
    scale = min(1.0, 1568 / max(width, height), math.sqrt(1_150_000 / (width * height)))
    return max(1, math.ceil(int(width * scale) * int(height * scale) / 750))


FALLBACK_OPENAI = openai_tokens(None)
FALLBACK_ANTHROPIC = anthropic_tokens(None)


def header_of(b64: str) -> ImageInfo | None:
    """`read_header`. Not remembered per payload: a key for the whole payload would cost a pass
    over all of it (~0.1 ms for a 330 KB screenshot), while the header is read from its first
    HEAD_CHARS in microseconds; only a JPEG's long scan is remembered (`_long_jpeg`)."""
    return read_header(b64)


def image_tokens(b64: str | None, *, billing: str, detail: str | None = None) -> int:
    """Tokens of an image as `billing` ("openai" or "anthropic") bills it; `b64` None: its
    bytes are not in the request (a URL, a file id), counted by the fallback."""
    return info_tokens(header_of(b64) if b64 else None, billing=billing, detail=detail)


def info_tokens(info: ImageInfo | None, *, billing: str, detail: str | None = None) -> int:
    """`image_tokens` of an image whose header was read (None: unreadable, or not in the request)."""
    return anthropic_tokens(info) if billing == "anthropic" else openai_tokens(info, detail)


# ==================== token counting
# Token counting with tiktoken, cached per content hash.
#
# A long conversation is resent every turn; only its new messages should cost CPU. Counts are
# cached by a digest of the text, so a history the proxy has seen before is not tokenised again.
# If an encoding cannot be loaded (offline, no cache), counts fall back to an estimate.
#
# tiktoken downloads its encodings on first use, which offline machines cannot do. When neither
# TIKTOKEN_CACHE_DIR nor DATA_GYM_CACHE_DIR is set, `discover_tiktoken_cache` points tiktoken at
# `../shared/tiktoken` next to the repository when that folder exists (every entry point calls it:
# `serve`, `replay`, and the first encoding load).

log = logging.getLogger("proxy.core.tokens")

CACHE_ENTRIES = 200_000
UNCACHED_BELOW = 64  # characters: below this, cached by the text itself rather than a digest
SHORT_ENTRIES = 50_000
LONG_PIECE = 50_000  # characters: a text the encoder cannot take whole is counted in pieces of this size
# A text longer than this is counted a piece at a time, each cut after a line break where there
# is one: tiktoken works without the GIL, but makes the list of a text's tokens with it (about
# 30 ms a million tokens), and the search for long runs holds it for its whole text (0.4 s for
# 12 MB): either would hold up the event loop while a large request is counted in another
# thread. A cut after a line break is where tiktoken's own pre-tokeniser splits.
COUNT_PIECE = 256 * 1024
# BPE merges within one regex piece take time that grows faster than its length: a 50 MB run
# without whitespace ("aaaa…") would take ~25 s. Runs longer than this are counted in slices of
# it (a boundary may shift a count by a token or two: ~0.1 % of such a run).
LONG_RUN = 2_048
_LONG_RUN = re.compile(r"\S{%d,}" % LONG_RUN)
MESSAGE_OVERHEAD = 3  # per message, as in OpenAI's accounting
REPLY_PRIMING = 3
IMAGE_PARTS = frozenset({"image_url", "input_image", "computer_screenshot", "image"})  # "image": Anthropic's
# A Responses item whose screenshot was offloaded carries the marker under this private key
# (`proxy.formats.responses._request.with_history` turns it into a message after the item).
NOTE_KEY = "x-offload-note"


def binary_tokens(data: Any) -> int:
    """Base64 content other than an image (a document, audio): estimated from its length, never
    tokenised as text (a data URL's header included)."""
    return (len(data) + 3) // 4 if type(data) is str else 0


def part_image_tokens(part: JsonObject) -> int:
    """An image part as its provider bills it (`image_tokens`): a chat `image_url`, a
    Responses `input_image` or `computer_screenshot` (OpenAI), an Anthropic `image` block."""
    if part.get("type") == "image":
        source = part.get("source")
        data = source.get("data") if isinstance(source, dict) and source.get("type") == "base64" else None
        return image_tokens(data if type(data) is str else None, billing="anthropic")
    url = part.get("image_url")
    detail = part.get("detail")
    if isinstance(url, dict):  # chat: {"url", "detail"}
        detail = url.get("detail")
        url = url.get("url")
    inline = data_url_header(url) if type(url) is str else None
    return info_tokens(inline[1] if inline else None, billing="openai", detail=detail if type(detail) is str else None)


class Encoder(Protocol):
    def encode_ordinary(self, text: str) -> list[int]: ...


class EstimateEncoder:
    """Offline fallback: about 4 bytes of UTF-8 per token."""

    name = "estimate"

    def encode_ordinary(self, text: str) -> list[int]:
        return [0] * ((len(text.encode("utf-8", "surrogatepass")) + 3) // 4)


def encoding_name_for_model(model: str | None) -> str:
    name = (model or "").lower().rsplit("/", 1)[-1]
    if name.startswith(("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o")):
        return "o200k_base"
    if name.startswith(("gpt-4", "gpt-3.5", "gpt-35", "text-embedding")):
        return "cl100k_base"
    return "o200k_base"


def tiktoken_cache_candidates() -> list[Path]:
    """Where offline encodings are looked for: ../shared/tiktoken relative to the repository."""
    repo = Path(__file__).resolve().parents[2]  # proxy/core/tokens.py → the repository
    return [repo.parent / "shared" / "tiktoken"]


def discover_tiktoken_cache(
    environ: MutableMapping[str, str] | None = None, candidates: Sequence[Path] | None = None
) -> str | None:
    """The folder tiktoken loads encodings from: TIKTOKEN_CACHE_DIR (or DATA_GYM_CACHE_DIR) when
    set, else the first existing candidate, which is then exported as TIKTOKEN_CACHE_DIR (so
    worker processes inherit it). None: tiktoken's own default (a download on first use)."""
    environ = os.environ if environ is None else environ
    for name in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if environ.get(name):
            return environ[name]
    for candidate in tiktoken_cache_candidates() if candidates is None else candidates:
        if candidate.is_dir():
            environ["TIKTOKEN_CACHE_DIR"] = str(candidate.resolve())
            return environ["TIKTOKEN_CACHE_DIR"]
    return None


_load_errors: dict[str, str] = {}


@lru_cache(maxsize=None)
def load_encoder(encoding_name: str) -> Encoder:
    discover_tiktoken_cache()
    try:
        import tiktoken

        return tiktoken.get_encoding(encoding_name)
    except Exception as exc:  # offline, corrupt cache, unknown name: never fail a request
        log.warning(estimate_note(encoding_name, exc))  # the message: an argument is clipped as client text
        _load_errors[encoding_name] = f"{type(exc).__name__}: {exc}"
        return EstimateEncoder()


def estimate_note(encoding_name: str, exc: Exception) -> str:
    """One line on an encoding that could not be loaded: what it means and how to fix it (not
    the download's error, a screenful when there is no network)."""
    cache = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    where = f"not in TIKTOKEN_CACHE_DIR={cache}" if cache else "no TIKTOKEN_CACHE_DIR"
    return (
        f"tiktoken encoding {encoding_name} not loaded ({where}, download failed: {type(exc).__name__}): "
        f"token counts are estimated (about 4 bytes a token); to count exactly, set TIKTOKEN_CACHE_DIR to a "
        f"folder holding {encoding_name}'s file (or let the proxy download it once)"
    )


def counting_method(counter: "TokenCounter") -> dict[str, str | None]:
    """How `counter` counts: {"encoding", "method": "tiktoken" | "estimate", "cache_dir", "error"}."""
    estimate = isinstance(counter.encoder, EstimateEncoder)
    return {
        "encoding": counter.encoding_name,
        "method": "estimate" if estimate else "tiktoken",
        "cache_dir": os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR"),
        "error": _load_errors.get(counter.encoding_name, "not loadable") if estimate else None,
    }


class _CountCache:
    """(encoding, hash(text), len(text)) → token count, oldest entries dropped first.

    Python's string hash is computed once per string object and kept, so counting a message
    twice in one request costs a dict lookup; a 64-bit hash plus the length makes a wrong
    count from a collision practically impossible (and it could only skew an estimate).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.data: dict[tuple[str, int, int], int] = {}
        self.hits = self.misses = 0

    def get(self, key: tuple[str, int, int]) -> int | None:
        value = self.data.get(key)
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        return value

    def put(self, key: tuple[str, int, int], value: int) -> None:
        if len(self.data) >= self.size:
            for old in list(itertools.islice(self.data, self.size // 4)):
                self.data.pop(old, None)  # another thread (proxy.offload.cpu_pool) may be evicting the same
        self.data[key] = value


_cache = _CountCache(CACHE_ENTRIES)

# A conversation's next turn begins with its previous turn's items, equal but parsed anew (new
# objects, so the per-request memo of `TokenCounter.for_request` cannot see them): the counts
# of the most recent large histories are kept, and a history that begins with one of them takes
# its counts by one comparison of the prefix (in C, about 1 ms for a 1M-token history) instead
# of a walk of every message and every block (4-10 ms).
RECENT_HISTORIES = 32  # the histories whose counts a worker keeps, the least recently used dropped first
RECENT_BYTES = 128 * 1024 * 1024  # what their items hold in all (mostly the same objects as `proxy.core.fold`'s states)
RECENT_MIN_ITEMS = 64  # a shorter history is counted whole: cheap, and not worth holding


@dataclass(frozen=True, eq=False)
class _Counted:
    key: tuple[str, str]  # (a tenant's namespace, the encoding)
    items: list[Any]
    counts: tuple[int, ...]
    encoder: Any  # the encoder that counted them (an estimate until the encoding loads)
    held: int  # the bytes `items` hold (`proxy.core.jsonio.footprint`)


class _RecentCounts:
    """The counts of the most recent large histories, a bounded few (RECENT_HISTORIES,
    RECENT_BYTES in all). Thread-safe: requests are counted on the event loop and in the CPU pool."""

    def __init__(self, size: int, held: int) -> None:
        self.size, self.held = size, held
        self._entries: list[_Counted] = []  # the least recently kept first
        self._lock = threading.Lock()

    def find(self, key: tuple[str, str], items: list[Any], encoder: Any) -> _Counted | None:
        """The longest entry under `key` whose items begin `items`, counted with `encoder`."""
        with self._lock:
            candidates = [
                e for e in self._entries if e.key == key and e.encoder is encoder and len(e.items) <= len(items)
            ]
        for entry in sorted(candidates, key=lambda e: -len(e.items)):
            if entry.items == items[: len(entry.items)]:
                return entry
        return None

    def keep(self, entry: _Counted, *, replaces: _Counted | None) -> None:
        """Keep `entry`, in place of `replaces` (the same conversation's previous turn)."""
        if entry.held > self.held:
            return
        with self._lock:
            kept = [e for e in self._entries if e is not replaces] + [entry]
            total = sum(e.held for e in kept)
            while len(kept) > self.size or total > self.held:
                total -= kept.pop(0).held
            self._entries = kept


_recent = _RecentCounts(RECENT_HISTORIES, RECENT_BYTES)


def _pieces(text: str) -> Iterable[str]:
    """`text` in pieces of at most COUNT_PIECE characters, each ending after a line break when
    its second half holds one."""
    start = 0
    while len(text) - start > COUNT_PIECE:
        end = start + COUNT_PIECE
        cut = text.rfind("\n", start + COUNT_PIECE // 2, end)
        end = cut + 1 if cut >= 0 else end
        yield text[start:end]
        start = end
    yield text[start:]


class TokenCounter:
    def __init__(self, encoding_name: str) -> None:
        self.encoding_name = encoding_name
        self.encoder = load_encoder(encoding_name)
        self._short: dict[str, int] = {}  # role names, tool names, ids: keyed by the text itself
        self._messages: dict[int, tuple[Any, int]] | None = None
        self._found: _Counted | None = None  # the earlier turn's counts this request's history began with
        self._seeded: list[Any] | None = None  # that history

    def for_request(self) -> "TokenCounter":
        """A counter that also remembers each message object it counted, for one request."""
        scoped = object.__new__(TokenCounter)
        scoped.__dict__.update(self.__dict__)
        scoped._messages = {}
        scoped._found = scoped._seeded = None
        return scoped

    def recall(self, history: list[Any], *, key: str = "") -> None:
        """Take the counts of the longest prefix of `history` an earlier turn counted under `key`
        (a tenant's namespace; `remember` keeps them) as this request's counter's own."""
        if self._messages is None or len(history) < RECENT_MIN_ITEMS:
            return
        found = _recent.find((key, self.encoding_name), history, self.encoder)
        self._found, self._seeded = found, history
        if found is not None:
            known = self._messages
            for item, count in zip(history, found.counts):
                known[id(item)] = (item, count)

    def earlier_prefix(self, prefix: list[Any], items: list[Any]) -> bool:
        """Does `items` begin with `prefix`, known without comparing them? When `items` is the
        history this request recalled an earlier turn's counts for (`recall`, which compared the
        two once) and `prefix` holds that earlier turn's very objects, its first ones: what other
        memos of the earlier turn (`proxy.core.fold`'s states, the verified prefixes of
        `proxy.core.compression`) check instead of comparing the history again."""
        found = self._found
        if found is None or items is not self._seeded or len(prefix) > len(found.items):
            return False
        return all(map(operator.is_, prefix, found.items))

    def remember(self, history: list[Any], *, key: str = "") -> None:
        """Keep the counts of `history` (every item counted by this request's counter) for the
        conversation's next turn (`recall`)."""
        if self._messages is None or len(history) < RECENT_MIN_ITEMS:
            return
        found = self._found if self._seeded is history else None  # a prefix of `history`, then
        start = len(found.items) if found is not None else 0  # its counts are the earlier turn's
        counts = list(found.counts) if found is not None else []
        for item in history[start:]:
            seen = self._messages.get(id(item))
            if seen is None or seen[0] is not item:
                return  # not all counted: nothing kept
            counts.append(seen[1])
        held = (found.held if found is not None else 0) + sum(footprint(item) for item in history[start:])
        entry = _Counted((key, self.encoding_name), list(history), tuple(counts), self.encoder, held)
        _recent.keep(entry, replaces=found)

    def text(self, text: str) -> int:
        if len(text) < UNCACHED_BELOW:
            count = self._short.get(text)
            if count is None:
                count = len(self.encoder.encode_ordinary(text))
                if len(self._short) < SHORT_ENTRIES:
                    self._short[text] = count
            return count
        key = (self.encoding_name, hash(text), len(text))
        count = _cache.get(key)
        if count is None:
            count = self._long(text)
            _cache.put(key, count)
        return count

    def _long(self, text: str) -> int:
        """tiktoken's regex gives up on a whitespace run of ~1M characters and panics (a
        BaseException: openai/tiktoken#15): such a text is counted in pieces. A long run
        without whitespace is counted in slices (`LONG_RUN`)."""
        if len(text) > COUNT_PIECE:  # before the search too: a regex holds the GIL for all of its text
            return sum(self._long(piece) for piece in _pieces(text))
        if _LONG_RUN.search(text) is not None:
            return self._sliced(text)
        try:
            return len(self.encoder.encode_ordinary(text))
        except (KeyboardInterrupt, SystemExit, GeneratorExit):
            raise
        except BaseException:
            return sum(self._encoded(text[start : start + LONG_PIECE]) for start in range(0, len(text), LONG_PIECE))

    def _sliced(self, text: str) -> int:
        count, at = 0, 0
        for run in _LONG_RUN.finditer(text):
            if run.start() > at:
                count += self._encoded(text[at : run.start()])
            count += sum(self._encoded(text[k : k + LONG_RUN]) for k in range(run.start(), run.end(), LONG_RUN))
            at = run.end()
        return count + (self._encoded(text[at:]) if at < len(text) else 0)

    def _encoded(self, text: str) -> int:
        try:
            return len(self.encoder.encode_ordinary(text))
        except (KeyboardInterrupt, SystemExit, GeneratorExit):
            raise
        except BaseException:  # a panic in the encoder: never a failed request
            return len(EstimateEncoder().encode_ordinary(text))

    def json_value(self, value: Any) -> int:
        """`value` counted as the JSON text the model reads (`json.dumps`), found again by its
        compact bytes (orjson: ten times faster to make) when it was counted before: a tool
        call's input is the same object on every turn of a session."""
        try:
            raw = orjson.dumps(value)
        except (TypeError, orjson.JSONEncodeError):  # an integer past 64 bits, a non-JSON value
            return self.text(json.dumps(value, ensure_ascii=False))
        if len(raw) < UNCACHED_BELOW:
            return self.text(json.dumps(value, ensure_ascii=False))
        key = (self.encoding_name + " json", hash(raw), len(raw))
        count = _cache.get(key)
        if count is None:
            count = self.text(json.dumps(value, ensure_ascii=False))
            _cache.put(key, count)
        return count

    def content(self, content: Any) -> int:
        """A message's content: a string, or a list of parts (text counted, others estimated)."""
        if content is None:
            return 0
        if isinstance(content, str):
            return self.text(content)
        if isinstance(content, list):
            return sum(self._part(part) for part in content)
        return self.text(json.dumps(content, ensure_ascii=False))

    def _part(self, part: Any) -> int:
        """One part of a content list: text by its text, an image as billed (`part_image_tokens`), Anthropic's
        blocks by what they carry (a tool call's name and input, a tool result's content, a
        document's text or the size of its base64 data), anything else by its JSON."""
        if not isinstance(part, dict):
            return self.text(json.dumps(part, ensure_ascii=False))
        text = part.get("text")
        if isinstance(text, str):
            return self.text(text)
        kind = part.get("type")
        if kind == "tool_result":  # (the commonest block after text, first)
            inner = part.get("content")
            return 3 + (self.text(inner) if type(inner) is str else self.content(inner))
        if kind in IMAGE_PARTS:
            return part_image_tokens(part)
        if kind == "input_audio" and isinstance(part.get("input_audio"), dict):
            return binary_tokens(part["input_audio"].get("data"))
        if kind == "file" and isinstance(part.get("file"), dict) and type(part["file"].get("file_data")) is str:
            return binary_tokens(part["file"]["file_data"])
        if kind == "input_file" and type(part.get("file_data")) is str:
            return binary_tokens(part["file_data"])
        if kind == "thinking" and isinstance(part.get("thinking"), str):
            return self.text(part["thinking"])  # the signature is opaque: not billed as text
        if kind == "tool_use" or kind == "server_tool_use":
            return 3 + self.text(str(part.get("name", ""))) + self.json_value(part.get("input"))
        if kind == "document" and isinstance(part.get("source"), dict):
            data = part["source"].get("data")
            if part["source"].get("type") == "text" and type(data) is str:
                return self.text(data)
            if type(data) is str:  # base64: its length says enough
                return binary_tokens(data)
            return self.content(part["source"].get("content"))
        return self.text(json.dumps(part, ensure_ascii=False))

    def message(self, message: Any) -> int:
        if self._messages is not None:
            seen = self._messages.get(id(message))
            if seen is not None and seen[0] is message:
                return seen[1]
            count = self._count_message(message)
            self._messages[id(message)] = (message, count)
            return count
        return self._count_message(message)

    def _count_message(self, message: Any) -> int:
        """A chat message or a Responses message (role, content, chat's name and tool_calls), or
        another Responses input item (`_count_item`)."""
        if not isinstance(message, dict):
            return self.text(json.dumps(message, ensure_ascii=False))
        kind = message.get("type")
        if kind is not None and kind != "message" and "role" not in message:  # only messages have a role
            return self._count_item(kind, message)
        content = message.get("content")
        total = MESSAGE_OVERHEAD + (self.text(content) if type(content) is str else self.content(content))
        role, name = message.get("role"), message.get("name")
        if type(role) is str:
            total += self.text(role)
        if type(name) is str:
            total += self.text(name)
        for call in message.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                total += 3 + self.text(str(function.get("name", ""))) + self.text(str(function.get("arguments", "")))
        return total

    def _count_item(self, kind: Any, item: JsonObject) -> int:
        """A Responses input item other than a message, counted like the chat message that
        carries the same content: a call costs MESSAGE_OVERHEAD + name + arguments (as one of a
        chat message's `tool_calls`), a tool result MESSAGE_OVERHEAD + its output."""
        if kind == "function_call" or kind == "custom_tool_call":
            args = item.get("arguments") if kind == "function_call" else item.get("input")
            name = item.get("name")
            return (
                MESSAGE_OVERHEAD
                + (self.text(name) if type(name) is str else 0)
                + (self.text(args) if type(args) is str else self.content(args))
            )
        if type(kind) is str and kind.endswith("_output"):
            output = item.get("output")
            if type(output) is str:
                return MESSAGE_OVERHEAD + self.text(output)
            if isinstance(output, dict) and output.get("type") in IMAGE_PARTS:  # computer_call_output: a screenshot
                note = item.get(NOTE_KEY)
                return (
                    MESSAGE_OVERHEAD
                    + part_image_tokens(output)
                    + (MESSAGE_OVERHEAD + self.text(note) if type(note) is str else 0)
                )
            return MESSAGE_OVERHEAD + self.content(output)  # parts, or shell output chunks as JSON
        if kind == "reasoning":
            total = MESSAGE_OVERHEAD
            for key in ("summary", "content"):
                parts = item.get(key)
                if isinstance(parts, list):
                    total += self.content(parts)
            encrypted = item.get("encrypted_content")
            if type(encrypted) is str:  # base64 of opaque data: its length says enough
                total += (len(encrypted) + 3) // 4
            return total
        return self.text(json.dumps(item, ensure_ascii=False))

    def messages(self, messages: Iterable[Any]) -> int:
        return sum(self.message(m) for m in messages) + REPLY_PRIMING

    def tools(self, tools: Any) -> int:
        return self.text(json.dumps(tools, ensure_ascii=False, sort_keys=True)) if tools else 0

    def outside_history(self, body: JsonObject) -> int:
        """What a request sends beside its history, every turn: the tools, and the system prompt
        a format keeps outside the history (Messages' `system`, Responses' `instructions`)."""
        return self.tools(body.get("tools")) + self.content(body.get("system")) + self.content(body.get("instructions"))


_counters: dict[str, TokenCounter] = {}


def counter_for_encoding(encoding_name: str) -> TokenCounter:
    counter = _counters.get(encoding_name)
    if counter is None:
        counter = _counters[encoding_name] = TokenCounter(encoding_name)
    return counter


def counter_for_model(model: str | None) -> TokenCounter:
    return counter_for_encoding(encoding_name_for_model(model))


async def counter_for_model_async(model: str | None) -> TokenCounter:
    """Like counter_for_model, but an encoding not loaded yet is loaded off the event loop
    (it takes a few hundred ms and tens of MB, so only o200k_base is loaded at startup)."""
    name = encoding_name_for_model(model)
    if name not in _counters:
        await asyncio.to_thread(counter_for_encoding, name)
    return _counters[name]
