"""`POST /v1/responses/compact` in OpenAI's shapes: its request body, checked where the proxy
reads it, and the `response.compaction` object the proxy answers when it emulates the endpoint
(`proxy.turn._compact_now`). Pure.

The request (openai-python `types/responses/response_compact_params.py`): `model` (required, a
string), `input` (a string or a list of input items), `instructions` (a string),
`previous_response_id` (a string); the rest (`prompt_cache_key`, `service_tier`, …) is not read.
The answer (`types/responses/compacted_response.py`): `{"id", "object": "response.compaction",
"created_at", "output", "usage"}`, its `output` "a list of all user messages, followed by a
single compaction item" (`{"type": "compaction", "id", "encrypted_content"}`), its `usage` the
Responses API's (`input_tokens`, `input_tokens_details`, `output_tokens`,
`output_tokens_details`, `total_tokens`).

A `POST /v1/responses` whose input ends in `{"type": "compaction_trigger"}` (Codex's remote
compaction v2) is answered, when the proxy emulates it, with a Response (`object: "response"`,
`status: "completed"`) whose `output` is the one compaction item (`triggered_response`), or
streamed as the events OpenAI sends for such a Response (`triggered_events`).
"""

from __future__ import annotations

import hashlib
from typing import Any

from proxy.core.jsonio import JsonObject
from proxy.errors import Kind, ProxyError
from proxy.formats.json_body import STRING, Shape, check_body, load_object, of
from proxy.formats.responses.body import ITEM

BODY = Shape(
    {
        "input": of("a string or an array of objects", text=True, objs=ITEM),
        "model": STRING,
        "instructions": STRING,
        "previous_response_id": STRING,
    }
)
# What a summary call of the compaction may carry of the client's body (the rest of a compact
# body, `image`, `prompt_cache_options`, is no parameter of `POST /v1/responses`).
SUMMARY_FIELDS = ("model", "instructions", "prompt_cache_key", "prompt_cache_retention", "service_tier")


def parse_compact_body(raw: bytes, *, max_items: int | None = None) -> JsonObject:
    """The body as a dict, or ProxyError 400 in OpenAI's shape: a field of another JSON type,
    no `model`, neither `input` nor `previous_response_id`, more than `max_items` input items."""
    body = load_object(raw)
    check_body(body, BODY)
    if not isinstance(body.get("model"), str):
        raise ProxyError(
            Kind.BAD_REQUEST, "Missing required parameter: 'model'.", code="missing_required_parameter", param="model"
        )
    items = body.get("input")
    if items is None and not isinstance(body.get("previous_response_id"), str):
        raise ProxyError(
            Kind.BAD_REQUEST,
            "Missing required parameter: 'input' (or 'previous_response_id').",
            code="missing_required_parameter",
            param="input",
        )
    if max_items is not None and isinstance(items, list) and len(items) > max_items:
        raise ProxyError(
            Kind.BAD_REQUEST,
            f"Too many input items: {len(items)} > {max_items}.",
            code="too_many_messages",
            param="input",
        )
    return body


def summary_body(body: JsonObject) -> JsonObject:
    """What the summary calls take of the compact request (`SUMMARY_FIELDS`, and `input`)."""
    return {k: body[k] for k in (*SUMMARY_FIELDS, "input") if k in body}


def output_message(item: JsonObject) -> JsonObject:
    """A kept user message as an output item: `type` "message" and its content as parts (an
    input item may leave out `type` and give its content as a string)."""
    out = {"type": "message", **item}
    if isinstance(out.get("content"), str):
        out["content"] = [{"type": "input_text", "text": out["content"]}]
    return out


def _digest(token: str, purpose: str) -> str:
    return hashlib.sha256(f"{purpose}\0{token}".encode()).hexdigest()[:48]


def compaction_item(token: str) -> JsonObject:
    """The compaction output item carrying the proxy's token (its id derived from the token)."""
    return {"id": f"cmp_{_digest(token, 'item')}", "type": "compaction", "encrypted_content": token}


def usage(tokens_in: int, tokens_out: int) -> JsonObject:
    """The Responses API's usage object for what the compaction's summary calls used."""
    return {
        "input_tokens": tokens_in,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": tokens_out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": tokens_in + tokens_out,
    }


def compacted_response(
    token: str, kept_users: list[Any], *, created_at: int, tokens_in: int = 0, tokens_out: int = 0
) -> JsonObject:
    """The `response.compaction` object: the kept user messages, then the compaction item. The
    same token gives the same ids (and output); `created_at` is the time it was answered."""
    return {
        "id": f"resp_{_digest(token, 'response')}",
        "object": "response.compaction",
        "created_at": created_at,
        "output": [*(output_message(m) for m in kept_users), compaction_item(token)],
        "usage": usage(tokens_in, tokens_out),
    }


# What a Response echoes of its request, as the API does (the rest take the API's defaults).
_ECHOED = (
    "instructions",
    "max_output_tokens",
    "metadata",
    "parallel_tool_calls",
    "previous_response_id",
    "prompt_cache_key",
    "reasoning",
    "service_tier",
    "store",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_p",
    "truncation",
    "user",
)
_DEFAULTS: dict[str, Any] = {
    "instructions": None,
    "max_output_tokens": None,
    "metadata": {},
    "parallel_tool_calls": True,
    "previous_response_id": None,
    "reasoning": {"effort": None, "summary": None},
    "store": True,
    "temperature": 1.0,
    "text": {"format": {"type": "text"}},
    "tool_choice": "auto",
    "tools": [],
    "top_p": 1.0,
    "truncation": "disabled",
    "user": None,
}


def triggered_response(
    lead: list[JsonObject], *, request: JsonObject, created_at: int, tokens_in: int = 0, tokens_out: int = 0
) -> JsonObject:
    """The Response answering a `compaction_trigger` request: `lead` (the one compaction item)
    as its whole `output`, the compaction's `usage`, the request's settings echoed. Its id is
    derived from the compaction item's (the same compaction, the same ids)."""
    token = str(lead[0].get("encrypted_content")) if lead else ""
    model = request.get("model")
    body: dict[str, Any] = {
        "id": f"resp_{_digest(token, 'response')}",
        "object": "response",
        "created_at": created_at,
        "status": "completed",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "model": model if isinstance(model, str) else "unknown",
        "output": list(lead),
        "usage": usage(tokens_in, tokens_out),
        "completed_at": created_at,
    }
    for key in _ECHOED:
        body[key] = request[key] if request.get(key) is not None else _DEFAULTS.get(key)
    return body


def triggered_events(response: JsonObject) -> list[JsonObject]:
    """The same Response streamed, as OpenAI streams one: `response.created` and
    `response.in_progress` (no output yet), each output item's `response.output_item.added`
    and `.done` (a compaction item has no content events), `response.completed`;
    `sequence_number` 0, 1, 2, …"""
    start = {**response, "status": "in_progress", "output": [], "usage": None, "completed_at": None}
    out: list[JsonObject] = [
        {"type": "response.created", "response": start},
        {"type": "response.in_progress", "response": start},
    ]
    for index, item in enumerate(response["output"]):
        out += [
            {"type": "response.output_item.added", "output_index": index, "item": item},
            {"type": "response.output_item.done", "output_index": index, "item": item},
        ]
    out.append({"type": "response.completed", "response": response})
    return [{**event, "sequence_number": n} for n, event in enumerate(out)]
