"""Images as providers bill them: their dimensions read from the file header, never decoded.

A header reader of a few dozen lines rather than Pillow: the proxy needs only (format, width,
height) of PNG, JPEG, GIF and WebP, from the first bytes of a base64 payload, on the request
path; Pillow is a 10 MB native dependency whose lazy `open` still wants a file object of the
whole image (so the whole base64 decoded first), and the decoders it loads are attack surface
the proxy never needs. Here at most the first HEAD_CHARS of base64 are decoded (a JPEG whose
frame header lies further, after a large EXIF block, up to MAX_SCAN_CHARS).

Billing (what `image_tokens` returns):

- OpenAI (`image_url`, `input_image`, computer screenshots): `detail: low` costs 85 tokens;
  otherwise (high, auto) the image is scaled to fit 2048×2048, then its shortest side down to
  768 px, and costs 85 + 170 per 512-px tile.
- Anthropic (`image` blocks): scaled so that its long edge is at most 1568 px and its area at
  most 1.15 megapixels, it costs about width × height / 750 tokens.
- An image whose size cannot be read (a URL, a file id, invalid base64, an unknown or truncated
  header) is counted as a 1024×1024 image: 765 tokens for OpenAI (85 at `detail: low`), 1,399
  for Anthropic (`FALLBACK_*`).
"""

from __future__ import annotations

import binascii
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass

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
