"""A summary asked for the way a chat conversation is sent (`--summary-request prefix`).

The request is the turn's own: the client's body with the messages a turn forwarded first and
the tools it carried (the client's, then the injected ones, as `ChatRounds.request` adds them),
so the provider's prompt cache serves all of it; one user message asks for the snapshot. Keys
that would stream, store, shape, bound or bias the answer are left out; the rest (sampling,
reasoning effort, `prompt_cache_key`, `user`, …) stays as the turns send it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.core.jsonio import JsonObject, object_or

# Left out of a summary request: streaming, several choices, a forced format or length, stop
# sequences and biases, token probabilities, predicted outputs, audio, stored completions, and
# the client's own choice of tools (replaced by "none").
DROPPED = frozenset(
    {
        "stream",
        "stream_options",
        "n",
        "response_format",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "prediction",
        "audio",
        "modalities",
        "store",
        "metadata",
        "tool_choice",
        "function_call",
    }
)


def summary_request(
    body: JsonObject, prefix: list[Any], instruction: str, *, tools: Sequence[JsonObject], model: str
) -> tuple[str, JsonObject]:
    out = {k: v for k, v in body.items() if k not in DROPPED}
    out["model"] = model
    out["messages"] = [*prefix, {"role": "user", "content": instruction}]
    if tools:
        out["tools"] = [*(body.get("tools") or []), *tools]
    if isinstance(out.get("tools"), list) and out["tools"]:  # (a tool_choice without tools is refused)
        out["tool_choice"] = "none"
    if isinstance(out.get("functions"), list) and out["functions"]:  # the legacy form, kept as the turns send it
        out["function_call"] = "none"
    out["stream"] = False
    return "chat/completions", out


def summary_answer(answer: Any) -> tuple[str, int, int]:
    """The first choice's text (a string, or its text parts) and the usage."""
    if not isinstance(answer, dict):
        raise ValueError("not a JSON object")
    choices = answer.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict):
        raise ValueError("no choices[0].message")
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    elif not isinstance(content, str):
        content = ""
    usage = object_or(answer.get("usage"), {})
    return content, _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
