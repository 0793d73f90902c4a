"""Bodies as the proxy reads them: a request body's limits, a body's `Content-Encoding`, the
charset a request declares, and the fields of a body that name state kept upstream.

Limits (`BodyLimit`), enforced before any work is done, in the shape of the API the client speaks
(`proxy.http.routing.family_of`): a body larger than `--max-body-bytes` is a 413, a body that
stalls for `--body-timeout` is a 408.

Content-Encoding (gzip, deflate, br, zstd), decoded for the managed endpoints (the Codex CLI sends
its Responses bodies as zstd; HTTP clients may gzip large bodies) and for the answers the proxy
reads. The decoded size counts against `--max-body-bytes`: each coding is undone incrementally,
with a bound on every decoder call's output, and stops as soon as it has more than the limit: a
decompression bomb is a 413 once the limit is passed, never inflated whole (gzip and deflate stop
at the limit + 1 byte, br and zstd within 512 KiB past it). A corrupt or truncated stream is a 400
`invalid_body`, an unknown coding a 415 `unsupported_content_encoding`. Codings stacked in the
header (`gzip, br`) are undone last first; `identity` is none. Where a body is decoded depends on
what it inflates to, not on its size on the wire (a few hundred bytes of br can make 64 MB):
`decoded_body` starts on the event loop, a bounded piece at a time, and hands the rest to the CPU
pool (`proxy.offload.cpu_pool`) once the output passes ON_LOOP_BYTES (a compressed body past that
is sent there at once). zlib, zstd and brotli release the GIL while they work.

The charset (`refuse_other_charsets`). The proxy reads a JSON body as UTF-8
(`proxy.core.jsonio`). An upstream that honours a declared charset reads other text from the
same bytes: Express's body-parser takes any `utf-*` charset, UTF-7 among them, where `+ACI-` is a
quote, so a string the proxy read as plain text could be, for that upstream, a field the proxy
never saw (a compaction token's `encrypted_content`, a `previous_response_id` on the shared key).
So where a body is checked (a managed endpoint's, or a relayed one the proxy reads), a charset that
does not read the checked bytes as the proxy did (anything but UTF-8, US-ASCII or ISO-8859-1, which
read ASCII as themselves and can make no ASCII of other bytes) is a 415 `unsupported_charset`.

State kept in the upstream account (`stored_state`). On a shared upstream key (the operator's, used
by every tenant) such a field would let one tenant read what another stored, or what the operator
keeps: a stored response or conversation, an item of one, an uploaded file, a vector store, a
code-execution container, a stored prompt. `stored_state` names the first one a body holds (its
`param`), whatever the API; the caller refuses the request with 403 `endpoint_not_shared`. One walk
for every format (chat completions, Responses, Messages, and the relayed `responses/input_tokens`):
the fields cannot collide across APIs, and a body of any other shape simply has none of them.
Bounded: items and parts are walked, never arbitrary depth."""

from __future__ import annotations

import asyncio
import codecs
import re
import zlib
from collections.abc import Callable, Generator, Iterable
from typing import Any, cast

import brotli
import zstandard
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.core.jsonio import JsonObject
from proxy.errors import Kind, ProxyError, Shape
from proxy.http.error_map import error_response
from proxy.http.routing import family_of
from proxy.offload import cpu_pool


def _closing(response: Response) -> Response:
    """The rest of a refused body is never read, so the connection cannot carry another request."""
    response.headers["connection"] = "close"
    return response


class BodyRefused(Exception):
    """Raised into the app from `receive`: the body will not be read any further."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status_code)
        self.response = response


class BodyLimit:
    """ASGI middleware: bodies above `max_bytes` are refused with 413, bodies whose next chunk
    takes longer than `idle_timeout` seconds to arrive with 408.

    A declared Content-Length is checked up front; a chunked body is counted as it arrives.
    A refusal is raised into the app from `receive`, so the app stops where it reads: the chat
    route before any work, the relay inside the upstream request, which is abandoned with its
    connection (the upstream never gets a complete request). Whatever the app then tries to
    answer is replaced by the refusal. Only waiting for body chunks is timed: once the body is
    complete, `receive` (which then waits for a disconnect) is passed through untouched.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, idle_timeout: float | None = None) -> None:
        self.app, self.max_bytes, self.idle_timeout = app, max_bytes, idle_timeout

    def _too_large(self, shape: Shape) -> Response:
        message = f"Request body exceeds {self.max_bytes} bytes (the proxy's --max-body-bytes)."
        return _closing(error_response(413, message, code="request_too_large", shape=shape))

    def _too_slow(self, shape: Shape) -> Response:
        message = f"No part of the request body arrived for {self.idle_timeout:g} s."
        return _closing(error_response(408, message, code="request_timeout", shape=shape))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        shape = family_of(scope)
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self.max_bytes:
                await self._too_large(shape)(scope, receive, send)
                return
        seen = 0
        body_done = False
        refused: Response | None = None
        started = False

        async def guarded_receive() -> Message:
            nonlocal seen, body_done, refused
            if body_done or self.idle_timeout is None:
                message = await receive()
            else:
                try:
                    message = await asyncio.wait_for(receive(), self.idle_timeout)
                except asyncio.TimeoutError:
                    refused = self._too_slow(shape)
                    raise BodyRefused(refused) from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if seen > self.max_bytes:
                    refused = self._too_large(shape)
                    raise BodyRefused(refused)
            elif message["type"] == "http.disconnect":
                body_done = True
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if refused is not None and not started:
                return  # the refusal below answers instead
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, guarded_receive, guarded_send)
        except Exception:
            if refused is None:
                raise
        if refused is not None and not started:
            await refused(scope, receive, send)


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


