"""Real PNG screenshots without an imaging library: a PNG writer is zlib + struct.

`screenshot(step)` draws a 1280×800 "desktop" (a title bar, a few windows, a text-like band)
that changes a little at every step (a moved cursor block, a progress bar, a typed line), so
consecutive screenshots are distinct images of realistic size (about 240 KB, 320 KB of base64).
"""

from __future__ import annotations

import base64
import random
import struct
import zlib
from functools import lru_cache

PHOTO = (320, 240)  # a photo-like, incompressible area (as a web page's picture): real screenshots weigh


@lru_cache(maxsize=1)
def _photo() -> bytes:
    return random.Random(1280).randbytes(PHOTO[0] * PHOTO[1] * 3)


def png(width: int, height: int, rows: list[bytes]) -> bytes:
    """A truecolour PNG of `rows` (each width*3 bytes of RGB)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + row for row in rows)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")


def screenshot(step: int, width: int = 1280, height: int = 800) -> bytes:
    """A desktop-like screenshot for `step` of a session (deterministic)."""
    background = bytes((236, 238, 242)) * width
    title = bytes((40, 44, 52)) * width
    rows: list[bytes] = []
    cursor_x = (97 * step) % (width - 40)
    cursor_y = 120 + (53 * step) % (height - 200)
    progress = (step * 37) % width
    for y in range(height):
        if y < 32:
            rows.append(title)
            continue
        row = bytearray(background)
        if 80 <= y < 720:  # a window with "text" lines whose pattern depends on the step
            row[120 * 3 : 1160 * 3] = bytes((255, 255, 255)) * 1040
            if y % 18 < 10 and y // 18 <= 8 + step % 30:
                seed = (y // 18 * 131 + step * (y // 18 == 8 + step % 30)) % 997
                for x in range(140, 1100, 12):
                    if (x * 7 + seed) % 5:
                        row[x * 3 : (x + 8) * 3] = bytes((60, 60, 70)) * 8
        if 400 <= y < 400 + PHOTO[1] and width >= 880 + PHOTO[0]:
            row[880 * 3 : (880 + PHOTO[0]) * 3] = _photo()[(y - 400) * PHOTO[0] * 3 : (y - 399) * PHOTO[0] * 3]
        if 760 <= y < 770:
            row[0 : progress * 3] = bytes((70, 130, 220)) * progress
        if cursor_y <= y < cursor_y + 24:
            row[cursor_x * 3 : (cursor_x + 16) * 3] = bytes((20, 20, 20)) * 16
        rows.append(bytes(row))
    return png(width, height, rows)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{b64(data)}"
