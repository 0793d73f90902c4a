"""Transparent relay of any /v1 endpoint the proxy does not manage."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from urllib.parse import unquote

import httpx2
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from proxy.core import jsonio
from proxy.core import jsonio as json_text
from proxy.core.compaction import may_spell_token, sealed_fields
from proxy.core.jsonio import JsonObject
from proxy.errors import Kind, ProxyError, Shape, anthropic_error_event
from proxy.formats.json_body import LARGE_BODY, load_object
from proxy.http.body import codings_of, decoded_body, refuse_other_charsets, takes_uploads
from proxy.http.call_parts import services_of
from proxy.http.caller import Caller
from proxy.http.disconnect import ClientDisconnected, ClientWatch
from proxy.http.error_map import response_of
from proxy.http.headers import response_headers_for_client
from proxy.http.telemetry import current as current_record
from proxy.offload import cpu_pool
from proxy.offload import records as response_chains
from proxy.offload.records import TenantStore
from proxy.upstream import sse
from proxy.upstream.base_url import has_dot_segment
from proxy.upstream.client import Upstream
from proxy.upstream.transport import response_host, stream_broke, upstream_error

BODYLESS = frozenset({"GET", "HEAD", "OPTIONS", "DELETE"})
# Relayed paths whose JSON body carries a history's items (Anthropic message batches, items of
# an OpenAI conversation): read whole, whatever the method, so that no compaction token of the
# proxy's goes upstream (`checked_body`). Every other body streams through as it arrives.
CARRIES_ITEMS = re.compile(r"(messages/+batches|conversations(/+[^/?]+/+items)?)/*", re.IGNORECASE)
_PATH_PARAMETERS = re.compile(r";[^/]*")  # `conversations;x`: a servlet-style upstream routes it as `conversations`


def upstream_path(request: Request) -> str:
    """What follows /v1/ in the client's path, kept as sent (percent-encoding included).

    Any dot-segment (`.` or `..`, also percent-encoded any number of times, behind an encoded
    slash or a backslash, or with `;params`) is a 400: the relay never leaves the upstream's /v1.
    """
    raw: bytes = request.scope.get("raw_path") or request.scope["path"].encode()
    path = raw.decode("latin-1").split("?", 1)[0].removeprefix("/v1").lstrip("/")
    if has_dot_segment(path):
        raise ProxyError(Kind.BAD_REQUEST, "The path must not contain '.' or '..' segments.", code="invalid_path")
    return path


def carries_items(path: str) -> bool:
    """Is `path` (as sent, percent-encoding kept) one of `CARRIES_ITEMS`, in any spelling an
    upstream may route to it (`messages/batch%65s`, `conversations%2Fc/items`, encoded again,
    another case, a backslash for a slash, `;params` after a segment)?"""
    decoded = path
    while "%" in decoded and (once := unquote(decoded)) != decoded:  # shrinks every round: ends
        decoded = once
    decoded = _PATH_PARAMETERS.sub("", decoded.split("?", 1)[0].replace("\\", "/"))
    return bool(CARRIES_ITEMS.fullmatch(path) or CARRIES_ITEMS.fullmatch(decoded))


async def close_after(response: httpx2.Response, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Yield `chunks` and always release the upstream connection (also on cancel)."""
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        await response.aclose()


BUFFER_LIMIT = 256 * 1024  # a body of known, small length is read whole: cheaper than streaming it


async def stream_back(
    response: httpx2.Response, extra_headers: Sequence[tuple[bytes, bytes]] = (), *, shape: Shape = "openai"
) -> Response:
    """Relay an upstream response as-is: status, headers, raw (still encoded) body.

    Streams (SSE, chunked, large) are relayed chunk by chunk as they arrive; a stream that
    breaks off ends with an error event in `shape`.
    """
    headers = response_headers_for_client(response.headers.raw) + list(extra_headers)
    length = response.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) <= BUFFER_LIMIT:
        try:
            body = b"".join([chunk async for chunk in response.aiter_raw()])
        except httpx2.HTTPError as exc:
            return response_of(upstream_error(exc, response_host(response)), shape)
        finally:
            await response.aclose()
        out: Response = Response(body, status_code=response.status_code)
    else:
        chunks: AsyncIterator[bytes] = response.aiter_raw()
        if is_plain_sse(response):
            chunks = with_error_event(chunks, shape, host=response_host(response))
        out = StreamingResponse(close_after(response, chunks), status_code=response.status_code)
    out.raw_headers = headers
    return out


