"""Request bodies sent with a `Content-Encoding` (gzip, deflate, br, zstd), decoded for the
managed endpoints (the Codex CLI sends its Responses bodies as zstd; HTTP clients may gzip
large bodies).

The decoded size counts against `--max-body-bytes`: each coding is undone incrementally, with
a bound on every decoder call's output, and stops as soon as it has more than the limit: a
decompression bomb is a 413 once the limit is passed, never inflated whole (gzip and deflate
stop at the limit + 1 byte, br and zstd within 512 KiB past it). A corrupt or
truncated stream is a 400 `invalid_body`, an unknown coding a 415
`unsupported_content_encoding`. Codings stacked in the header (`gzip, br`) are undone last
first; `identity` is none.

Where a body is decoded depends on what it inflates to, not on its size on the wire (a few
hundred bytes of br can make 64 MB): `decoded_body` starts on the event loop, a bounded piece
at a time, and hands the rest to the CPU pool (`proxy.offload.cpu_pool`) once the output passes
ON_LOOP_BYTES (a compressed body past that is sent there at once). zlib, zstd and brotli
release the GIL while they work.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Generator, Iterable
from typing import cast

import brotli
import zstandard

from proxy.errors import Kind, ProxyError
from proxy.offload import cpu_pool

PIECE = 1 << 20  # the most output one call of the zlib decoder makes (zstd and brotli: see below)
# zstd's densest block (RLE: 4 bytes for 128 KiB) makes at most this many bytes per input byte;
# its decoder has no output bound, so it is fed input pieces small enough for the room left.
ZSTD_MAX_RATIO = 1 << 15
ZSTD_MIN_INPUT = 4  # then one call makes at most 128 KiB (+ one 128 KiB block) past the limit
ON_LOOP_BYTES = 256 * 1024  # decoded on the event loop up to this much output, the rest in the CPU pool
ZSTD_ON_LOOP_INPUT = 64  # zstd's input per call on the loop: at most 2 MiB of output (its densest blocks)


class TooLarge(Exception):
    """The decoded body would be larger than the limit."""


class Corrupt(Exception):
    """The bytes are not a complete stream of their coding."""


class _Where:
    """Where the decoding runs now: on the event loop (zstd is then fed small inputs) or not."""

    on_loop = False


class _Sink:
    """The decoded bytes, refused past `limit`."""

    def __init__(self, limit: int, where: _Where | None = None) -> None:
        self.limit, self.out, self.where = limit, bytearray(), where or _Where()

    def room(self) -> int:
        """How many more bytes a decoder may make: one past the limit proves it exceeded."""
        return self.limit + 1 - len(self.out)

    def add(self, chunk: bytes) -> None:
        self.out += chunk
        if len(self.out) > self.limit:
            raise TooLarge


Steps = Generator[int, None, None]  # a decoder: the bytes each call made, a call at a time


def _zlib(data: bytes, sink: _Sink, wbits: int) -> Steps:
    """zlib-family streams (one after another for gzip's concatenated members), fed PIECE
    bytes of input at a time (its unconsumed tail is copied on every call)."""
    while True:
        d = zlib.decompressobj(wbits)
        view, at = memoryview(data), 0
        pending: bytes | memoryview = b""
        while not d.eof:
            if not pending and at < len(view):
                pending, at = view[at : at + PIECE], at + PIECE
            try:
                chunk = d.decompress(pending, min(PIECE, sink.room()))
            except zlib.error as exc:
                raise Corrupt(str(exc)) from None
            sink.add(chunk)
            yield len(chunk)
            pending = d.unconsumed_tail
            if not chunk and not pending and at >= len(view) and not d.eof:
                raise Corrupt("the stream ends early")
        data = d.unused_data + data[at:] if at < len(data) else d.unused_data
        if wbits != 31 or not data.strip(b"\0"):  # gzip may pad its last member with zeros
            if data.strip(b"\0"):
                raise Corrupt("data after the end of the stream")
            return


def _gzip(data: bytes, sink: _Sink) -> Steps:
    return _zlib(data, sink, 31)


def _deflate(data: bytes, sink: _Sink) -> Steps:
    """`deflate` is zlib-wrapped (RFC 9110); raw deflate is accepted too, as browsers do."""
    zlib_header = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
    return _zlib(data, sink, 15 if zlib_header else -15)


def _brotli(data: bytes, sink: _Sink) -> Steps:
    """All input in the first call, then calls with none until the stream is finished (its
    output buffer may outgrow the bound it is given up to twice: the bound is a quarter PIECE)."""
    d = brotli.Decompressor()
    pending = data
    try:
        while True:
            chunk = d.process(pending, output_buffer_limit=min(PIECE // 4, sink.room()))
            sink.add(chunk)
            yield len(chunk)
            if d.is_finished():
                return
            if not chunk and not pending:  # no input left, no progress: the stream stops short
                raise Corrupt("the stream ends early")
            pending = b""
    except brotli.error as exc:
        raise Corrupt(str(exc) or "invalid brotli data") from None


def _zstd(data: bytes, sink: _Sink) -> Steps:
    """Frame after frame (a decompressobj ends with its frame: `eof`, the rest `unused_data`)."""
    decompressor = zstandard.ZstdDecompressor()
    while data:
        d = decompressor.decompressobj()
        view, at = memoryview(data), 0
        try:
            while at < len(view) and not d.eof:
                step = max(ZSTD_MIN_INPUT, min(PIECE, sink.room() // ZSTD_MAX_RATIO))
                if sink.where.on_loop:
                    step = min(step, ZSTD_ON_LOOP_INPUT)
                chunk = d.decompress(view[at : at + step])
                sink.add(chunk)
                at += step
                yield len(chunk)
        except zstandard.ZstdError as exc:
            raise Corrupt(str(exc)) from None
        if not d.eof:
            raise Corrupt("the stream ends early")
        data = d.unused_data + data[at:] if at < len(data) else d.unused_data


DECODERS: dict[str, Callable[[bytes, _Sink], Steps]] = {
    "gzip": _gzip,
    "x-gzip": _gzip,
    "deflate": _deflate,
    "br": _brotli,
    "zstd": _zstd,
}


def codings_of(values: Iterable[str]) -> list[str]:
    """The codings named by the `Content-Encoding` header(s), in the order they were applied
    (`identity` left out); an unknown one is a 415."""
    codings = [c.strip().lower() for value in values for c in value.split(",")]
    codings = [c for c in codings if c and c != "identity"]
    for coding in codings:
        if coding not in DECODERS:
            raise ProxyError(
                Kind.UNSUPPORTED_MEDIA,
                f"Content-Encoding '{coding[:40]}' is not supported; send the body as "
                "gzip, deflate, br, zstd or identity.",
                code="unsupported_content_encoding",
            )
    return codings


def _steps(raw: bytes, codings: list[str], limit: int, *, where: _Where) -> Generator[int, None, bytes]:
    """`raw` with `codings` undone, a decoder call at a time (each yields the bytes it made)."""
    data = raw
    for coding in reversed(codings):
        if not data:  # an empty body says nothing in any coding
            continue
        sink = _Sink(limit, where)
        try:
            yield from DECODERS[coding](data, sink)
        except TooLarge:
            raise ProxyError(
                Kind.TOO_LARGE,
                f"Request body exceeds {limit} bytes once decoded ({coding}; the proxy's --max-body-bytes).",
                code="request_too_large",
            ) from None
        except Corrupt as exc:
            raise ProxyError(
                Kind.BAD_REQUEST, f"Request body could not be decoded as {coding}: {exc}.", code="invalid_body"
            ) from None
        data = bytes(sink.out)
    return data


def _finish(steps: Generator[int, None, bytes]) -> bytes:
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return cast(bytes, done.value)


def decode(raw: bytes, codings: list[str], *, limit: int) -> bytes:
    """`raw` with `codings` undone (the last applied first), at most `limit` bytes at every
    step; ProxyError 413 past the limit, 400 for a stream its coding cannot decode."""
    return _finish(_steps(raw, codings, limit, where=_Where()))


async def decoded_body(raw: bytes, codings: list[str], *, limit: int) -> bytes:
    """`decode(raw, codings)`, on the event loop while the output stays under ON_LOOP_BYTES,
    then (or for a compressed body past it) in the CPU pool."""
    if not codings:
        return raw
    where = _Where()
    steps = _steps(raw, codings, limit, where=where)
    if len(raw) <= ON_LOOP_BYTES:
        where.on_loop, made = True, 0
        try:
            while made <= ON_LOOP_BYTES:
                made += next(steps)
        except StopIteration as done:
            return cast(bytes, done.value)
        where.on_loop = False
    return await cpu_pool.CPU(True)(_finish, steps)


async def decoded(raw: bytes, header_values: Iterable[str], *, limit: int) -> tuple[bytes, bool]:
    """The body as the proxy reads it, and whether it was decoded (its Content-Encoding then
    no longer holds): `decoded_body`."""
    codings = codings_of(header_values)
    if not codings:
        return raw, False
    return await decoded_body(raw, codings, limit=limit), True
