"""Non-streamed reload rounds of the Messages API: what a round asks for, what the next round
sends, and the one message the client gets."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from proxy.core import texts
from proxy.core.answers import add_usage
from proxy.core.jsonio import JsonObject, nested_deeper_than, string_or
from proxy.core.media import ToolResult
from proxy.core.rounds import ToolCall
from proxy.formats.json_body import MAX_DEPTH
from proxy.formats.messages.items import block_type, input_text, is_injected, is_tool_use, reloaded_block


def content_of(message: Any) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def injected_only(answer: Any, names: Collection[str]) -> bool:
    """Does the loop run another round: the model stopped to use tools (`stop_reason`
    "tool_use"), at least one of them injected and none of the client's? Text, thinking and
    server tools (web search, code execution, …) may come with the injected calls."""
    if not isinstance(answer, dict) or answer.get("stop_reason") != "tool_use":
        return False
    content = content_of(answer)
    return any(is_injected(b, names) for b in content) and not any(
        is_tool_use(b) and not is_injected(b, names) for b in content
    )


def calls_to_run(answer: Any, names: Collection[str]) -> list[JsonObject]:
    """The injected tool_use blocks of the answer, in order."""
    return [block for block in content_of(answer) if is_injected(block, names)]


def _arguments(value: Any) -> Any:
    """A tool_use input as the loop runs it: JSON text (`{}` when absent); the model's own text
    when it was no JSON object (`{"_raw": text}`); the object itself when it nests too deep to
    write (the tools refuse it as such)."""
    if value is None:
        return "{}"
    if type(value) is dict and len(value) == 1 and type(value.get("_raw")) is str:
        return value["_raw"]
    if nested_deeper_than(value, MAX_DEPTH):
        return value
    return input_text(value)


def tool_calls(blocks: Sequence[JsonObject]) -> list[ToolCall]:
    """The injected tool_use blocks as the loop runs them (see `_arguments`)."""
    return [
        ToolCall(str(b.get("name") or ""), _arguments(b.get("input")), string_or(b.get("id"), None)) for b in blocks
    ]


def _sendable(block: Any) -> Any:
    """A block with an input nesting past MAX_DEPTH gets a note instead: it could not be written."""
    if isinstance(block, dict) and nested_deeper_than(block.get("input"), MAX_DEPTH):
        return {**block, "input": {"_raw": texts.input_not_repeated()}}
    return block


def assistant_turn(content: list[Any]) -> JsonObject:
    """The round's assistant message for the next round: every block as the upstream sent it
    (thinking and redacted_thinking included, which the API requires back with the tool
    results), less empty text blocks (which the API refuses in a request), a tool input too
    deep to send back replaced by a note."""
    return {
        "role": "assistant",
        "content": [
            _sendable(block) for block in content if not (block_type(block) == "text" and block.get("text") == "")
        ],
    }


def tool_results(calls: Sequence[JsonObject], results: Sequence[ToolResult]) -> JsonObject:
    """The user message answering `calls` (tool_use blocks) with `results`, one tool_result each,
    in order; reloaded media as an image or document block."""
    if len(calls) != len(results):
        raise ValueError(f"{len(calls)} calls but {len(results)} results")
    return {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": call.get("id"), "content": _result_content(result)}
            for call, result in zip(calls, results)
        ],
    }


def _result_content(result: ToolResult) -> Any:
    if isinstance(result, str):
        return result
    if result.kind in ("image", "document"):
        return [reloaded_block(result.kind, result.data_url)]
    return texts.media_not_here(result.kind, result.ref)


def visible(content: list[Any], names: Collection[str]) -> list[Any]:
    """The blocks the client sees: all but the calls to the injected tools."""
    return [block for block in content if not is_injected(block, names)]


def client_stop_reason(stop_reason: Any, content: list[Any]) -> Any:
    """`tool_use` with no tool_use left for the client (only injected ones were hidden) is `end_turn`."""
    if stop_reason == "tool_use" and not any(is_tool_use(b) for b in content):
        return "end_turn"
    return stop_reason


def usage_from_chat(usage: JsonObject | None) -> JsonObject | None:
    """A chat-shaped usage (the proxy's own summary calls) in the Messages shape."""
    if not usage:
        return None
    return {"input_tokens": usage.get("prompt_tokens") or 0, "output_tokens": usage.get("completion_tokens") or 0}


def sum_usage(usages: Sequence[Any], extra_usage: JsonObject | None) -> JsonObject | None:
    """Every numeric field summed over the rounds (`cache_*` and nested counts included), plus
    `extra_usage` (Messages-shaped); None when no round reported usage."""
    reported = [u for u in usages if isinstance(u, dict)]
    if not reported:
        return None
    total = add_usage(None, extra_usage)
    for usage in reported:
        total = add_usage(total, usage)
    return total


def combine_rounds(
    answers: Sequence[JsonObject],
    names: Collection[str],
    *,
    extra_usage: JsonObject | None = None,
    lead: Sequence[JsonObject] = (),
) -> JsonObject:
    """The one message the client gets from the rounds of a non-streamed reload loop.

    The last round's message (its `stop_reason`, `stop_sequence`, `model`, …) with the first
    round's `id` (the id a stream announces in `message_start`, before anyone knows whether
    more rounds follow), the visible blocks of every round in order (what the stream shows
    too: each round's text and thinking, never an injected tool_use), and `usage` summed over
    the rounds plus `extra_usage` (Messages-shaped). A `tool_use` stop with no tool_use left
    becomes `end_turn`. `lead`: the proxy's own blocks, first (an emulated compaction block).
    """
    if not answers:
        raise ValueError("no rounds")
    first, last = answers[0], answers[-1]
    final = dict(last)
    if isinstance(last.get("content"), list) or len(answers) > 1 or lead:
        final["content"] = [*lead, *(block for answer in answers for block in visible(content_of(answer), names))]
    if "id" in first:
        final["id"] = first["id"]
    if "stop_reason" in final:
        final["stop_reason"] = client_stop_reason(final["stop_reason"], content_of(final))
    total = sum_usage([a.get("usage") for a in answers], extra_usage)
    if total is not None:
        final["usage"] = total
    return final