def is_plain_sse(response: httpx2.Response) -> bool:
    return response.headers.get("content-type", "").startswith("text/event-stream") and (
        response.headers.get("content-encoding", "identity") == "identity"
    )


async def with_error_event(
    chunks: AsyncIterator[bytes], shape: Shape = "openai", *, host: str | None = None
) -> AsyncIterator[bytes]:
    """An SSE stream that breaks off upstream ends with an error event (and [DONE] for OpenAI's
    streams; Anthropic's `error` event ends its own), not a cut."""
    try:
        async for chunk in chunks:
            yield chunk
    except httpx2.HTTPError as exc:
        if shape == "anthropic":
            yield b"\n\n" + sse.encode_typed(anthropic_error_event(stream_broke(exc, host)))
        else:
            yield b"\n\n" + sse.encode(stream_broke(exc, host)) + sse.DONE_EVENT


def client_has_body(request: Request) -> bool:
    headers = request.headers
    return request.method not in BODYLESS or "content-length" in headers or "transfer-encoding" in headers


async def relay(request: Request) -> Response:
    services = services_of(request)
    upstream: Upstream = services.upstream
    watch = ClientWatch(request, body_read=not client_has_body(request))
    caller: Caller = request.state.caller  # every /v1 request has one (CallerGate)
    try:
        path = upstream_path(request)
        caller.check_relay(request.method, path)
        content: bytes | AsyncIterator[bytes] | None = watch.body() if client_has_body(request) else None
        replaced = False
        shared = caller.shared_key and request.method == "POST"
        items = carries_items(path)
        if content is not None and (shared or items):
            # read whole (it is under --max-body-bytes): checked for the shared key, and for tokens
            content, replaced = await checked_body(request, caller, shared=shared, items=items, path=path)
            watch = ClientWatch(request, body_read=True)
        response = await watch.run(
            upstream.send(
                request.method,
                path,
                query=request.scope.get("query_string", b""),
                headers=caller.upstream_headers(request.scope["headers"], body_replaced=replaced),
                content=content,
                base=caller.base,
                record=current_record.get(),
            )
        )
    except ProxyError as exc:
        return response_of(exc, caller.family)
    except ClientDisconnected:
        return Response(status_code=499)
    if request.method == "DELETE" and response.status_code < 300:
        await delete_chained(request, caller, path)
    return await stream_back(response, shape=caller.family)


def is_multipart(request: Request) -> bool:
    """Every Content-Type the request carries is multipart/form-data (an upload)."""
    types = [value.split(";", 1)[0].strip().lower() for value in request.headers.getlist("content-type")]
    return bool(types) and all(kind == "multipart/form-data" for kind in types)


def looks_like_json(plain: bytes) -> bool:
    """Does a body open as a JSON object or array would, in the encoding a lenient reader takes
    it to be in (`json_text.first_character`: past a byte order mark and any amount of
    whitespace, in UTF-8, -16 or -32)? A multipart body opens with its boundary (`--…`)."""
    return json_text.first_character(plain) in ("{", "[")


def refuse_tokens(body: JsonObject) -> None:
    """ProxyError 400 for a compaction token of the proxy's in an `encrypted_content` of a relayed
    body (a Messages batch, items added to a conversation, …): no upstream may get one, and only
    the managed paths know what it stands for."""
    for path in sealed_fields(body):
        raise ProxyError(
            Kind.BAD_REQUEST,
            f"{path} holds a compaction token of this proxy's, which no upstream can read; on "
            "this endpoint it is not replaced by what it stands for: send that history instead "
            "(or send the request through /v1/responses or /v1/messages).",
            code="invalid_compaction",
            param=path,
        )


