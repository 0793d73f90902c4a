"""A minimal OpenAI-compatible upstream, no model behind it: `python -m proxy.demo.fake_upstream PORT
[--reload-once]` (the benchmarks', the docs' recipes' and `offload-proxy demo`'s: the only one).

Answers chat completions and Responses requests instantly (JSON or SSE) so that what is measured is the proxy,
and Anthropic Messages requests (`POST /v1/messages`, JSON, or streamed as Messages SSE events; a streamed
Responses request gets Responses events), the
proxy's summary calls included. A streamed request with `x-bench-deltas: N` (and `x-bench-delta-chars: K`,
4 by default) gets an answer of N text deltas of K characters, as chat chunks or Messages events.

With `--bill` (the demo's), a JSON answer's usage is what a provider would bill for its request:
its size (a quarter of each block's JSON, in tokens) and what a prompt cache per credential
(`proxy.core.prompt_cache`, on the wall clock: Anthropic's for Messages, caching only what the
request asks for; OpenAI's automatic one for the others) holds of it; streamed answers keep
their fixed usage. Without it every usage is fixed (the benchmarks': billing costs the fake CPU).

With `--reload-once` (the demo's), it plays a model that reads each offloaded tool result once:
a non-streamed request that offers `context_reload` and carries a tool-result marker whose ref it
has not reloaded yet (per endpoint) is answered with a call to `context_reload` for the newest
such ref; the proxy runs it and asks again, and that round is answered as usual.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import uvicorn

from proxy.core import prompt_cache as pc
from proxy.core.texts import RELOAD_TOOL, SUMMARY_INSTRUCTION, SUMMARY_PROMPT
from proxy.formats import messages as messages_cache
from proxy.formats import prompt_cache as openai_cache

# The proxy's summary calls, recognised exactly: the instruction as the last chat message, the
# last Responses input item or the last block of the last Anthropic message (the prefix shape), or
# the summariser's system prompt as the first message (the transcript shape, the body's start).
_INSTRUCTION = json.dumps(SUMMARY_INSTRUCTION).encode()
PREFIX_ENDS = (
    b'{"role":"user","content":' + _INSTRUCTION + b"}]",
    b'{"type":"message","role":"user","content":[{"type":"input_text","text":' + _INSTRUCTION + b"}]}]",
    b'{"type":"text","text":' + _INSTRUCTION + b"}]}]",
)
TRANSCRIPT_START = b'"messages":[{"role":"system","content":' + json.dumps(SUMMARY_PROMPT).encode() + b"}"

Scope = MutableMapping[str, Any]  # ASGI's
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def is_summary_call(body: bytes) -> bool:
    if any(end in body for end in PREFIX_ENDS):
        return True
    return TRANSCRIPT_START in body[: len(TRANSCRIPT_START) + 200]


COMPLETION = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }
).encode()


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


STREAM = [chunk({"role": "assistant", "content": ""}), chunk({"content": "ok"}), chunk({}, "stop"), b"data: [DONE]\n\n"]


RESPONSE = json.dumps(
    {
        "id": "resp_bench",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": "gpt-4o",
        "output": [
            {
                "type": "message",
                "id": "msg_bench",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "ok", "annotations": []}],
            }
        ],
        "usage": {"input_tokens": 10, "output_tokens": 1, "total_tokens": 11},
    }
).encode()


def responses_stream(pieces: list[str]) -> list[bytes]:
    """A streamed Responses answer: one message of one output_text part, a delta per piece, in
    the event order the API (and the openai SDK's `responses.stream`) uses."""
    text = "".join(pieces)
    final = json.loads(RESPONSE)
    final["output"][0]["content"][0]["text"] = text
    item = {**final["output"][0], "status": "in_progress", "content": []}
    part = {"type": "output_text", "text": "", "annotations": []}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": {**final, "status": "in_progress", "output": []}}),
        ("response.output_item.added", {"output_index": 0, "item": item}),
        ("response.content_part.added", {"item_id": item["id"], "output_index": 0, "content_index": 0, "part": part}),
    ]
    events += [
        (
            "response.output_text.delta",
            {"item_id": item["id"], "output_index": 0, "content_index": 0, "delta": piece, "logprobs": []},
        )
        for piece in pieces
    ]
    events += [
        (
            "response.output_text.done",
            {"item_id": item["id"], "output_index": 0, "content_index": 0, "text": text, "logprobs": []},
        ),
        (
            "response.content_part.done",
            {"item_id": item["id"], "output_index": 0, "content_index": 0, "part": {**part, "text": text}},
        ),
        ("response.output_item.done", {"output_index": 0, "item": final["output"][0]}),
        ("response.completed", {"response": final}),
    ]
    return [
        f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': n, **data})}\n\n".encode()
        for n, (kind, data) in enumerate(events)
    ]


