"""The answers the proxy writes itself when it emulates the providers' context management: a
turn whose compaction alone answers (no upstream call: a Messages turn paused after its
compaction, a Responses `compaction_trigger`), and `count_tokens` with the clearing edits'
`original_input_tokens` (`proxy.turn._context_management`, `proxy.turn._context_management`)."""

from __future__ import annotations

import time

import httpx2
from starlette.background import BackgroundTask
from starlette.responses import Response, StreamingResponse

from proxy.core import jsonio
from proxy.http.headers import response_headers_for_client
from proxy.http.relay import stream_back
from proxy.turn import EditsDone, Turn
from proxy.upstream import sse


def paused_response(turn: Turn, *, background: BackgroundTask) -> Response:
    """The answer of a turn whose compaction alone answers (`Inline.paused`: no upstream call),
    in the format's shape (`ProviderCompaction.paused_answer`), streamed when the request streams."""
    inline = turn.inline
    compaction = inline.made_by
    if compaction is None:  # a paused turn's lead is always its format's compaction
        raise RuntimeError("a paused turn without its compaction")
    message = compaction.paused_answer(
        inline.lead,
        body=turn.body,
        created_at=int(time.time()),
        tokens_in=inline.tokens_in,
        tokens_out=inline.tokens_out,
    )
    if turn.rounds.context_management is not None:  # clearing edits applied too (`proxy.turn._context_management`)
        message["context_management"] = turn.rounds.context_management
    if turn.body.get("stream") is True:
        events = compaction.paused_events(message)
        out: Response = StreamingResponse(
            iter([sse.encode_typed(e) for e in events]), media_type="text/event-stream; charset=utf-8"
        )
    else:
        out = Response(jsonio.dumps(message), media_type="application/json")
    out.raw_headers = [*out.raw_headers, *turn.extra_headers]
    out.background = background
    return out


async def count_answer(
    response: httpx2.Response, done: EditsDone, extra_headers: list[tuple[bytes, bytes]]
) -> Response:
    """`count_tokens`' answer: the upstream's count of the edited request, with
    `context_management.original_input_tokens` (that count plus what the edits cleared, counted
    by the proxy) as Anthropic answers; anything but a 200 count relayed as it is."""
    if response.status_code != 200:
        return await stream_back(response, extra_headers, shape="anthropic")
    try:
        raw = await response.aread()
    finally:
        await response.aclose()
    try:
        answer = jsonio.loads(raw)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and type(answer.get("input_tokens")) is int:
        answer["context_management"] = {"original_input_tokens": answer["input_tokens"] + done.cleared_tokens}
        raw = jsonio.dumps(answer)
    out = Response(raw, status_code=200)
    out.raw_headers = (
        response_headers_for_client(response.headers.raw, decoded=True)
        + [(b"content-length", str(len(raw)).encode())]
        + list(extra_headers)
    )
    return out
