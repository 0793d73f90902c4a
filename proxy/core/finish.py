"""How an upstream answer ended, read off its JSON in any of the three formats: a whole answer,
one event of its stream, or an error body. The holdout records it per turn (`proxy.stats.arms`:
the last answer's finish of a session, its errors, its context-length errors). Pure.

Chat Completions: a choice's `finish_reason`; Responses: the response's `status` (an
`incomplete` one's `incomplete_details.reason`), whole or in its `response.completed`,
`response.incomplete` or `response.failed` event; Anthropic Messages: `stop_reason`, whole or
in its `message_delta` event. An error (`{"error": …}`, Anthropic's and the Responses stream's
`"type": "error"`, a failed response) ends as `ERROR`, and is a context-length error when its
code or message says the model's context window was exceeded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

ERROR = "error"
MAX_REASON = 40  # characters of a reason kept (the upstream's string)
CONTEXT_CODES = frozenset({"context_length_exceeded", "model_context_window_exceeded"})
_CONTEXT_TEXT = re.compile(
    r"context[ _-]?(length|window)|maximum context|prompt is too long|input is too long|"
    r"too many (input )?tokens|exceeds? the (model's )?(context|maximum)",
    re.IGNORECASE,
)
_REASON = re.compile(r"[A-Za-z0-9_.-]{1,40}")
TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


@dataclass(frozen=True)
class Ending:
    finish: str | None = None  # the finish (stop) reason; ERROR for an error
    error: bool = False
    context_error: bool = False  # of an error: the model's context window exceeded


def _reason(value: Any) -> str | None:
    return value if isinstance(value, str) and _REASON.fullmatch(value) else None


def is_context_error(error: Any) -> bool:
    """Does an error object (or its message) say the model's context window was exceeded?"""
    if isinstance(error, str):
        return bool(_CONTEXT_TEXT.search(error[:4096]))
    if not isinstance(error, dict):
        return False
    code = error.get("code") if isinstance(error.get("code"), str) else error.get("type")
    if isinstance(code, str) and code in CONTEXT_CODES:
        return True
    message = error.get("message")
    return isinstance(message, str) and bool(_CONTEXT_TEXT.search(message[:4096]))


def error_ending(error: Any) -> Ending:
    return Ending(ERROR, True, is_context_error(error))


def _of_response(response: Any) -> Ending | None:
    if not isinstance(response, dict):
        return None
    status = response.get("status")
    if status == "failed":
        return error_ending(response.get("error"))
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = _reason(details.get("reason")) if isinstance(details, dict) else None
        return Ending(reason or "incomplete", context_error=reason in CONTEXT_CODES)
    reason = _reason(status)
    return Ending(reason) if reason else None


def _of_choices(choices: list[Any]) -> Ending | None:
    for choice in choices:
        if isinstance(choice, dict) and (reason := _reason(choice.get("finish_reason"))) is not None:
            return Ending(reason)
    return None


def _stopped(reason: str | None) -> Ending | None:
    return None if reason is None else Ending(reason, context_error=reason in CONTEXT_CODES)


def of_value(value: Any) -> Ending | None:
    """What `value` (a parsed answer, stream event or error body) says of how the answer ended;
    None when it says nothing (most events of a stream)."""
    if not isinstance(value, dict):
        return None
    kind = value.get("type")
    if kind == "error":  # Anthropic's error body and event, the Responses stream's error event
        return error_ending(value.get("error") if isinstance(value.get("error"), dict) else value)
    if kind in TERMINAL_EVENTS:
        return _of_response(value.get("response"))
    if value.get("object") == "response":
        return _of_response(value)
    if isinstance(choices := value.get("choices"), list):
        return _of_choices(choices)
    if kind == "message":
        return _stopped(_reason(value.get("stop_reason")))
    if kind == "message_delta" and isinstance(delta := value.get("delta"), dict):
        return _stopped(_reason(delta.get("stop_reason")))
    if isinstance(value.get("error"), dict) and kind is None:  # OpenAI's error body, a chat stream's error chunk
        return error_ending(value["error"])
    return None


_MAY_END = re.compile(
    r'"(finish_reason|stop_reason)"\s*:\s*"|"error"\s*:\s*\{|"type"\s*:\s*"error"|'
    r'"response\.(completed|incomplete|failed)"'
)


def may_end(data: str) -> bool:
    """Might one event's JSON text say how its answer ended (worth parsing)? Not a chat chunk's
    `"finish_reason": null`, nor a Responses delta."""
    return _MAY_END.search(data) is not None
