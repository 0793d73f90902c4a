"""`POST /v1/responses/compact`: relayed unchanged to an upstream that compacts natively (but
for a compaction token of the proxy's in its input, replaced by what it stands for), emulated for one that does not (`proxy.upstream.base_url.emulates`; `proxy.turn._context_management`).

Emulated, the request is read in OpenAI's shape (`proxy.formats.responses`): a field of
another JSON type, no `model` or no `input` is a 400; `previous_response_id` is a 400 too (the
proxy keeps no stored chain it could compact, and most upstreams that need the emulation keep
none either: the client sends the history as `input`). The answer is a `response.compaction`.
A compaction that cannot be made is an error in OpenAI's shape: the summary failed (502), the
store is unavailable (503), the quota is spent (429).
"""

from __future__ import annotations

import logging
import time

from starlette.requests import Request
from starlette.responses import Response

from proxy.core.compaction import COMPACTION_ACTION
from proxy.core.jsonio import JsonObject
from proxy.core.settings import OffloadSettings
from proxy.core.tokens import counter_for_model_async
from proxy.errors import Kind, ProxyError
from proxy.formats.responses import RESPONSES, compacted_response, parse_compact_body, summary_body
from proxy.http import error_map
from proxy.http.call_parts import compressor_for, request_settings, tenant_store
from proxy.http.caller import Caller
from proxy.http.error_map import json_answer, response_of
from proxy.http.managed import answered
from proxy.http.services import services_of
from proxy.http.telemetry import current as current_record
from proxy.http.token_relay import read_body, relay_tokens_expanded
from proxy.offload.cpu_pool import CPU
from proxy.offload.tenant import CredentialRejected
from proxy.stats import session_from_history
from proxy.turn import Compaction, begin, compact
from proxy.upstream.base_url import emulates

log = logging.getLogger("proxy.http.compact")


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
