"""Relayed Responses paths whose input may hold the proxy's compaction tokens.

A token is made while the proxy emulates compaction; a session may later reach a native
upstream (the tenant's upstream changed, `X-Offload-Context-Management: relay`). No upstream
can read a token, and it must not leave the proxy: on `POST /v1/responses/compact` (relayed to a
native upstream) and `POST /v1/responses/input_tokens` the newest one is replaced by what it
stands for, as on `POST /v1/responses`; another namespace's, a forged or an expired one is a
400. A plain UTF-8 body without one is relayed as sent, byte for byte; any other is read first
(a body in UTF-16 or -32 is a 400, as on the managed endpoints).

`POST /v1/messages/count_tokens`: Anthropic's token count of what the proxy will really send.

`POST /v1/responses/compact`: relayed unchanged to an upstream that compacts natively (but
for a compaction token of the proxy's in its input, replaced by what it stands for), emulated for one that does not (`proxy.upstream.base_url.emulates`; `proxy.turn._context_management`).

Emulated, the request is read in OpenAI's shape (`proxy.formats.responses`): a field of
another JSON type, no `model` or no `input` is a 400; `previous_response_id` is a 400 too (the
proxy keeps no stored chain it could compact, and most upstreams that need the emulation keep
none either: the client sends the history as `input`). The answer is a `response.compaction`.
A compaction that cannot be made is an error in OpenAI's shape: the summary failed (502), the
store is unavailable (503), the quota is spent (429).

Direct API for non-proxy use (ReMe-style), tenant-scoped like everything else.

POST /v1/offload        {"messages": [...], "model"?: str} → reduced messages, refs, token counts
GET  /v1/offload/{ref}  → the stored original"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import Response

from proxy.core import jsonio
from proxy.core import jsonio as json_text
from proxy.core import jsonio as large_json
from proxy.core.compaction import COMPACTION_ACTION, may_spell_token
from proxy.core.jsonio import JsonObject
from proxy.core.settings import OffloadSettings
from proxy.core.tokens import counter_for_model_async
from proxy.errors import Kind, ProxyError
from proxy.formats import chat
from proxy.formats.chat import parse_chat_body
from proxy.formats.json_body import LARGE_BODY
from proxy.formats.messages import MESSAGES
from proxy.formats.responses import RESPONSES, compacted_response, parse_compact_body, summary_body
from proxy.http import error_map, observed
from proxy.http.body import codings_of, decoded, decoded_body, refuse_other_charsets
from proxy.http.call_parts import compressor_for, model_of, request_settings, services_of, tenant_store
from proxy.http.caller import Caller
from proxy.http.disconnect import ClientWatch
from proxy.http.error_map import JSONResponse, json_answer, response_of
from proxy.http.managed import ManagedCall, answered, count_answer
from proxy.http.relay import relay, stream_back
from proxy.http.telemetry import current as current_record
from proxy.offload import cpu_pool
from proxy.offload.cpu_pool import CPU
from proxy.offload.pipeline import prepare
from proxy.offload.records import TenantStore
from proxy.offload.tenant import CredentialRejected
from proxy.stats import session_from_history
from proxy.store import StoreUnavailable
from proxy.turn import Compaction, begin, compact
from proxy.upstream.base_url import emulates

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


async def count_tokens(request: Request) -> Response:
    """`POST /v1/messages/count_tokens`: the body reduced as `POST /v1/messages` would reduce it
    (summaries ready in the store are used, none is started nor waited for), with the reload
    tools when the turn would carry them, counted by the upstream: a client deciding its own
    compaction from this count sees what the proxy will really send. With `context_management`
    edits the proxy applies itself, the count is of the edited request and
    `context_management.original_input_tokens` adds what the edits cleared (`proxy.http.managed`)."""

    async def run() -> Response:
        call = await ManagedCall.open(request, MESSAGES)
        if observed.observing(call.settings):  # counted as sent: observe mode changes nothing
            return await observed.as_received(call, "messages/count_tokens")
        if (await observed.arm_of(call))[0] == "control":  # counted as sent: its turns go as sent
            return await observed.as_received(call, "messages/count_tokens")
        # the same turn as /v1/messages, no summary made, the client's caching as sent
        turn = await call.offload(new_summaries=False, prompt_cache=False)
        offered = turn.inject_reload_tools
        content = await call.serialised(turn.rounds.request(offered)) if turn.changed or offered else call.raw
        response = await call.watch.run(
            call.services.upstream.send(
                "POST",
                "messages/count_tokens",
                query=call.query,
                headers=call.headers,
                content=content,
                base=call.base,
                record=current_record.get(),
            )
        )
        if turn.emulation.applied_edits is not None:  # the edits the proxy applied: Anthropic's original count
            return await count_answer(response, turn.edits, turn.extra_headers)
        return await stream_back(response, turn.extra_headers, shape="anthropic")

    return await answered(request, run)


log = logging.getLogger("proxy.http.side_routes")


async def responses_compact(request: Request) -> Response:
    caller: Caller = request.state.caller
    services = services_of(request)
    try:
        settings = request_settings(services, request.scope["headers"], caller)
    except ProxyError as exc:
        return response_of(exc, caller.family)
    if settings.mode == "observe" or not emulates(
        settings.context_management, caller.base or services.settings.upstream_base
    ):
        return await answered(
            request,
            lambda: relay_tokens_expanded(
                request, caller, "responses/compact", parse=lambda raw, limit: parse_compact_body(raw, max_items=limit)
            ),
        )
    return await error_map.answered(
        lambda: _emulated(request, caller, settings),
        shape=caller.family,
        doing="The compaction failed",
        store_failure_is_a_bug=False,
    )


async def _read(request: Request, caller: Caller) -> JsonObject:
    return await read_body(request, caller, parse=lambda raw, limit: parse_compact_body(raw, max_items=limit))


async def _emulated(request: Request, caller: Caller, settings: OffloadSettings) -> Response:
    body = await _read(request, caller)
    if isinstance(body.get("previous_response_id"), str):
        raise ProxyError(
            Kind.BAD_REQUEST,
            "This proxy compacts the history it is sent: with an upstream that does not compact "
            "natively, previous_response_id is not supported by /v1/responses/compact; send the "
            "history as 'input' (openai-agents: compaction_mode=\"input\").",
            code="unsupported_parameter",
            param="previous_response_id",
        )
    tenant = tenant_store(services_of(request), request.scope["headers"], caller)
    # a compaction always stores its record: a caller the upstream refuses is told so (401) before
    # a summary call goes up with its credential
    if tenant.quota is not None and not await tenant.quota.admission.settle():
        raise CredentialRejected()
    records = tenant.records(RESPONSES.compaction_emulation.records_api)
    items = RESPONSES.history(body)
    # a failing store, quota or summariser: "The compaction failed: …" (`proxy.http.error_map`)
    begun = await begin(body, items, fmt=RESPONSES, emulating=True, records=records)
    items = begun.items
    refs = tenant.refs()
    compressor = compressor_for(
        services_of(request),
        request.scope["headers"],
        summary_body(body),
        settings=settings,
        caller=caller,
        tenant=tenant,
        fmt=RESPONSES,
        refs=refs,
        background=False,
    )
    counter = await counter_for_model_async(body["model"])
    done = await compact(
        items,
        view=RESPONSES.view,
        compressor=compressor,
        refs=refs,
        records=records,
        settings=settings,
        counter=counter,
    )
    cpu = CPU.for_messages(done.record)  # a large task is kept whole: in the record and in the answer
    session = settings.session or await cpu(
        session_from_history, caller.namespace, items, RESPONSES.view.role, system=(None, body.get("instructions"))
    )
    await tenant.record_events(session, done.events)
    _note(body, caller, done=done, session=session, explicit=bool(settings.session))
    answer = compacted_response(
        done.token, done.kept_users, created_at=int(time.time()), tokens_in=done.tokens_in, tokens_out=done.tokens_out
    )
    out = await json_answer(answer, cpu=cpu)
    out.raw_headers += [
        (b"x-offload-action", COMPACTION_ACTION.encode()),
        (b"x-offload-tokens-before", str(done.tokens_before).encode()),
        (b"x-offload-tokens-after", str(done.tokens_after).encode()),
        (b"x-offload-refs-created", str(len(done.written)).encode()),
    ]
    if done.tokens_in or done.tokens_out:
        out.raw_headers.append((b"x-offload-summary-tokens", str(done.tokens_in + done.tokens_out).encode()))
    return out


def _note(body: JsonObject, caller: Caller, *, done: Compaction, session: str | None, explicit: bool) -> None:
    """The request's record, as a managed turn's (the access log, the metrics, the statistics)."""
    rec = current_record.get()
    if rec is None:
        return
    rec.tenant, rec.stream, rec.model = caller.namespace[:12], False, body["model"]
    rec.tokens_before, rec.tokens_after, rec.action = done.tokens_before, done.tokens_after, COMPACTION_ACTION
    rec.refs, rec.refs_created = (1 if done.ref else 0), len(done.written)
    if not explicit:
        rec.session = session


def _scope(request: Request) -> tuple[OffloadSettings, Caller, TenantStore]:
    caller: Caller = request.state.caller
    services, headers = services_of(request), request.scope["headers"]
    settings = request_settings(services, headers, caller)
    if settings.mode == "observe":  # asked to offload: observe mode is about the forwarded turns
        settings = settings.model_copy(update={"mode": "auto"})
    return settings, caller, tenant_store(services, headers, caller)


async def offload(request: Request) -> Response:
    return await error_map.answered(lambda: _offload(request), doing="Nothing stored")


async def _offload(request: Request) -> Response:
    limits = services_of(request).settings
    raw, _ = await decoded(
        await request.body(), request.headers.getlist("content-encoding"), limit=limits.max_body_bytes
    )
    body = await CPU(len(raw) > LARGE_BODY)(functools.partial(parse_chat_body, max_messages=limits.max_messages), raw)
    settings, caller, tenant = _scope(request)
    refs = tenant.refs()
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise ProxyError(Kind.BAD_REQUEST, "'messages' must be a list.", param="messages")
    model = model_of(body)
    namespace = caller.namespace
    # the caller asked for the reduced messages now: a summary they need is made before answering
    compressor = compressor_for(
        services_of(request),
        request.scope["headers"],
        body,
        settings=settings,
        caller=caller,
        tenant=tenant,
        fmt=chat.CHAT,
        refs=refs,
        background=False,
    )
    counter = await counter_for_model_async(model)
    prepared = await prepare(
        messages, settings, counter=counter, namespace=namespace, refs=refs, compressor=compressor, view=chat.VIEW
    )
    if prepared.refused is not None:  # the quota, or the upstream's verdict on the credential
        raise prepared.refused
    if prepared.store_failed:
        raise StoreUnavailable(prepared.warnings[0])
    plan = prepared.plan
    await tenant.record_events(settings.session, prepared.events)
    return await json_answer(
        {
            "messages": plan.items,
            "refs": [{"ref": o.ref, "kind": o.kind, "tokens": o.tokens} for o in plan.offloads],
            "tokens_before": plan.tokens_before,
            "tokens_after": plan.tokens_after,
            "action": prepared.action,
            "summary_tokens": prepared.summary_tokens,
            "warnings": prepared.warnings,
        },
        cpu=CPU.for_messages(plan.items),
    )


async def list_events(request: Request) -> Response:
    """GET /v1/offload/events?session=…: this tenant's events, newest last."""
    return await error_map.answered(lambda: _list_events(request))


async def _list_events(request: Request) -> Response:
    settings, caller, tenant = _scope(request)
    if caller.kind == "anonymous":
        raise ProxyError(
            Kind.UNAUTHORIZED,
            "Listing events needs a credential: anonymous clients share one namespace.",
            code="missing_api_key",
        )
    session = request.query_params.get("session") or settings.session
    data = await tenant.recent_events(session)
    return JSONResponse({"object": "list", "data": data})


async def get_offloaded(request: Request) -> Response:
    return await error_map.answered(lambda: _get_offloaded(request))


async def _get_offloaded(request: Request) -> Response:
    ref = request.path_params["ref"]
    _, _, tenant = _scope(request)
    item = await tenant.refs().load(ref)
    if item is None:
        raise ProxyError(
            Kind.NOT_FOUND, f"No offloaded content ref={ref} for this credential.", code="ref_not_found", param="ref"
        )
    return await json_answer(
        {"ref": item.ref, "kind": item.kind, "content": item.text}, cpu=CPU(len(item.text) > LARGE_BODY)
    )
