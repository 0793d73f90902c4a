"""Responses API payloads as OpenAI sends them, for the fake upstream and the tests reading them.

Builders of output items (`message`, `function_call`, `reasoning`), of `usage`, of a whole
Response object (`response`) and of the SSE events that stream it (`events`, `sse_stream`):
`response.created`, `response.in_progress`, then per output item `response.output_item.added`,
its content events (`content_part.added`, `output_text.delta`/`.done`, `content_part.done`;
`function_call_arguments.delta`/`.done`; `reasoning_summary_part.added`,
`reasoning_summary_text.delta`/`.done`, `reasoning_summary_part.done`) and
`response.output_item.done`, then `response.completed`. Every event carries `sequence_number`
(0, 1, 2, …), item events `output_index` and, below the item, `item_id`, as in the openai SDK's
`types/responses/*_event.py`. A stream ends with the terminal event: no `[DONE]`.

`answer(rec, *items)` answers a recorded `POST …/responses` request the way it asked (JSON, or
SSE when `stream` is true), echoing the request's `tools`, `tool_choice`, `store`, … like the
real API. `parse_sse`, `input_items`, `refs_in_input` read what went over the wire.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

REF = re.compile(r"ref=([A-Za-z0-9_-]{6,64})")
_ids = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}_fake{next(_ids):06d}"


# ---------------------------------------------------------------- output items


def message(text: str, *, id: str | None = None, phase: str | None = None) -> dict:
    """An assistant message output item with one `output_text` part."""
    item = {
        "id": id or _id("msg"),
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": text}],
    }
    if phase:
        item["phase"] = phase
    return item


def function_call(
    name: str, arguments: dict | str, *, call_id: str | None = None, id: str | None = None, namespace: str | None = None
) -> dict:
    """The model calling a function tool (`arguments` a dict is JSON-encoded)."""
    item = {
        "id": id or _id("fc"),
        "type": "function_call",
        "status": "completed",
        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        "call_id": call_id or _id("call"),
        "name": name,
    }
    if namespace:
        item["namespace"] = namespace
    return item


def reasoning(
    summary: str | None = "**Thinking**",
    *,
    encrypted_content: str | None = "gAAAAABfake-opaque==",
    id: str | None = None,
) -> dict:
    """A reasoning item: a summary (or none) and the opaque `encrypted_content` a client replays."""
    item: dict[str, Any] = {
        "id": id or _id("rs"),
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": summary}] if summary else [],
    }
    if encrypted_content is not None:
        item["encrypted_content"] = encrypted_content
    return item


def function_call_output(call_id: str, output: str) -> dict:
    """An input item answering a function call (what a client sends back)."""
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def usage(input_tokens: int = 10, output_tokens: int = 5, *, cached: int = 0, reasoning_tokens: int = 0) -> dict:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": input_tokens + output_tokens,
    }


_default_usage = usage

# ---------------------------------------------------------------- the Response object

_ECHOED = (
    "instructions",
    "max_output_tokens",
    "previous_response_id",
    "reasoning",
    "store",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_p",
    "truncation",
    "parallel_tool_calls",
    "metadata",
    "user",
    "prompt_cache_key",
    "service_tier",
)


def response(
    *output: dict,
    model: str = "gpt-5",
    usage: dict | None = None,
    id: str | None = None,
    status: str = "completed",
    request: dict | None = None,
    created_at: int = 1_700_000_000,
) -> dict:
    """A Response object; with `request` (the request body) its settings are echoed as the API does."""
    body: dict[str, Any] = {
        "id": id or _id("resp"),
        "object": "response",
        "created_at": created_at,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "model": model,
        "output": list(output),
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "user": None,
        "metadata": {},
        "completed_at": created_at + 1 if status == "completed" else None,
    }
    for key in _ECHOED:
        if request and request.get(key) is not None:
            body[key] = request[key]
    if request and isinstance(request.get("model"), str):
        body["model"] = request["model"]
    return body


# ---------------------------------------------------------------- the same as SSE events


def _halves(text: str) -> list[str]:
    if len(text) < 2:
        return [text]
    half = len(text) // 2
    return [text[:half], text[half:]]


def _item_events(item: dict, index: int) -> list[dict]:
    """The events of one output item after `output_item.added`, before `output_item.done`."""
    kind, item_id, out = item.get("type"), item.get("id"), []
    where = {"item_id": item_id, "output_index": index}
    if kind == "message":
        for ci, part in enumerate(item.get("content") or []):
            empty = {**part, "text": ""} if part.get("type") == "output_text" else {**part, "refusal": ""}
            out.append({"type": "response.content_part.added", **where, "content_index": ci, "part": empty})
            if part.get("type") == "output_text":
                for piece in _halves(part["text"]):
                    out.append(
                        {
                            "type": "response.output_text.delta",
                            **where,
                            "content_index": ci,
                            "delta": piece,
                            "logprobs": [],
                        }
                    )
                out.append(
                    {
                        "type": "response.output_text.done",
                        **where,
                        "content_index": ci,
                        "text": part["text"],
                        "logprobs": [],
                    }
                )
            out.append({"type": "response.content_part.done", **where, "content_index": ci, "part": part})
    elif kind == "function_call":
        for piece in _halves(item["arguments"]):
            out.append({"type": "response.function_call_arguments.delta", **where, "delta": piece})
        out.append({"type": "response.function_call_arguments.done", **where, "arguments": item["arguments"]})
    elif kind == "reasoning":
        for si, part in enumerate(item.get("summary") or []):
            out.append(
                {
                    "type": "response.reasoning_summary_part.added",
                    **where,
                    "summary_index": si,
                    "part": {"type": "summary_text", "text": ""},
                }
            )
            for piece in _halves(part["text"]):
                out.append(
                    {"type": "response.reasoning_summary_text.delta", **where, "summary_index": si, "delta": piece}
                )
            out.append(
                {"type": "response.reasoning_summary_text.done", **where, "summary_index": si, "text": part["text"]}
            )
            out.append({"type": "response.reasoning_summary_part.done", **where, "summary_index": si, "part": part})
    return out


def _in_progress(item: dict) -> dict:
    """An item as `response.output_item.added` announces it: no content yet."""
    kind = item.get("type")
    if kind == "message":
        return {**item, "status": "in_progress", "content": []}
    if kind == "function_call":
        return {**item, "status": "in_progress", "arguments": ""}
    if kind == "reasoning":
        return {k: v for k, v in item.items() if k != "encrypted_content"} | {"summary": []}
    return item


def events(resp: dict) -> list[dict]:
    """The SSE events (as dicts, `sequence_number` 0, 1, …) OpenAI streams for the Response `resp`."""
    start = {**resp, "status": "in_progress", "output": [], "usage": None, "completed_at": None}
    out: list[dict] = [
        {"type": "response.created", "response": start},
        {"type": "response.in_progress", "response": start},
    ]
    for index, item in enumerate(resp["output"]):
        out.append({"type": "response.output_item.added", "output_index": index, "item": _in_progress(item)})
        out.extend(_item_events(item, index))
        out.append({"type": "response.output_item.done", "output_index": index, "item": item})
    terminal = {
        "completed": "response.completed",
        "incomplete": "response.incomplete",
        "failed": "response.failed",
    }.get(resp["status"], "response.completed")
    out.append({"type": terminal, "response": resp})
    return [{**event, "sequence_number": n} for n, event in enumerate(out)]


def sse_event(event: dict) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def sse_stream(resp: dict) -> list[bytes]:
    return [sse_event(e) for e in events(resp)]


def answer(rec, *output: dict, usage: dict | None = None, **kwargs) -> Response:
    """Answer the recorded `POST …/responses` with `output` (JSON, or SSE when it asked to stream)."""
    body = rec.json() if rec.body else {}
    resp = response(*output, usage=usage if usage is not None else _default_usage(), request=body, **kwargs)
    if body.get("stream"):
        return StreamingResponse(iter(sse_stream(resp)), media_type="text/event-stream")
    return JSONResponse(resp)


def answering(*output: dict, **kwargs):
    """A `scripted` step: `answer(rec, *output, **kwargs)`."""
    return lambda rec: answer(rec, *output, **kwargs)


# ---------------------------------------------------------------- reading what went over the wire


def parse_sse(text: str | bytes) -> list[dict]:
    """The event dicts of an SSE body (each `data:` line; an `event:` line must name the same type)."""
    if isinstance(text, bytes):
        text = text.decode()
    out = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        lines = [line for line in block.split("\n") if line]
        data = "\n".join(line[5:].lstrip(" ") for line in lines if line.startswith("data:"))
        if not data:
            continue
        event = json.loads(data)
        named = [line[6:].strip() for line in lines if line.startswith("event:")]
        assert not named or named == [event.get("type")], (named, event.get("type"))
        out.append(event)
    return out


def input_items(rec) -> list[dict]:
    """The `input` of a recorded responses request as a list of items (a string: one user message)."""
    value = rec.json().get("input")
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    return value or []


def refs_in_input(rec) -> list[str]:
    """The offload references in a recorded responses request's `input`, in order."""
    return REF.findall(json.dumps(input_items(rec)))


