"""An answer read beside the relay as it goes to the client, every byte passed on as it came:
a stream's events as they pass, an encoded answer or a JSON body once it has all come (at most a
limit of it). What reads it (`proxy.http.billing`'s bill, `proxy.http.answer_ending`'s ending)
is an `AnswerReader`; nothing it does changes a byte the client gets or fails a request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Protocol

from starlette.responses import AsyncContentStream, Content, Response

from proxy.http.body import codings_of, decode
from proxy.upstream import sse

KEPT_BYTES = 16 * 1024 * 1024  # of an encoded stream or a streamed JSON body, what is kept to read it
ON_LOOP_BYTES = 256 * 1024  # a larger body or event is read off the event loop


class AnswerReader(Protocol):
    async def event(self, data: str) -> None:
        """One event's data of a stream that is not encoded, as it passes."""

    async def whole(self, raw: bytes, codings: list[str], *, events: bool) -> None:
        """The answer's bytes once they have all come: an encoded answer (`events`: an encoded
        event stream), or one that is not an event stream."""

    def ended(self, *, read: bool) -> None:
        """Last, once: `read` is False when the answer could not be read (a coding that cannot
        be undone, more than the limit kept, a stream that does not parse)."""


def answer_codings(out: Response) -> list[str] | None:
    """The answer's content codings ([] for none), None when one cannot be undone."""
    values = [v.decode("latin-1") for k, v in out.raw_headers if k.lower() == b"content-encoding"]
    try:
        return [c for c in codings_of(values) if c != "identity"]
    except Exception:  # noqa: BLE001 - an unknown coding: the answer is not read
        return None


def is_event_stream(out: Response) -> bool:
    return any(k.lower() == b"content-type" and v.lower().startswith(b"text/event-stream") for k, v in out.raw_headers)


def events_in(raw: bytes, codings: list[str]) -> Iterator[str]:
    """The data of each event of a whole stream's bytes, decoded first. Raises ValueError or
    RecursionError for what does not parse, ProxyError for a coding it cannot undo."""
    parser = sse.DataParser()
    yield from parser.feed(decode(raw, codings, limit=KEPT_BYTES) if codings else raw)
    yield from parser.end()


async def tapped(
    chunks: AsyncContentStream,
    reader: AnswerReader,
    *,
    codings: list[str] | None,
    events: bool,
    limit: int = KEPT_BYTES,
) -> AsyncIterator[Content]:
    """`chunks` as they come, read by `reader` meanwhile (`events`: the answer is an event
    stream; `codings`: `answer_codings`)."""
    parser = sse.DataParser()
    whole = codings is not None and (bool(codings) or not events)
    kept, failed = bytearray(), codings is None
    try:
        async for chunk in chunks:
            yield chunk
            if failed:
                continue
            raw = chunk if isinstance(chunk, bytes) else str(chunk).encode()
            if whole:  # encoded, or a JSON body: read once it has all come
                kept += raw
                failed = len(kept) > limit
                continue
            try:
                for data in parser.feed(raw):
                    await reader.event(data)
            except (ValueError, RecursionError):
                failed = True
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()
        if not failed and whole and codings is not None:
            await reader.whole(bytes(kept), codings, events=events)
        elif not failed:
            try:
                for data in parser.end():
                    await reader.event(data)
            except ValueError:
                pass
        reader.ended(read=not failed)
