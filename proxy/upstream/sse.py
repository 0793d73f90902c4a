"""Server-sent events: the one parser and encoder used for every stream the proxy reads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from proxy.core import jsonio

DONE = "[DONE]"


MAX_EVENT_BYTES = 64 * 1024 * 1024  # one event's lines; a larger one ends the stream (ValueError)


async def iter_data(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The `data` payload of each event in a byte stream (comments and other fields dropped).

    Linear in the stream's size however its chunks fall (a line is looked for only in bytes
    not searched yet); an event whose lines exceed MAX_EVENT_BYTES raises ValueError.
    """
    buffer = bytearray()
    searched = 0  # buffer[:searched] holds no newline
    data: list[str] = []
    size = 0
    async for chunk in chunks:
        buffer += chunk
        start = 0
        while True:
            cut = buffer.find(b"\n", max(start, searched))
            if cut < 0:
                break
            line = bytes(buffer[start:cut]).rstrip(b"\r").decode("utf-8")
            start = cut + 1
            if not line:
                if data:
                    yield "\n".join(data)
                    data, size = [], 0
            elif line.startswith("data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(" ") else value)
                size += len(value)
        del buffer[:start]
        searched = len(buffer)
        if size + len(buffer) > MAX_EVENT_BYTES:
            raise ValueError(f"an event of the stream is larger than {MAX_EVENT_BYTES} bytes")
    rest = bytes(buffer).strip()
    if rest.startswith(b"data:"):
        value = rest[5:].decode("utf-8")
        data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


def encode(data: Any) -> bytes:
    """One `data:` event; dicts are JSON-encoded compactly."""
    payload = data.encode("utf-8") if isinstance(data, str) else jsonio.dumps(data)
    return b"data: " + payload + b"\n\n"


DONE_EVENT = encode(DONE)


def encode_typed(event: Any) -> bytes:
    """One event named by its `type` (`event: <type>` then `data:`), as the Responses and
    Anthropic streams write them; an event without a printable type gets no `event:` line."""
    kind = event.get("type") if isinstance(event, dict) else None
    head = b"event: " + kind.encode() + b"\n" if isinstance(kind, str) and kind.isprintable() else b""
    return head + encode(event)


class DataParser:
    """`iter_data` pushed to: bytes in, the `data` of each event completed by them out (for a
    stream read beside its relay, never in its way). ValueError as `iter_data` raises it."""

    def __init__(self, limit: int = MAX_EVENT_BYTES) -> None:
        self.limit = limit
        self._buffer = bytearray()
        self._searched = 0
        self._data: list[str] = []
        self._size = 0

    def feed(self, chunk: bytes) -> list[str]:
        out: list[str] = []
        buffer = self._buffer
        buffer += chunk
        start = 0
        while (cut := buffer.find(b"\n", max(start, self._searched))) >= 0:
            line = bytes(buffer[start:cut]).rstrip(b"\r").decode("utf-8")
            start = cut + 1
            if not line:
                if self._data:
                    out.append("\n".join(self._data))
                    self._data, self._size = [], 0
            elif line.startswith("data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(" ") else value)
                self._size += len(value)
        del buffer[:start]
        self._searched = len(buffer)
        if self._size + len(buffer) > self.limit:
            raise ValueError(f"an event of the stream is larger than {self.limit} bytes")
        return out

    def end(self) -> list[str]:
        rest = bytes(self._buffer).strip()
        if rest.startswith(b"data:"):
            value = rest[5:].decode("utf-8")
            self._data.append(value[1:] if value.startswith(" ") else value)
        data, self._data, self._buffer = self._data, [], bytearray()
        return ["\n".join(data)] if data else []