def anthropic_message(text: str, input_tokens: int = 10, output_tokens: int = 1) -> bytes:
    """An Anthropic Messages answer."""
    return json.dumps(
        {
            "id": "msg_bench",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
        }
    ).encode()


def is_messages(scope: Scope) -> bool:
    return bool(scope["method"] == "POST" and scope["path"].rstrip("/").endswith("/messages"))


MESSAGE = anthropic_message("ok")


def anthropic_event(kind: str, **data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def anthropic_stream(pieces: list[str]) -> list[bytes]:
    """A streamed Messages answer: one text block, a `text_delta` per piece, in the event order the
    Anthropic API (and its SDKs' `messages.stream`) uses."""
    start: dict[str, Any] = {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-sonnet-4-5",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
    return [
        anthropic_event("message_start", message=start),
        anthropic_event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        *(
            anthropic_event("content_block_delta", index=0, delta={"type": "text_delta", "text": piece})
            for piece in pieces
        ),
        anthropic_event("content_block_stop", index=0),
        anthropic_event(
            "message_delta",
            delta={"stop_reason": "end_turn", "stop_sequence": None},
            usage={"output_tokens": len(pieces)},
        ),
        anthropic_event("message_stop"),
    ]


def long_answer(messages: bool, deltas: int, chars: int) -> list[bytes]:
    """A streamed answer of `deltas` text deltas of `chars` characters each (chat or Messages events)."""
    piece = ("abcdefghij" * (chars // 10 + 1))[:chars]
    if not messages:
        return [STREAM[0], *(chunk({"content": piece}) for _ in range(deltas)), *STREAM[2:]]
    return anthropic_stream([piece] * deltas)


async def long_stream(send: Send, messages: bool, deltas: int, *, chars: int) -> None:
    """`long_answer`, written 512 events at a time (the proxy reads them one by one all the same)."""
    events = long_answer(messages, deltas, chars)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    for i in range(0, len(events), 512):
        await send({"type": "http.response.body", "body": b"".join(events[i : i + 512]), "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def read_body(receive: Receive) -> bytes:
    """A request's whole body (ASGI)."""
    body: bytes = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


def compacted(body: bytes) -> bytes:
    """A `response.compaction` (OpenAI's `POST /v1/responses/compact`): the request's user
    messages, then one compaction item (its content opaque, as the provider's is)."""
    try:
        request = json.loads(body)
    except ValueError:
        request = None
    items = request.get("input") if isinstance(request, dict) else None
    users = [i for i in items if isinstance(i, dict) and i.get("role") == "user"] if isinstance(items, list) else []
    return json.dumps(
        {
            "id": "cmp_demo",
            "object": "response.compaction",
            "created_at": 1,
            "output": [*users, {"type": "compaction", "id": "cmp_item_demo", "encrypted_content": "demo-compacted"}],
            "usage": {
                "input_tokens": len(body) // 4,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 20,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": len(body) // 4 + 20,
            },
        }
    ).encode()


BILLING = False  # --bill
CACHES: dict[tuple[str, str], pc.Cache] = {}  # (provider, credential) → its prompt cache
MAX_CACHES = 1024


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def billed(scope: Scope, body: bytes, answer: bytes) -> bytes:
    """`answer` (a JSON answer to `body`) with its usage as the provider would bill it (`--bill`)."""
    try:
        request, reply = json.loads(body), json.loads(answer)
    except ValueError:
        return answer
    if not isinstance(request, dict) or not isinstance(reply, dict) or not isinstance(reply.get("usage"), dict):
        return answer
    messages = is_messages(scope)
    model = request.get("model") if isinstance(request.get("model"), str) else None
    profile = pc.profile_for("anthropic" if messages else "openai", model)
    try:
        asked = (messages_cache if messages else openai_cache).cached_request(request, time.time(), _tokens)
    except (pc.CacheRequestError, TypeError, ValueError, AttributeError):
        return answer
    headers = dict(scope["headers"])
    credential = (headers.get(b"x-api-key") or headers.get(b"authorization") or b"").decode("latin-1")
    if len(CACHES) >= MAX_CACHES:
        CACHES.clear()
    bill, CACHES[(profile.name, credential)] = CACHES.get((profile.name, credential), pc.Cache(profile)).bill(asked)
    usage = reply["usage"]
    if messages:
        usage.update(
            input_tokens=bill.uncached,
            cache_read_input_tokens=bill.read,
            cache_creation_input_tokens=bill.written,
            cache_creation={"ephemeral_5m_input_tokens": bill.write_5m, "ephemeral_1h_input_tokens": bill.write_1h},
        )
    elif "prompt_tokens" in usage:
        usage.update(
            prompt_tokens=bill.total,
            total_tokens=bill.total + usage.get("completion_tokens", 0),
            prompt_tokens_details={"cached_tokens": bill.read},
        )
    else:
        usage.update(
            input_tokens=bill.total,
            total_tokens=bill.total + usage.get("output_tokens", 0),
            input_tokens_details={"cached_tokens": bill.read},
        )
    return json.dumps(reply).encode()


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    body = await read_body(receive)
    if is_summary_call(body):
        text = "<state_snapshot><task_overview>benchmark</task_overview></state_snapshot>"
        if is_messages(scope):
            snapshot = anthropic_message(text, len(body) // 4, 20)
        elif scope["path"].rstrip("/").endswith("/responses"):
            snapshot = json.dumps(
                {
                    "id": "resp_sum",
                    "object": "response",
                    "created_at": 1,
                    "status": "completed",
                    "model": "gpt-4o",
                    "output": [
                        {
                            "type": "message",
                            "id": "msg_sum",
                            "role": "assistant",
                            "status": "completed",
                            "content": [{"type": "output_text", "text": text, "annotations": []}],
                        }
                    ],
                    "usage": {"input_tokens": len(body) // 4, "output_tokens": 20, "total_tokens": len(body) // 4 + 20},
                }
            ).encode()
        else:
            snapshot = json.dumps(
                {
                    "id": "chatcmpl-sum",
                    "object": "chat.completion",
                    "created": 1,
                    "model": "gpt-4o",
                    "choices": [
                        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
                    ],
                    "usage": {
                        "prompt_tokens": len(body) // 4,
                        "completion_tokens": 20,
                        "total_tokens": len(body) // 4 + 20,
                    },
                }
            ).encode()
        if BILLING:
            snapshot = billed(scope, body, snapshot)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(snapshot)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": snapshot})
        return
    if b'"stream": true' in body or b'"stream":true' in body:
        headers = dict(scope["headers"])
        if b"x-bench-deltas" in headers:
            await long_stream(
                send,
                is_messages(scope),
                int(headers[b"x-bench-deltas"]),
                chars=int(headers.get(b"x-bench-delta-chars", b"4")),
            )
            return
        chunks, delay = int(headers.get(b"x-bench-chunks", b"0")), int(headers.get(b"x-bench-delay-ms", b"0")) / 1e3
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        words = [f" word{i}" for i in range(chunks)]
        if is_messages(scope):  # Messages events, as the Anthropic SDKs read them
            parts = anthropic_stream(["ok", *words])
        elif scope["path"].rstrip("/").endswith("/responses"):  # Responses events, as the openai SDK reads them
            parts = responses_stream(["ok", *words])
        else:
            parts = STREAM[:2] + [chunk({"content": word}) for word in words] + STREAM[2:]
        for part in parts:
            if delay:
                await asyncio.sleep(delay)
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    if scope["path"].rstrip("/").endswith("/responses/compact"):
        answer = compacted(body)
    else:
        answer = RESPONSE if scope["path"].endswith("/responses") else MESSAGE if is_messages(scope) else COMPLETION
    if RELOADED is not None and (ref := ref_to_reload(scope["path"], body)) is not None:
        answer = reload_call(scope["path"], ref, len(RELOADED))
    if BILLING:
        answer = billed(scope, body, answer)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/json"),
                (b"x-request-id", b"req_bench"),
                (b"content-length", str(len(answer)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": answer})


# ------------------------------------------------------------------ --reload-once (the demo's model)

RELOADED: set[tuple[str, str]] | None = None  # (endpoint, ref) reloaded so far; None: never reload
TOOL_MARKER = re.compile(rb"\[offloaded tool result: \d+ tokens, ref=([A-Za-z0-9_-]{6,64})\]")
RELOAD_ID = "demo_reload_"  # in the ids of the calls it makes: a request holding one is a reload round


def is_streamed(body: bytes) -> bool:
    return b'"stream": true' in body or b'"stream":true' in body


def offers_reload(body: bytes) -> bool:
    """The request offers the reload tool (its name as a JSON value; the markers name it in prose only)."""
    return any(f'"name"{gap}"{RELOAD_TOOL}"'.encode() in body for gap in (":", ": "))


def ref_to_reload(path: str, body: bytes) -> str | None:
    """The newest tool-result ref of `body` not reloaded yet on `path` (then remembered), else None."""
    reloaded = RELOADED
    if reloaded is None or not offers_reload(body) or RELOAD_ID.encode() in body or is_streamed(body):
        return None
    for match in reversed(TOOL_MARKER.findall(body)):
        ref: str = match.decode()
        key = (path.rstrip("/"), ref)
        if key not in reloaded:
            reloaded.add(key)
            return ref
    return None


def reload_call(path: str, ref: str, n: int) -> bytes:
    """An answer calling `context_reload(ref)`, in the endpoint's format."""
    arguments = json.dumps({"ref": ref})
    if path.rstrip("/").endswith("/responses"):
        return json.dumps(
            {
                "id": f"resp_{RELOAD_ID}{n}",
                "object": "response",
                "created_at": 1,
                "status": "completed",
                "model": "gpt-4o",
                "output": [
                    {
                        "type": "function_call",
                        "id": f"fc_{RELOAD_ID}{n}",
                        "call_id": f"call_{RELOAD_ID}{n}",
                        "name": RELOAD_TOOL,
                        "arguments": arguments,
                        "status": "completed",
                    }
                ],
                "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
            }
        ).encode()
    if path.rstrip("/").endswith("/messages"):
        return json.dumps(
            {
                "id": f"msg_{RELOAD_ID}{n}",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [
                    {"type": "tool_use", "id": f"toolu_{RELOAD_ID}{n}", "name": RELOAD_TOOL, "input": {"ref": ref}}
                ],
                "stop_reason": "tool_use",
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 5},
            }
        ).encode()
    return json.dumps(
        {
            "id": f"chatcmpl-{RELOAD_ID}{n}",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4o",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": f"call_{RELOAD_ID}{n}",
                                "type": "function",
                                "function": {"name": RELOAD_TOOL, "arguments": arguments},
                            }
                        ],
                    },
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
    ).encode()


def main(argv: list[str] | None = None) -> None:
    global RELOADED, BILLING
    parser = argparse.ArgumentParser(description="A minimal fake upstream (chat, Responses, Anthropic Messages).")
    parser.add_argument("port", type=int)
    parser.add_argument(
        "--reload-once",
        action="store_true",
        help="Call context_reload once for each offloaded tool result seen (the demo's model).",
    )
    parser.add_argument(
        "--bill", action="store_true", help="Report usage as a provider with a prompt cache would bill it (the demo's)."
    )
    args = parser.parse_args(argv)
    BILLING = args.bill
    if args.reload_once:
        RELOADED = set()
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
