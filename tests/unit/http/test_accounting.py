"""The answer tap: every chunk passed on as it came, and what the reader is given.

The ending of the answer a client got, read as it passes: whole, streamed, encoded, an error,
a stream cut by an error event; the bytes the client gets are never changed."""

from __future__ import annotations

import asyncio
import gzip
import json

import pytest
from starlette.responses import Response, StreamingResponse

from proxy.http import accounting
from proxy.http.accounting import events_in, tapped
from proxy.telemetry import RequestRecord


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


pytestmark = pytest.mark.anyio


def sse(*events: object) -> list[bytes]:
    return [f"data: {json.dumps(e) if not isinstance(e, str) else e}\n\n".encode() for e in events]


async def drained(out: Response) -> bytes:
    if isinstance(out, StreamingResponse):
        return b"".join([c async for c in out.body_iterator])
    return bytes(out.body)


async def gen(chunks: list[bytes]):
    for chunk in chunks:
        yield chunk


async def test_a_whole_answer():
    rec = RequestRecord(route="chat", method="POST")
    body = json.dumps({"choices": [{"finish_reason": "length"}]}).encode()
    out = await accounting.tap_ending(rec, Response(body, media_type="application/json"))
    assert await drained(out) == body and (rec.finish, rec.answer_error) == ("length", False)


async def test_a_stream_split_anywhere_keeps_its_bytes_and_ends_with_its_last_reason():
    rec = RequestRecord(route="messages", method="POST")
    events = sse(
        {"type": "message_start", "message": {"stop_reason": None}},
        {"type": "content_block_delta", "delta": {"text": "hi"}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
        {"type": "message_stop"},
    )
    raw = b"".join(events)
    pieces = [raw[i : i + 7] for i in range(0, len(raw), 7)]
    out = await accounting.tap_ending(rec, StreamingResponse(gen(pieces), media_type="text/event-stream"))
    assert await drained(out) == raw
    assert (rec.finish, rec.answer_error, rec.context_error) == ("end_turn", False, False)


async def test_a_stream_ending_in_an_error_event_is_an_error():
    rec = RequestRecord(route="responses", method="POST")
    chunks = sse(
        {"type": "response.created", "response": {"status": "in_progress", "error": None}},
        {"type": "response.failed", "response": {"status": "failed", "error": {"code": "context_length_exceeded"}}},
    )
    out = await accounting.tap_ending(rec, StreamingResponse(gen(chunks), media_type="text/event-stream"))
    await drained(out)
    assert (rec.finish, rec.answer_error, rec.context_error) == ("error", True, True)


async def test_an_encoded_answer_is_read_once_it_has_come():
    rec = RequestRecord(route="chat", method="POST")
    raw = gzip.compress(b"".join(sse({"choices": [{"finish_reason": "stop"}]}, "[DONE]")))
    out = StreamingResponse(
        gen([raw[:10], raw[10:]]), media_type="text/event-stream", headers={"content-encoding": "gzip"}
    )
    out = await accounting.tap_ending(rec, out)
    assert await drained(out) == raw and rec.finish == "stop"


@pytest.mark.parametrize(
    "status, body, context",
    [
        (400, {"error": {"code": "context_length_exceeded", "message": "too long"}}, True),
        (429, {"error": {"message": "slow down"}}, False),
        (500, "<html>bad gateway</html>", False),
    ],
)
async def test_an_error_answer_is_an_error_and_says_when_the_context_was_exceeded(status, body, context):
    rec = RequestRecord(route="chat", method="POST")
    content = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    await accounting.tap_ending(rec, Response(content, status_code=status))
    assert (rec.finish, rec.answer_error, rec.context_error) == ("error", True, context)


async def test_a_turn_that_failed_in_the_proxy_is_an_error():
    rec = RequestRecord(route="chat", method="POST")
    accounting.failed(rec)
    assert (rec.finish, rec.answer_error, rec.context_error) == ("error", True, False)
    accounting.failed(None)  # no record: nothing to say


async def test_a_gzip_bomb_or_an_endless_event_is_passed_on_and_read_as_nothing(monkeypatch):
    """An encoded answer inflating past KEPT_BYTES, a stream event that never ends: the client
    gets every byte, the record no ending, the proxy no more than its bounds in memory."""
    monkeypatch.setattr(accounting, "KEPT_BYTES", 64 * 1024)
    bomb = gzip.compress(b'{"choices": [{"finish_reason": "stop", "pad": "' + b" " * (4 * 1024 * 1024) + b'"}]}')
    for out in (
        Response(bomb, media_type="application/json", headers={"content-encoding": "gzip"}),
        StreamingResponse(gen([bomb]), media_type="text/event-stream", headers={"content-encoding": "gzip"}),
    ):
        rec = RequestRecord(route="chat", method="POST")
        out = await accounting.tap_ending(rec, out)
        assert await drained(out) == bomb and rec.finish is None
    rec = RequestRecord(route="chat", method="POST")
    endless = [b'data: {"choices": [{"finish_reason": "stop", "x": "'] + [b"y" * 65536] * 200
    out = await accounting.tap_ending(rec, StreamingResponse(gen(endless), media_type="text/event-stream"))
    assert await drained(out) == b"".join(endless) and rec.finish is None
