"""How the bytes of a JSON body are read as text. Pure.

JSON on the wire is UTF-8 (RFC 8259 §8.1; a UTF-8 byte order mark is tolerated, as the stdlib
tolerates it), and that is the only encoding the proxy reads a body in. Lenient readers (Python's
`json.loads` on bytes, Express's body-parser) also take UTF-16 and UTF-32, told apart by a byte
order mark or by where the zero bytes of the first characters are (RFC 4627 §3): `encoding` says
which of these a body would be read as, so that a body the proxy refuses is refused naming it, and
`first_character` finds how it opens in that encoding, past any amount of leading whitespace.
"""

from __future__ import annotations

import codecs
import json

UTF8 = frozenset({"utf-8", "utf-8-sig"})
PIECE = 64 * 1024  # bytes decoded at a time while looking past leading whitespace
_WHITESPACE = " \t\r\n"  # JSON's whitespace (RFC 8259 §2)
_NAMES = {
    "utf-8": "UTF-8",
    "utf-8-sig": "UTF-8 with a byte order mark",
    "utf-16": "UTF-16 with a byte order mark",
    "utf-32": "UTF-32 with a byte order mark",
    "utf-16-le": "UTF-16LE",
    "utf-16-be": "UTF-16BE",
    "utf-32-le": "UTF-32LE",
    "utf-32-be": "UTF-32BE",
}


def encoding(raw: bytes) -> str:
    """The codec a lenient reader takes JSON bytes to be in: "utf-8", "utf-8-sig", "utf-16" or
    "utf-32" (after their byte order mark), or "utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"
    (no mark, told by the zero bytes of the first two characters)."""
    return json.detect_encoding(raw[:4])


def described(codec: str) -> str:
    """`codec` (one `encoding` returns) as a message names it."""
    return _NAMES.get(codec, codec)


def first_character(raw: bytes) -> str:
    """The first character of `raw` past JSON whitespace, read in its `encoding` ("" if none): "{"
    for an object whatever its encoding, "-" for a multipart body (its boundary). Decoded a PIECE
    at a time, so megabytes of leading whitespace cost no copy of the body."""
    decoder = codecs.getincrementaldecoder(encoding(raw))(errors="replace")
    view = memoryview(raw)
    for at in range(0, len(raw), PIECE):
        text = decoder.decode(view[at : at + PIECE], final=at + PIECE >= len(raw)).lstrip(_WHITESPACE)
        if text:
            return text[0]
    return ""