READ_AS_CHECKED = frozenset({"utf-8", "ascii", "iso8859-1"})  # codec names (`codecs.lookup(...).name`)


def declared_charsets(content_types: Iterable[str]) -> list[str]:
    """The `charset` parameters of the Content-Type values, unquoted, as written."""
    found = []
    for value in content_types:
        for parameter in value.split(";")[1:]:
            name, _, given = parameter.partition("=")
            if name.strip().lower() == "charset":
                found.append(given.strip().strip('"').strip())
    return found


def refuse_other_charsets(content_types: Iterable[str]) -> None:
    """ProxyError 415 for a declared charset other than those in READ_AS_CHECKED (or unknown)."""
    for charset in declared_charsets(content_types):
        try:
            codec = codecs.lookup(charset).name if len(charset) <= 64 else ""
        except (LookupError, ValueError):  # unknown, or a NUL in the name
            codec = ""
        if codec not in READ_AS_CHECKED:
            raise ProxyError(
                Kind.UNSUPPORTED_MEDIA,
                f"Content-Type declares charset={charset[:40]!r}: a JSON body is read as UTF-8 "
                "(RFC 8259); send it in UTF-8, with charset=utf-8 or none.",
                code="unsupported_charset",
            )


# Top-level fields that name stored state when set (not null, not empty, not false).
_TOP = ("previous_response_id", "conversation")
# A part's field (or its `file`/`source`/`image_url` object's) that names an uploaded file.
_FILE_HOLDERS = ("file", "source", "image_url", "input_image")
_ITEM_LISTS = ("input", "messages")


def _named(value: Any) -> bool:
    return value is not None and value is not False and value != "" and value != {} and value != []


def _is_reference(item: JsonObject) -> bool:
    """A Responses input item that points at a stored item: `type: item_reference`, or an item
    with no type (or a null one) that is no message (no role, or a null one: the API reads
    `{"id": …}` as a reference)."""
    kind = item.get("type")
    if kind == "item_reference":
        return True
    return kind is None and item.get("role") is None and "id" in item


def _file_of(part: JsonObject) -> bool:
    if _named(part.get("file_id")):
        return True
    source = part.get("source")
    if type(source) is dict and source.get("type") == "file":
        return True
    return any(type(part.get(h)) is dict and _named(part[h].get("file_id")) for h in _FILE_HOLDERS)


def _parts(item: JsonObject) -> list[Any]:
    """The content parts of an item, and of the tool results it holds (one level down)."""
    out: list[Any] = []
    for name in ("content", "output"):
        value = item.get(name)
        if type(value) is list:
            out.extend(value)
        elif type(value) is dict:
            out.append(value)
    nested: list[list[Any]] = [p["content"] for p in out if type(p) is dict and type(p.get("content")) is list]
    for content in nested:
        out.extend(content)
    return out


def _tool_state(tool: JsonObject) -> str | None:
    kind = tool.get("type")
    if kind == "file_search" or _named(tool.get("vector_store_ids")):
        return "vector_store_ids"
    container = tool.get("container")
    if type(container) is str and container:  # an existing container; {"type": "auto"} makes a new one
        return "container"
    if type(container) is dict and _named(container.get("file_ids")):
        return "container.file_ids"
    return None


def stored_state(body: Any) -> str | None:
    """The param of the first field of `body` that names state stored upstream, else None."""
    if type(body) is not dict:
        return None
    for name in _TOP:
        if _named(body.get(name)):
            return name
    prompt = body.get("prompt")  # Responses: a stored prompt (a legacy completion's prompt is text)
    if type(prompt) is dict and _named(prompt.get("id")):
        return "prompt"
    container = body.get("container")  # Anthropic code execution: an existing one, or custom skills
    if (type(container) is str and container) or (type(container) is dict and _named(container.get("id"))):
        return "container"
    if (
        type(container) is dict
        and type(container.get("skills")) is list
        and any(type(skill) is dict and skill.get("type") != "anthropic" for skill in container["skills"])
    ):
        return "container.skills"
    for list_name in _ITEM_LISTS:
        items = body.get(list_name)
        if type(items) is not list:
            continue
        for i, item in enumerate(items):
            if type(item) is not dict:
                continue
            if list_name == "input" and _is_reference(item):
                return f"input[{i}]"
            if _file_of(item):
                return f"{list_name}[{i}]"
            if type(item.get("audio")) is dict and _named(item["audio"].get("id")):  # chat: an earlier audio answer
                return f"{list_name}[{i}].audio"
            for part in _parts(item):
                if type(part) is dict and _file_of(part):
                    return f"{list_name}[{i}].content"
    images = body.get("images")  # images/edits: images and a mask named by file id
    if type(images) is list:
        for i, image in enumerate(images):
            if type(image) is dict and _file_of(image):
                return f"images[{i}]"
    if type(body.get("mask")) is dict and _file_of(body["mask"]):
        return "mask"
    tools = body.get("tools")
    if type(tools) is list:
        for i, tool in enumerate(tools):
            if type(tool) is dict and (field := _tool_state(tool)):
                return f"tools[{i}].{field}"
    return None


# Relayed endpoints that take an upload (multipart/form-data); every other takes JSON only.
_UPLOADS = re.compile(r"(audio/+(transcriptions|translations)|images/+(edits|variations))/*")


def takes_uploads(path: str) -> bool:
    """Does the relayed endpoint `path` (under /v1, as sent) take a multipart upload? On a shared
    key another is sent JSON only: one read as form fields upstream would carry a
    `previous_response_id` the proxy never read."""
    return bool(_UPLOADS.fullmatch(path))
