"""What the proxy does in place of OpenAI's compaction, for a Responses upstream without it
(`ResponsesCompaction`, a `proxy.core.wire.ProviderCompaction`): `context_management`
thresholds read, a `compaction_trigger` ("compact now") checked, `compaction` items carrying
the proxy's tokens replaced by what they stand for, and the answers that carry its compaction
(`POST /v1/responses/compact`, the triggered response). Pure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from proxy.core.compaction import Expanded, Records, Threshold, TokenError, is_ours
from proxy.core.jsonio import JsonObject
from proxy.core.texts import INJECTED_TOOLS
from proxy.core.view import ItemView
from proxy.errors import Kind, ProxyError
from proxy.formats.context_threshold import bad, entries, token_count
from proxy.formats.json_body import STRING, Shape, check_body, load_object, of
from proxy.formats.responses._items import ResponsesView
from proxy.formats.responses._request import ITEM
from proxy.formats.responses._rounds import ResponsesRounds

# --- threshold ---
# The threshold compaction a Responses `context_management` asks for: `[{"type": "compaction", "compact_threshold": N}]` (`proxy.formats.context_threshold`).


def responses_threshold(asked: Any) -> Threshold | None:
    """The compaction a Responses `context_management` asks for (None: none). ProxyError 400
    for a malformed one (only `compaction` entries exist; one at most)."""
    if asked is None:
        return None
    found: Threshold | None = None
    for i, entry in enumerate(entries(asked, "context_management")):
        if entry["type"] != "compaction":
            raise bad(
                f'context_management[{i}].type {entry["type"][:40]!r} is not supported; use "compaction".',
                f"context_management[{i}].type",
            )
        if found is not None:
            raise bad(f"context_management[{i}] is a second compaction entry; one at most.", f"context_management[{i}]")
        value = entry.get("compact_threshold")
        found = Threshold(None if value is None else token_count(value, f"context_management[{i}].compact_threshold"))
    return found


# --- trigger ---
# A Responses `compaction_trigger` ("compact now"), emulated: the request's checks. Pure.
#
# Codex's remote compaction ("compaction v2") is a normal streamed `POST /v1/responses` whose
# last input item is `{"type": "compaction_trigger"}`; it requires exactly one `compaction`
# output item back, then sends that item in its next request's input, after the user messages
# it keeps. An upstream without context management ignores the trigger, so when the proxy
# emulates (`proxy.upstream.base_url.emulates`) the turn (`proxy.turn`) asks nothing of the
# upstream: the items before the trigger (the proxy's own token in them already expanded,
# `proxy.turn._context_management.begin`) are compacted by the emulated `/responses/compact`'s
# `proxy.turn._context_management.compact`, and the answer is that compaction item alone
# (`Inline.paused`; `ProviderCompaction.paused_answer`, streamed or not). Relaying, the request goes
# upstream unchanged: the provider compacts.
#
# What the emulation refuses (400, in OpenAI's shape, naming the item): a trigger that is not the
# last input item (two triggers: the first is not last; OpenAI: "The 'compaction_trigger' item
# must be the final input item."), a trigger with any field besides `type` (OpenAI refuses an
# `id` on it), nothing before the trigger to compact, and a trigger that continues state the
# proxy does not hold (`previous_response_id`, `conversation`) or asks to run in the background.
# A summary that cannot be made is a 502 `compaction_failed`, a store that is down a 503, a spent
# quota a 429: no token standing for nothing is answered.

TYPE = "compaction_trigger"
_ELSEWHERE = ("previous_response_id", "conversation")  # state kept upstream, not in the proxy's hands


def asked(body: dict[str, Any], items: list[Any], view: ItemView) -> bool:
    """Does the request ask for a compaction now (its input ends in a `compaction_trigger`)?
    ProxyError 400 for a trigger the emulation cannot take (the module docstring). `items`: the
    request's input as sent (`WireFormat.history`), read once, only for triggers."""
    found = [i for i, item in enumerate(items) if view.is_compaction_trigger(item)]
    if not found:
        return False
    last = len(items) - 1
    for i in found:
        if i != last:
            raise ProxyError(
                Kind.BAD_REQUEST,
                f"input[{i}]: The 'compaction_trigger' item must be the final input item.",
                code="invalid_value",
                param=f"input[{i}]",
            )
    extra = [k for k in items[last] if k != "type"]
    if extra:
        name = str(extra[0])[:64]
        raise ProxyError(
            Kind.BAD_REQUEST,
            f"Unknown parameter: 'input[{last}].{name}'. A compaction_trigger item carries its type alone.",
            code="unknown_parameter",
            param=f"input[{last}].{name}",
        )
    for key in _ELSEWHERE:
        if body.get(key) is not None:
            raise ProxyError(
                Kind.BAD_REQUEST,
                f"This proxy compacts the history it is sent: with an upstream that does not compact "
                f"natively, a compaction_trigger cannot be used with {key}; send the history as "
                "'input'.",
                code="unsupported_parameter",
                param=key,
            )
    if body.get("background") is True:
        raise ProxyError(
            Kind.BAD_REQUEST,
            "This proxy answers a compaction_trigger itself, at once: background is not supported "
            "with it (the upstream would hold no response to poll).",
            code="unsupported_parameter",
            param="background",
        )
    return True


