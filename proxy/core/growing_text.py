"""Text that arrives in pieces (a streamed answer, a tool call's arguments), read once it is whole.

`text += piece` on an attribute or a dict entry copies the whole text at every piece: a 512 KB
answer in 4-byte deltas copies about 34 GB. `GrowingText` keeps the pieces in a list and joins
them when read, so collecting a stream costs time linear in its size, however it is cut.
"""

from __future__ import annotations


class GrowingText:
    """Pieces of text in order; `str(...)` or `text()` is their concatenation (joined once, then kept)."""

    __slots__ = ("pieces",)

    def __init__(self, start: str = "") -> None:
        self.pieces: list[str] = [start] if start else []

    def add(self, piece: str) -> None:
        if piece:
            self.pieces.append(piece)

    def text(self) -> str:
        pieces = self.pieces
        if len(pieces) > 1:
            pieces[:] = ["".join(pieces)]  # later reads (and later pieces) start from the joined text
        return pieces[0] if pieces else ""

    __str__ = text

    def __bool__(self) -> bool:
        return bool(self.pieces)

    def __repr__(self) -> str:
        return f"GrowingText({len(self.pieces)} pieces)"