def reloading_model(final: str):
    """A fake model step: asked to ("reload please" in the last input item), it reloads the first
    ref it is shown (`call_reload`); given the reload's output it says "reloaded"; else `final`."""

    def step(rec) -> Response:
        items = input_items(rec)
        last = items[-1]
        if last.get("type") == "function_call_output" and last.get("call_id") == "call_reload":
            return answer(rec, message("reloaded"))
        refs = refs_in_input(rec)
        if refs and "reload please" in json.dumps(last):
            return answer(rec, function_call("context_reload", {"ref": refs[0]}, call_id="call_reload"))
        return answer(rec, message(final))

    return step


def final_response(client, *, stream: bool, **request: Any):
    """`client.responses` asked for `request`, streamed (the SDK's event stream, to its final
    response) or not: the response either way."""
    if stream:
        with client.responses.stream(**request) as events:
            return events.get_final_response()
    return client.responses.create(**request)


def tool_names(rec) -> list[str | None]:
    """The `name` (or the `type`, for hosted tools) of each tool of a recorded request."""
    return [t.get("name") or t.get("type") for t in rec.json().get("tools") or []]


# ---------------------------------------------------------------- OpenAI's own context management


def compaction(encrypted_content: str | None = None, *, id: str | None = None) -> dict:
    """A provider `compaction` item: opaque (`encrypted_content`), sent back by the client."""
    return {
        "id": id or _id("cmp"),
        "type": "compaction",
        "encrypted_content": encrypted_content or "gAAAAABpZ" + "Kx7/q+w=" * 40,
    }