# --- compaction_items ---
# Responses `compaction` items carrying the proxy's tokens, replaced by what they stand for.
#
# A `compaction` item whose `encrypted_content` is one of the proxy's tokens
# (`proxy.core.compaction`) means nothing to any upstream. Before planning, whichever way
# the request goes (relayed or emulated):
#
# - the newest compaction item is ours: it is replaced by its record (the summary with its
#   `ref=`, and what the compaction kept) and, as the provider would ignore them, the non-system
#   items before it are dropped (older compaction items, ours or the provider's, with them). The
#   record's system/developer items that the request carries again (same role, same text: a
#   client re-sending its instructions, as Codex and agents do after a compaction) are left out
#   of it, so each reaches the upstream once;
# - the newest is the provider's: relayed, the provider reads it and ignores what precedes it, so
#   the older items of ours are dropped (never sent); emulated, it is refused (400): nothing
#   could read it.
#
# A record holding a compaction item of ours (one written before records were kept free of them)
# is expanded in turn, a bounded number of times.

MAX_NESTED = 8  # records expanded inside one another (records written now never nest)


def _content(item: Any) -> Any:
    return item.get("encrypted_content") if isinstance(item, dict) else None


def _refused(param: str, why: str) -> ProxyError:
    return ProxyError(
        Kind.BAD_REQUEST,
        f"{param.removesuffix('.encrypted_content')} is a compaction item this proxy cannot use: {why}.",
        code="invalid_compaction",
        param=param,
    )


def _said_again(item: Any, view: ItemView) -> Any:
    """What makes a system/developer item the same instruction as another (None: not one)."""
    if view.role(item) != "system":
        return None
    text = view.text(item)
    return ("text", text) if text is not None else ("item", repr(item))


async def replace_tokens(items: list[Any], view: ItemView, records: Records, *, emulating: bool) -> list[Any] | None:
    """The input with the proxy's compaction items settled (see the module docstring), or None
    when it holds none of ours (nor a foreign one an emulating upstream must refuse).
    ProxyError 400 for a token that is another namespace's, malformed, or whose record the store
    no longer holds."""
    out, changed, where = items, False, None
    for _ in range(MAX_NESTED):
        newest = next((i for i in range(len(out) - 1, -1, -1) if view.is_provider_compaction(out[i])), None)
        if newest is None:
            return out if changed else None
        param = where or f"input[{newest}].encrypted_content"
        content = _content(out[newest])
        if not is_ours(content):
            if emulating:
                raise _refused(
                    param,
                    "its encrypted_content was made by the provider, not by this proxy, and this "
                    "upstream does not apply context management (X-Offload-Context-Management: "
                    "relay sends it on unchanged)",
                )
            # a set: 20,000 of ours before a foreign one must not cost 20,000² list lookups on the event loop
            ours = {i for i in range(newest) if view.is_provider_compaction(out[i]) and is_ours(_content(out[i]))}
            return [m for i, m in enumerate(out) if i not in ours] if ours else (out if changed else None)
        try:
            stands_for = await records.stands_for(content)
        except TokenError as exc:
            raise _refused(param, str(exc)) from None
        kept = [m for m in out[:newest] if view.role(m) == "system"]
        said = {key for m in (*kept, *out[newest + 1 :]) if (key := _said_again(m, view)) is not None}
        record = [m for m in stands_for if _said_again(m, view) not in said]
        out, changed, where = [*kept, *record, *out[newest + 1 :]], True, param
    raise _refused(where or "input", f"its record holds compaction items nested more than {MAX_NESTED} deep")


