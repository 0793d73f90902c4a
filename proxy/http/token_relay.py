"""Relayed Responses paths whose input may hold the proxy's compaction tokens.

A token is made while the proxy emulates compaction; a session may later reach a native
upstream (the tenant's upstream changed, `X-Offload-Context-Management: relay`). No upstream
can read a token, and it must not leave the proxy: on `POST /v1/responses/compact` (relayed to a
native upstream) and `POST /v1/responses/input_tokens` the newest one is replaced by what it
stands for, as on `POST /v1/responses`; another namespace's, a forged or an expired one is a
400. A plain UTF-8 body without one is relayed as sent, byte for byte; any other is read first
(a body in UTF-16 or -32 is a 400, as on the managed endpoints).
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import Response

from proxy.core import jsonio
from proxy.core import jsonio as json_text
from proxy.core import jsonio as large_json
from proxy.core.compaction import may_spell_token
from proxy.core.jsonio import JsonObject
from proxy.formats.json_body import LARGE_BODY
from proxy.formats.responses import RESPONSES
from proxy.http.body import codings_of, decoded_body, refuse_other_charsets
from proxy.http.call_parts import tenant_store
from proxy.http.caller import Caller
from proxy.http.disconnect import ClientWatch
from proxy.http.managed import answered
from proxy.http.relay import relay, stream_back
from proxy.http.services import services_of
from proxy.http.telemetry import current as current_record
from proxy.offload import cpu_pool
from proxy.turn import begin

Parse = Callable[[bytes, int], JsonObject]


async def read_body(request: Request, caller: Caller, *, parse: Parse) -> JsonObject:
    """The body decoded (415 for an unknown coding), parsed by `parse(raw, max_items)` (400 for
    a bad one) and checked for the caller (`Caller.check_body`): off the loop when large."""
    limits = services_of(request).settings
    codings = codings_of(request.headers.getlist("content-encoding"))
    raw = await request.body()

    plain = await decoded_body(
        raw, codings, limit=limits.max_body_bytes
    )  # on the loop only while it inflates to little

    def parsed() -> JsonObject:
        body = parse(plain, limits.max_messages)
        caller.check_body(body)
        return body

    return await cpu_pool.CPU(len(plain) > LARGE_BODY)(parsed)


async def relay_tokens_expanded(request: Request, caller: Caller, path: str, *, parse: Parse) -> Response:
    """`path` (under /v1) relayed; `parse(raw, max_items)` reads its body (400 for a bad one)."""
    raw = await request.body()
    codings = codings_of(request.headers.getlist("content-encoding"))  # 415 for an unknown one
    refuse_other_charsets(request.headers.getlist("content-type"))  # read as UTF-8, as the upstream must
    if not codings and json_text.encoding(raw) in json_text.UTF8 and not may_spell_token(raw):
        return await relay(request)  # plain UTF-8 without a token: as sent (UTF-16 would hide one from the test)
    services = services_of(request)
    body = await read_body(request, caller, parse=parse)
    records = tenant_store(services, request.scope["headers"], caller, charged=False).records(
        RESPONSES.compaction_emulation.records_api
    )
    begun = await begin(body, RESPONSES.history(body), fmt=RESPONSES, emulating=False, records=records)
    if not begun.replaced:
        return await relay(request)
    caller.check_relay("POST", path)
    cpu = cpu_pool.CPU.for_messages(begun.items)  # what a token stands for may be tens of MB
    content = await cpu(large_json.dumps_yielding if cpu.large else jsonio.dumps, {**body, "input": begun.items})
    watch = ClientWatch(request, body_read=True)
    response = await watch.run(
        services.upstream.send(
            "POST",
            path,
            query=request.scope.get("query_string", b""),
            headers=caller.upstream_headers(request.scope["headers"], body_replaced=True),
            content=content,
            base=caller.base,
            record=current_record.get(),
        )
    )
    return await stream_back(response, shape=caller.family)


async def responses_input_tokens(request: Request) -> Response:
    """`POST /v1/responses/input_tokens`: relayed (every upstream that has it counts natively)."""
    caller: Caller = request.state.caller
    return await answered(
        request,
        lambda: relay_tokens_expanded(
            request, caller, "responses/input_tokens", parse=lambda raw, limit: RESPONSES.parse(raw, max_items=limit)
        ),
    )