NATIVE_COMPACTION = compaction("gAAAAABnative-compaction/9+Zq==", id="cmp_native_1")


def native_answer(rec) -> Response | None:
    """How OpenAI answers a request carrying its own context management, else None: with
    `context_management` compaction the output opens with a `compaction` item (the threshold
    taken as crossed), then the message; a request ending with `compaction_trigger` gets only
    the compaction item."""
    body = rec.json() if rec.body else {}
    entries = body.get("context_management")
    compacts = isinstance(entries, list) and any(isinstance(e, dict) and e.get("type") == "compaction" for e in entries)
    items = body.get("input") if isinstance(body.get("input"), list) else []
    if items and isinstance(items[-1], dict) and items[-1].get("type") == "compaction_trigger":
        return answer(rec, NATIVE_COMPACTION)
    if compacts:
        return answer(rec, NATIVE_COMPACTION, message("Compacted and answered"))
    return None


def user_message(text: str) -> dict:
    """A Responses user message item with one input_text part."""
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def assistant_message(text: str) -> dict:
    """A Responses assistant message item with one output_text part (as sent back as input)."""
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def words(label: str, n: int) -> str:
    """`n` distinct words of `label`: text whose every word can be told apart."""
    return f"{label}: " + " ".join(f"{label}w{k}" for k in range(n))
