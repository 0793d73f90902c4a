"""A summary asked for the way a Responses conversation is sent (`--summary-request prefix`).

The request is the turn's own: the client's body (its `instructions`, tools, reasoning, …) with
the input items a turn forwarded first and the tools it carried (injected the way the reload
rounds inject them), so the provider's prompt cache serves all of it; one user message asks for
the snapshot. Nothing is streamed, stored, run in the background or continued from state kept
upstream (`previous_response_id`, `conversation`); no output format or length is forced.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.core.jsonio import JsonObject, object_or
from proxy.formats.responses.request import inject_tools, with_history

DROPPED = frozenset(
    {
        "stream",
        "stream_options",
        "previous_response_id",
        "conversation",
        "max_output_tokens",
        "top_logprobs",
        "background",
        "store",
        "tool_choice",
    }
)


def instruction_item(text: str) -> JsonObject:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def summary_request(
    body: JsonObject, prefix: list[Any], instruction: str, *, tools: Sequence[JsonObject], model: str
) -> tuple[str, JsonObject]:
    out = with_history(body, [*prefix, instruction_item(instruction)])
    if tools:
        out = inject_tools(out, tools)
    out = {k: v for k, v in out.items() if k not in DROPPED}
    out["model"] = model
    text = out.get("text")
    if isinstance(text, dict) and "format" in text:  # verbosity stays: the turns send it
        out["text"] = {k: v for k, v in text.items() if k != "format"}
    if isinstance(out.get("tools"), list) and out["tools"]:
        out["tool_choice"] = "none"
    out.update(stream=False, store=False, background=False)
    return "responses", out


def summary_answer(answer: Any) -> tuple[str, int, int]:
    """The `output_text` parts of the answer's message items, and its usage."""
    if not isinstance(answer, dict) or not isinstance(answer.get("output"), list):
        raise ValueError("no output list")
    parts: list[str] = []
    for item in answer["output"]:
        if isinstance(item, dict) and item.get("type") == "message" and isinstance(item.get("content"), list):
            parts += [
                p["text"]
                for p in item["content"]
                if isinstance(p, dict) and p.get("type") == "output_text" and isinstance(p.get("text"), str)
            ]
    usage = object_or(answer.get("usage"), {})
    return "".join(parts), _count(usage.get("input_tokens")), _count(usage.get("output_tokens"))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