# --- compact ---
# `POST /v1/responses/compact` in OpenAI's shapes: its request body, checked where the proxy
# reads it, and the `response.compaction` object the proxy answers when it emulates the endpoint
# (`proxy.turn._context_management`). Pure.
#
# The request (openai-python `types/responses/response_compact_params.py`): `model` (required, a
# string), `input` (a string or a list of input items), `instructions` (a string),
# `previous_response_id` (a string); the rest (`prompt_cache_key`, `service_tier`, …) is not read.
# The answer (`types/responses/compacted_response.py`): `{"id", "object": "response.compaction",
# "created_at", "output", "usage"}`, its `output` "a list of all user messages, followed by a
# single compaction item" (`{"type": "compaction", "id", "encrypted_content"}`), its `usage` the
# Responses API's (`input_tokens`, `input_tokens_details`, `output_tokens`,
# `output_tokens_details`, `total_tokens`).
#
# A `POST /v1/responses` whose input ends in `{"type": "compaction_trigger"}` (Codex's remote
# compaction v2) is answered, when the proxy emulates it, with a Response (`object: "response"`,
# `status: "completed"`) whose `output` is the one compaction item (`triggered_response`), or
# streamed as the events OpenAI sends for such a Response (`triggered_events`).

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


# --- emulation ---
# What the proxy does in place of OpenAI's compaction, for a Responses upstream without it (a
# `proxy.core.wire.ProviderCompaction`): `compaction` items carrying its tokens
# (`compaction_items`), `context_management` thresholds (`threshold`), a `compaction_trigger`
# (`trigger`), and the answers that carry its compaction (`compact`). Pure.

_POSITION = ("input[", "].encrypted_content")


class ResponsesCompaction:
    records_api = "responses"

    def __init__(self, view: ResponsesView) -> None:
        self.view = view

    def threshold(self, asked: Any) -> Threshold | None:
        return responses_threshold(asked)

    def settles(self, body: dict[str, Any], path: str) -> bool:
        """`input[i].encrypted_content` of a top-level `compaction` item."""
        head, tail = _POSITION
        index = path.removeprefix(head).removesuffix(tail)
        if not path.startswith(head) or not index.isdigit():
            return False
        try:
            return bool(body["input"][int(index)].get("type") == "compaction")
        except (KeyError, IndexError, TypeError, AttributeError):
            return False

    async def expand(
        self, body: dict[str, Any], items: list[Any], records: Records, *, emulating: bool
    ) -> Expanded | None:
        replaced = await replace_tokens(items, self.view, records, emulating=emulating)
        return None if replaced is None else Expanded(body, replaced, replaced, "input")

    def record(self, reduced: list[Any]) -> list[Any]:
        """The whole reduced input, less the system/developer items (the request carries them)."""
        return [m for m in reduced if self.view.role(m) != "system"]

    def lead(self, summary: str, token: str) -> dict[str, Any]:
        return compaction_item(token)

    def compacts_now(self, body: dict[str, Any], items: list[Any]) -> bool:
        return asked(body, items, self.view)

    def rounds(
        self,
        body: dict[str, Any],
        items: list[Any],
        tools: Sequence[dict[str, Any]],
        *,
        extra_usage: dict[str, Any] | None,
        lead: Sequence[dict[str, Any]],
    ) -> ResponsesRounds:
        return ResponsesRounds(body, items, tools, names=INJECTED_TOOLS, extra_usage=extra_usage, lead=lead)

    def paused_answer(
        self, lead: list[dict[str, Any]], *, body: dict[str, Any], created_at: int, tokens_in: int, tokens_out: int
    ) -> dict[str, Any]:
        return triggered_response(lead, request=body, created_at=created_at, tokens_in=tokens_in, tokens_out=tokens_out)

    def paused_events(self, answer: dict[str, Any]) -> list[dict[str, Any]]:
        return triggered_events(answer)
