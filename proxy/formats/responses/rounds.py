"""Non-streamed reload rounds of the Responses API."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from proxy.core import texts
from proxy.core.answers import add_usage
from proxy.core.jsonio import JsonObject, array_or
from proxy.core.media import ToolResult
from proxy.formats.responses.items import _type, is_injected, needs_client, reloaded_output
from proxy.formats.responses.request import _hide_tools

# ---------------------------------------------------------------------------------------------
# Non-streamed rounds


def _output(response: Any) -> list[Any]:
    output = response.get("output") if isinstance(response, dict) else None
    return output if isinstance(output, list) else []


def injected_only(response: JsonObject, names: Collection[str]) -> bool:
    """Does the loop run another round: the response completed (or carries no status) and its
    output holds at least one injected call and nothing waiting for the client? Messages,
    reasoning and hosted tool calls (web search, MCP, …) may come with the injected calls."""
    if not isinstance(response, dict) or response.get("status") not in (None, "completed"):
        return False
    output = _output(response)
    return any(is_injected(i, names) for i in output) and not any(needs_client(i, names) for i in output)


def calls_to_run(response: JsonObject, names: Collection[str]) -> list[JsonObject]:
    """The injected function_call items of the response (each has `call_id`, `name`, `arguments`)."""
    return [item for item in _output(response) if is_injected(item, names)]


def round_items(response: JsonObject, names: Collection[str]) -> list[JsonObject]:
    """The output items to append to `input` for the next round, in order: the round's
    reasoning items, its messages and hosted calls, and the injected function_call items; the
    `injected_results` follow them.

    Only a round that `injected_only` accepts continues. A round mixing injected calls with
    the client's calls ends the loop, as in the chat loop: the client's calls can only be
    answered by the client and the API accepts no next round without their outputs. The
    client then gets the response without the injected calls (`hide_injected`); those are
    not run, and the model may ask again on the client's next turn. (Client calls are left
    out here anyway.)

    With `store: false`, a reasoning item can only be sent back with its `encrypted_content`
    (`include: ["reasoning.encrypted_content"]`, which Codex asks for); when
    `reasoning_replayable(body)` is false the caller should drop reasoning items from what it
    appends.
    """
    return [item for item in _output(response) if isinstance(item, dict) and not needs_client(item, names)]


def reasoning_replayable(body: JsonObject) -> bool:
    """Can the request's reasoning items be sent back in a next round? Not when `store` is false
    and `include` lacks "reasoning.encrypted_content": the upstream then has no copy to refer to.
    (The caller may instead add that `include` entry to the forwarded body.)"""
    include = array_or(body.get("include"), [])
    return body.get("store") is not False or "reasoning.encrypted_content" in include


def injected_results(calls: Sequence[JsonObject], results: Sequence[ToolResult]) -> list[JsonObject]:
    """`function_call_output` items answering `calls` (from `calls_to_run`) with `results`, pairwise;
    reloaded media as an `input_image` / `input_file` output."""
    if len(calls) != len(results):
        raise ValueError(f"{len(calls)} calls but {len(results)} results")
    return [
        {"type": "function_call_output", "call_id": call.get("call_id"), "output": _result_output(result)}
        for call, result in zip(calls, results)
    ]


def _result_output(result: ToolResult) -> Any:
    if isinstance(result, str):
        return result
    if result.kind in ("image", "document"):
        return reloaded_output(result.kind, result.data_url, result.ref)
    return texts.media_not_here(result.kind, result.ref)


def _hidden_flags(output: list[Any], names: Collection[str]) -> list[bool]:
    """Which output items the client must not see: the injected calls, and each reasoning item
    followed only by injected calls (up to the next reasoning item or the end, at least one)."""
    hidden = [is_injected(item, names) for item in output]
    for i, item in enumerate(output):
        if _type(item) != "reasoning":
            continue
        end = i + 1
        while end < len(output) and _type(output[end]) != "reasoning":
            end += 1
        hidden[i] = end > i + 1 and all(hidden[i + 1 : end])
    return hidden


def _output_text(output: list[Any]) -> str:
    """What the SDK's `Response.output_text` computes: every message's output_text parts, joined."""
    return "".join(
        part["text"]
        for item in output
        if _type(item) == "message"
        for part in (array_or(item.get("content"), ()))
        if isinstance(part, dict) and part.get("type") == "output_text" and isinstance(part.get("text"), str)
    )


def _with_output(response: JsonObject, output: list[Any]) -> JsonObject:
    """`response` with `output` replaced and its `output_text` field (when present) recomputed."""
    out = {**response, "output": output}
    if "output_text" in out:
        out["output_text"] = _output_text(output)
    return out


def hide_injected(response: JsonObject, names: Collection[str]) -> JsonObject:
    """The response as the client gets it (a new dict): injected function_call items removed,
    and the reasoning items that led only to injected calls; the injected tools removed from
    the echoed `tools`; `output_text`, if present, kept consistent. Other keys keep their order."""
    output = _output(response)
    visible = [item for item, hidden in zip(output, _hidden_flags(output, names)) if not hidden]
    return _with_output(_hide_tools(response, names), visible)


def combine_rounds(
    responses: Sequence[JsonObject],
    names: Collection[str],
    *,
    extra_usage: JsonObject | None = None,
    lead: Sequence[JsonObject] = (),
) -> JsonObject:
    """The one response the client gets from the rounds of a non-streamed reload loop.

    The last round's response (its status, model, …) with the first round's `id` and
    `created_at` (the same identity a stream announces, see `StreamRewriter`), the visible
    output items of every round in order, and `usage` summed over the rounds plus
    `extra_usage` (the proxy's own calls, in Responses shape) when any round reported usage.
    `lead`: the proxy's own output items, first (an emulated compaction item).
    """
    if not responses:
        raise ValueError("no rounds")
    first, last = responses[0], responses[-1]
    output = [*lead, *(item for response in responses for item in hide_injected(response, names)["output"])]
    final = _with_output(_hide_tools(last, names), output)
    for key in ("id", "created_at"):
        if key in first:
            final[key] = first[key]
    usages = [r["usage"] for r in responses if isinstance(r.get("usage"), dict)]
    if usages:
        total = add_usage(None, extra_usage)
        for usage in usages:
            total = add_usage(total, usage)
        final["usage"] = total
    return final
