"""The answer tap: every chunk passed on as it came, and what the reader is given."""

from __future__ import annotations

import asyncio
import gzip

from proxy.http.answer_tap import events_in, tapped


class Reader:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    async def event(self, data: str) -> None:
        self.calls.append(("event", data))

    async def whole(self, raw: bytes, codings: list[str], *, events: bool) -> None:
        self.calls.append(("whole", raw, codings))

    def ended(self, *, read: bool) -> None:
        self.calls.append(("ended", read))


def run(chunks: list, **options) -> tuple[list, list]:
    reader = Reader()

    async def main() -> list:
        async def source():
            for chunk in chunks:
                yield chunk

        return [c async for c in tapped(source(), reader, **options)]

    return asyncio.run(main()), reader.calls


def test_a_stream_s_events_are_read_as_they_pass_and_its_bytes_go_on_unchanged():
    chunks = [b'data: {"a":1}\n\nda', b'ta: {"b":2}\n\n', "data: [DONE]\n\n"]
    out, calls = run(chunks, codings=[], events=True)
    assert out == chunks
    assert calls == [("event", '{"a":1}'), ("event", '{"b":2}'), ("event", "[DONE]"), ("ended", True)]


def test_a_last_event_without_its_blank_line_is_read_at_the_end():
    _, calls = run([b'data: {"a":1}'], codings=[], events=True)
    assert calls == [("event", '{"a":1}'), ("ended", True)]


def test_a_json_body_and_an_encoded_stream_are_read_whole_once_they_have_come():
    _, calls = run([b'{"usage":', b" {}}"], codings=[], events=False)
    assert calls == [("whole", b'{"usage": {}}', []), ("ended", True)]
    packed = gzip.compress(b'data: {"a":1}\n\n')
    _, calls = run([packed[:5], packed[5:]], codings=["gzip"], events=True)
    assert calls == [("whole", packed, ["gzip"]), ("ended", True)]
    assert list(events_in(packed, ["gzip"])) == ['{"a":1}']


def test_what_cannot_be_read_is_said_so_and_still_passes():
    out, calls = run([b"\x00" * 10], codings=None, events=True)  # a coding that cannot be undone
    assert out == [b"\x00" * 10] and calls == [("ended", False)]
    out, calls = run([b"x" * 8, b"y" * 8], codings=[], events=False, limit=10)  # more than the limit
    assert out == [b"x" * 8, b"y" * 8] and calls == [("ended", False)]