async def checked_body(request: Request, caller: Caller, *, path: str, shared: bool, items: bool) -> tuple[bytes, bool]:
    """A relayed body, read whole, checked, and what goes upstream in its place (True: the body was
    replaced, its length and coding recomputed).

    Every declared Content-Encoding is undone first (415 for one the proxy cannot undo, 400 for a
    corrupt stream): a body is judged decoded, never as the bytes on the wire. Then, unless it is
    empty or a real upload (below), it must be a JSON object in UTF-8, whatever its Content-Type
    says (an upstream may read JSON behind any amount of whitespace, a byte order mark, in UTF-16
    or -32, with no Content-Type at all, or labelled multipart/form-data): else a 400 naming what
    it is, as the managed endpoints answer; a declared charset other than UTF-8, ASCII or
    ISO-8859-1 is a 415 (`body_charset`). A compaction token of the proxy's in an `encrypted_content` is a 400
    (`refuse_tokens`).

    `items`: a path carrying a history's items (`carries_items`), checked for tokens on any method.
    What goes upstream is what was judged: the bytes as sent when they were plain and spell no
    token, else the decoded bytes or, when they spell one (an `encrypted_content` key, an escape),
    the object read, re-serialised, so a duplicate key cannot show the upstream another value.

    `shared`: a body relayed on the shared key (e.g. `responses/input_tokens`), refused (403) when
    it names state stored upstream, like a managed endpoint's, and always re-serialised. Only
    there may a real upload (multipart/form-data whose bytes do not open as JSON) go unread, as
    sent, and only to the endpoints taking one (`takes_uploads`)."""
    raw = await request.body()
    codings = codings_of(request.headers.getlist("content-encoding"))  # what cannot be read is not relayed
    limit = services_of(request).settings.max_body_bytes
    upload = is_multipart(request) and not items

    plain = await decoded_body(raw, codings, limit=limit)  # on the loop only while it inflates to little

    def check() -> bytes | None:
        if not json_text.first_character(plain):  # empty, or whitespace only
            return None
        if upload and not looks_like_json(plain):
            if not takes_uploads(path):
                raise ProxyError(
                    Kind.BAD_REQUEST,
                    f"/v1/{path} takes a JSON body (a multipart/form-data upload goes only to the "
                    "audio and image endpoints on this proxy's shared key).",
                    code="invalid_json",
                )
            return None
        refuse_other_charsets(request.headers.getlist("content-type"))
        body = load_object(plain)  # 400 for anything but a JSON object in UTF-8, naming another encoding
        caller.check_body(body)
        spelt = may_spell_token(plain)
        if spelt:
            refuse_tokens(body)
        if shared or spelt:
            return jsonio.dumps(body)  # the object checked, not a duplicate key
        return plain if codings else None

    checked = await cpu_pool.CPU(len(plain) > LARGE_BODY)(check)
    return (raw, False) if checked is None else (checked, True)


async def delete_chained(request: Request, caller: Caller, path: str) -> None:
    """Deleting the response id a reload loop gave the client deletes the response holding the
    whole exchange too (the last round's, `proxy.offload.records`): it stores the reloaded content."""
    name, _, response_id = path.partition("/")
    response_id = unquote(response_id)
    if name != "responses" or not response_chains.plain_id(response_id):
        return
    services = services_of(request)
    tenant = TenantStore(services.store, caller.namespace, services.settings.store_ttl, services.sealer)
    found = await tenant.resolve_chain(response_id)
    if found is None:
        return
    await tenant.forget_chain(response_id)
    later = found.response_id
    if not later or later == response_id:
        return
    try:  # `later` is a plain id (response_chains.plain_id): the path stays /v1/responses/{id}
        extra = await services.upstream.send(
            "DELETE",
            f"responses/{later}",
            headers=caller.upstream_headers(request.scope["headers"]),
            base=caller.base,
            record=current_record.get(),
        )
        await extra.aclose()
    except ProxyError:
        pass  # the client's own delete succeeded; the upstream's retention of the other is its own
