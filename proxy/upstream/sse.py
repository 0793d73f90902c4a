"""Server-sent events: the one parser and encoder used for every stream the proxy reads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from proxy.core import jsonio

DONE = "[DONE]"


async def iter_data(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The `data` payload of each event in a byte stream (comments and other fields dropped)."""
    buffer = b""
    data: list[str] = []
    async for chunk in chunks:
        buffer += chunk
        while True:
            cut = buffer.find(b"\n")
            if cut < 0:
                break
            line = buffer[:cut].rstrip(b"\r").decode("utf-8")
            buffer = buffer[cut + 1:]
            if not line:
                if data:
                    yield "\n".join(data)
                    data = []
            elif line.startswith("data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(" ") else value)
    if buffer.strip().startswith(b"data:"):
        value = buffer.strip()[5:].decode("utf-8")
        data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


def encode(data: Any) -> bytes:
    """One `data:` event; dicts are JSON-encoded compactly."""
    payload = data.encode("utf-8") if isinstance(data, str) else jsonio.dumps(data)
    return b"data: " + payload + b"\n\n"


DONE_EVENT = encode(DONE)
