"""`POST /v1/messages/count_tokens`: Anthropic's token count of what the proxy will really send."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from proxy.formats.messages import MESSAGES
from proxy.http import emulated_answers, holdout, observed
from proxy.http.managed import ManagedCall, answered
from proxy.http.relay import stream_back
from proxy.http.telemetry import current as current_record


async def count_tokens(request: Request) -> Response:
    """`POST /v1/messages/count_tokens`: the body reduced as `POST /v1/messages` would reduce it
    (summaries ready in the store are used, none is started nor waited for), with the reload
    tools when the turn would carry them, counted by the upstream: a client deciding its own
    compaction from this count sees what the proxy will really send. With `context_management`
    edits the proxy applies itself, the count is of the edited request and
    `context_management.original_input_tokens` adds what the edits cleared (`proxy.http.emulated_answers`)."""

    async def run() -> Response:
        call = await ManagedCall.open(request, MESSAGES)
        if observed.observing(call.settings):  # counted as sent: observe mode changes nothing
            return await observed.as_received(call, "messages/count_tokens")
        if (await holdout.arm_of(call))[0] == "control":  # counted as sent: its turns go as sent
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
            return await emulated_answers.count_answer(response, turn.edits, turn.extra_headers)
        return await stream_back(response, turn.extra_headers, shape="anthropic")

    return await answered(request, run)
