"""Responses API items: their kinds, their text, and how the core sees them (`ResponsesView`).

See the package docstring for the whole format.

Pure functions and small classes over plain JSON values (dicts, lists, strings), no IO:

- `ResponsesView`: how the planners see Responses *input items* (`proxy.core.view.ItemView`).
- Request helpers: `history`, `with_history`, `inject_tools`, `colliding_tool_names`.
- Non-streamed reload rounds: `injected_only`, `calls_to_run`, `round_items`, `injected_results`,
  `hide_injected`, `combine_rounds`, `add_usage`.
- Streamed reload rounds: `StreamRewriter`, which turns the SSE events of successive upstream
  rounds into the events of one response for the client.

Item shapes follow the openai SDK's `ResponseInputItemParam` / `ResponseOutputItem`. A message
may come without `"type"` (openai-agents sends `{"role": "user", "content": "..."}`); its
content is a string or a list of parts (`input_text`, `output_text`, `input_image`,
`input_file`, `refusal`). Items of a type this module does not know are never changed.

A call to the proxy's injected tools is a `function_call` item whose `name` is one of the
injected names and which carries no `namespace` (a namespaced function belongs to the client).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any, cast

from proxy.core.jsonio import JsonObject, object_or, string_or
from proxy.core.tokens import NOTE_KEY
from proxy.core.view import ItemView, MediaPart, Role

SYSTEM_ROLES = frozenset({"system", "developer"})

# Items that make a call answered later by an item with the same `call_id`.
CALL_TYPES = frozenset(
    {
        "function_call",
        "custom_tool_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "computer_call",
        "tool_search_call",
        "program",
    }
)
# Everything else the model produces (hosted tools run by the server carry their own results).
ASSISTANT_TYPES = CALL_TYPES | frozenset(
    {
        "reasoning",
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "item_reference",
    }
)
# Results of a call; besides these, any type ending in "_output" is a tool result too.
TOOL_RESULT_TYPES = frozenset(
    {
        "function_call_output",
        "custom_tool_call_output",
        "local_shell_call_output",
        "shell_call_output",
        "apply_patch_call_output",
        "computer_call_output",
        "tool_search_output",
        "program_output",
        "mcp_approval_response",
    }
)
# Tool results whose offloadable text is their `output`: a string (or, for the first two, parts).
_TEXT_OUTPUT_TYPES = frozenset(
    {
        "function_call_output",
        "custom_tool_call_output",
        "local_shell_call_output",
        "apply_patch_call_output",
        "mcp_call",
    }
)
# Calls in a response's output that only the client can answer (the reload loop must stop).
CLIENT_CALL_TYPES = frozenset(
    {
        "function_call",
        "custom_tool_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "computer_call",
        "mcp_approval_request",
    }
)
# Calls the server runs itself (their results are in the same response).
_SERVER_CALL_TYPES = frozenset(
    {
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "mcp_call",
    }
)
_TEXT_PARTS = frozenset({"input_text", "output_text"})


def _type(item: Any) -> str | None:
    """The item's type; a message may omit it (EasyInputMessage)."""
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if type(kind) is str:  # (the common case first: asked many times of every item on every turn)
        return kind
    if kind is None and "role" in item:
        return "message"
    if kind is None and "id" in item:
        return "item_reference"  # its type is optional
    return kind if isinstance(kind, str) else None


def _parts_text(parts: Any) -> str | None:
    """The texts of `input_text` / `output_text` parts joined by newlines (None: no text part)."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return None
    texts = [
        p["text"]
        for p in parts
        if isinstance(p, dict) and p.get("type") in _TEXT_PARTS and isinstance(p.get("text"), str)
    ]
    return "\n".join(texts) if texts else None


def _with_parts_text(parts: Any, text: str) -> Any:
    """`parts` with its text replaced: the first text part gets `text`, other text parts are
    dropped, non-text parts stay in place (like `proxy.formats.chat._items.with_text`). A string becomes `text`;
    a list without a text part gets an `input_text` part in front."""
    if not isinstance(parts, list):
        return text
    out: list[Any] = []
    placed = False
    for part in parts:
        if isinstance(part, dict) and part.get("type") in _TEXT_PARTS and isinstance(part.get("text"), str):
            if not placed:
                out.append({**part, "text": text})
                placed = True
        else:
            out.append(part)
    if not placed:
        out.insert(0, {"type": "input_text", "text": text})
    return out


# What an offloaded screenshot becomes in a `computer_call_output` (whose output must be an image):
# a 1×1 grey PNG; the marker follows the item as a user message (`request.with_history`).
PLACEHOLDER_PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGNoaGgAAAMEAYFL09IQAAAAAElFTkSuQmCC"
)


def _inline(url: Any) -> str | None:
    return url if isinstance(url, str) and url.startswith("data:") else None


def media_part(part: Any) -> MediaPart | None:
    """An `input_image` or `input_file` part (or a `computer_screenshot`) as the planner sees it."""
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in ("input_image", "computer_screenshot"):
        detail = part.get("detail")
        inline = _inline(part.get("image_url"))
        if inline == PLACEHOLDER_PNG:
            return None  # an offloaded screenshot's stand-in
        return MediaPart("image", inline, "openai", detail if isinstance(detail, str) else None)
    if kind == "input_file" and (part.get("file_data") is not None or part.get("file_id") is not None):
        return MediaPart("document", _inline(part.get("file_data")))
    return None


def reloaded_output(kind: str, data_url: str, ref: str) -> list[JsonObject]:
    """A `function_call_output`'s output showing reloaded media again."""
    if kind == "image":
        return [{"type": "input_image", "image_url": data_url}]
    return [{"type": "input_file", "file_data": data_url, "filename": ref}]


def _media_parts(item: Any) -> tuple[str | None, list[Any]]:
    """Where an item keeps its media: ("content" | "output", the parts), or (None, [])."""
    kind = _type(item)
    if kind == "message" and isinstance(item.get("content"), list):
        return "content", item["content"]
    if kind in ("function_call_output", "custom_tool_call_output") and isinstance(item.get("output"), list):
        return "output", item["output"]
    if kind == "computer_call_output" and isinstance(item.get("output"), dict):
        return "output", [item["output"]]
    return None, []


def _part_label(part: Any) -> str:
    """A part as the summariser reads it."""
    if not isinstance(part, dict):
        return ""
    kind = part.get("type")
    if kind in _TEXT_PARTS:
        return string_or(part.get("text"), "")
    if kind == "refusal":
        return f"[refusal] {part.get('refusal') or ''}".rstrip()
    if kind == "input_image":
        return "[image]"
    if kind == "input_file":
        name = part.get("filename") or part.get("file_id") or part.get("file_url") or ""
        return f"[file {name}]".replace(" ]", "]")
    return f"[{kind}]"


def is_injected(item: Any, names: Collection[str]) -> bool:
    """Is `item` a call to one of the proxy's injected tools (a plain function_call, no namespace)?"""
    return (
        isinstance(item, dict)
        and item.get("type") == "function_call"
        and item.get("name") in names
        and not item.get("namespace")
    )


def needs_client(item: Any, names: Collection[str]) -> bool:
    """Does this output item wait for the client (a call of the client's own tools, an approval)?

    Unknown types ending in "_call" count as the client's: the reload loop then stops and the
    client gets the item, never a call the proxy cannot answer.
    """
    kind = _type(item)
    if kind is None or is_injected(item, names):
        return False
    if kind in CLIENT_CALL_TYPES:
        return True
    if kind == "tool_search_call":
        execution: object = item.get("execution")
        return execution == "client"
    return kind.endswith("_call") and kind not in _SERVER_CALL_TYPES and kind not in ASSISTANT_TYPES


class ResponsesView:
    """`ItemView` over Responses input items (see `proxy.core.view`)."""

    def __init__(self, injected_names: Iterable[str]) -> None:
        self.injected_names = frozenset(injected_names)

    def role(self, item: Any) -> Role:
        """system/developer message → "system", user → "user", the model's items → "assistant",
        `*_output` items → "tool", anything else → "other"."""
        kind = _type(item)
        if kind == "message":
            role = item.get("role")
            if role in SYSTEM_ROLES:
                return "system"
            if role in ("user", "assistant"):
                return cast(Role, role)
            return "other"
        if kind == "additional_tools":
            return "system"  # tool definitions given by the developer: never summarised
        if kind in TOOL_RESULT_TYPES or (kind is not None and kind.endswith("_output")):
            return "tool"
        if kind in ASSISTANT_TYPES or (kind is not None and kind.endswith("_call")):
            return "assistant"
        return "other"

    def tool_text(self, item: Any) -> str | None:
        """The `output` of a function/custom/local-shell/apply-patch call output or of an `mcp_call`
        (which carries its own result); text parts joined by newlines. None for a screenshot
        (`computer_call_output`), a shell_call_output's chunk list, and everything else."""
        if _type(item) not in _TEXT_OUTPUT_TYPES:
            return None
        output = item.get("output")
        if isinstance(output, str):
            return output
        if isinstance(output, list) and item.get("type") in ("function_call_output", "custom_tool_call_output"):
            return _parts_text(output)
        return None

    def with_tool_text(self, item: Any, text: str) -> Any:
        """A copy of `item` whose `output` text is `text`; every other key (`id`, `call_id`,
        `type`, `status`, …) and the key order are kept. Raises ValueError for an item without
        offloadable text (callers offload only where `tool_text` is not None)."""
        if self.tool_text(item) is None:
            raise ValueError(f"not a tool result with text: {_type(item)!r}")
        return {**item, "output": _with_parts_text(item["output"], text)}

    def text(self, item: Any) -> str | None:
        """A message's text parts, or a tool result's text: where markers and refs are looked for
        (an offloaded screenshot's marker, under NOTE_KEY, too)."""
        if _type(item) == "message":
            return _parts_text(item.get("content"))
        if isinstance(item, dict) and isinstance(item.get(NOTE_KEY), str):
            return cast(str, item[NOTE_KEY])
        return self.tool_text(item)

    def media(self, item: Any) -> tuple[MediaPart, ...]:
        return tuple(part for part in map(media_part, _media_parts(item)[1]) if part is not None)

    def with_media(self, item: Any, markers: Mapping[int, str]) -> Any:
        """Parts become `input_text` markers; a computer_call_output's screenshot becomes
        PLACEHOLDER_PNG and its marker is kept under NOTE_KEY."""
        key, parts = _media_parts(item)
        if _type(item) == "computer_call_output":
            return {**item, "output": {**item["output"], "image_url": PLACEHOLDER_PNG}, NOTE_KEY: markers[0]}
        out: list[Any] = []
        k = 0
        for part in parts:
            if media_part(part) is not None:
                if k in markers:
                    part = {"type": "input_text", "text": markers[k]}
                k += 1
            out.append(part)
        return {**item, key: out}

    def calls(self, item: Any) -> tuple[str, ...]:
        """The `call_id` of a call item (an `mcp_approval_request` counts with its `id`)."""
        kind = _type(item)
        if kind in CALL_TYPES or (kind is not None and kind.endswith("_call") and kind not in ASSISTANT_TYPES):
            call_id = item.get("call_id")
            return (call_id,) if isinstance(call_id, str) else ()
        if kind == "mcp_approval_request" and isinstance(item.get("id"), str):
            return (item["id"],)
        return ()

    def call_details(self, item: Any) -> tuple[tuple[str, str], ...]:
        """(name, arguments) of a call item: a function call's `arguments`, a custom tool call's
        `input`; a shell call's `action`, an apply_patch call's `operation` and a computer call's
        `action` as JSON text (names "local_shell", "shell", "apply_patch", "computer"); an
        mcp_call as "server.name"."""
        kind = _type(item)
        if kind in ("function_call", "custom_tool_call", "mcp_call"):
            name = string_or(item.get("name"), "")
            prefix = item.get("server_label") if kind == "mcp_call" else item.get("namespace")
            if isinstance(prefix, str) and prefix:
                name = f"{prefix}.{name}"
            arguments = item.get("input" if kind == "custom_tool_call" else "arguments")
            return ((name, arguments if isinstance(arguments, str) else ""),)
        field = {
            "local_shell_call": ("local_shell", "action"),
            "shell_call": ("shell", "action"),
            "apply_patch_call": ("apply_patch", "operation"),
            "computer_call": ("computer", "action"),
        }.get(kind or "")
        if field is None:
            return ()
        value = item.get(field[1])
        return ((field[0], json.dumps(value, ensure_ascii=False) if value is not None else ""),)

    def answers(self, item: Any) -> str | None:
        """The `call_id` a tool result answers (`approval_request_id` for an mcp_approval_response;
        a local_shell_call_output without call_id names the call by its `id`)."""
        if self.role(item) != "tool":
            return None
        kind = _type(item)
        if kind == "mcp_approval_response":
            key = "approval_request_id"
        elif kind == "local_shell_call_output" and not isinstance(item.get("call_id"), str):
            key = "id"
        else:
            key = "call_id"
        value = item.get(key)
        return value if isinstance(value, str) else None

    def attached(self, previous: Any, item: Any) -> bool:
        """No cut may fall between `previous` and `item` when:

        - `previous` is a `reasoning` item (it must stay with the item that follows it);
        - `item` is a tool result right after a call or another result (`fc1, fc2, out1, out2`:
          a cut anywhere inside would separate a call from its result);
        - `item` is a call right after another call (parallel calls of one model turn) or right
          after an assistant message (the text the model wrote with its calls, which chat keeps
          in the same message as the calls).
        """
        if _type(previous) == "reasoning":
            return True
        previous_is_call = bool(self.calls(previous))
        if self.answers(item) is not None:
            return previous_is_call or self.answers(previous) is not None
        if not self.calls(item):
            return False
        return previous_is_call or (_type(previous) == "message" and previous.get("role") == "assistant")

    def injected_calls(self, item: Any) -> tuple[str, ...]:
        """The `call_id` of a function_call to one of the injected tools."""
        if is_injected(item, self.injected_names) and isinstance(item.get("call_id"), str):
            return (item["call_id"],)
        return ()

    def is_provider_compaction(self, item: Any) -> bool:
        """A `compaction` item (from `context_management` or `/responses/compact`): opaque."""
        return _type(item) == "compaction"

    def is_compaction_trigger(self, item: Any) -> bool:
        return _type(item) == "compaction_trigger"

    def summary_item(self, text: str) -> JsonObject:
        """A user message carrying the summary."""
        return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}

    def transcript(self, item: Any) -> tuple[str, str]:
        """(header, text) for the summariser, e.g. ("[assistant calls exec_command({...})]", "")."""
        label, text = self._label(item)
        return f"[{label}]", text

    def _label(self, item: Any) -> tuple[str, str]:
        kind = _type(item)
        if kind is None:
            return "other", json.dumps(item, ensure_ascii=False)
        if kind == "message":
            content = item.get("content")
            text = (
                "\n".join(filter(None, map(_part_label, content)))
                if isinstance(content, list)
                else string_or(content, "")
            )
            return str(item.get("role") or "message"), text
        if kind == "reasoning":  # the summary (and any plain reasoning text); encrypted content is opaque
            parts = [p for key in ("summary", "content") if isinstance(item.get(key), list) for p in item[key]]
            texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
            return "assistant reasoning", "\n".join(texts)
        if kind in ("function_call", "custom_tool_call"):
            args = item.get("arguments") if kind == "function_call" else item.get("input")
            name = item.get("name") or "?"
            if item.get("namespace"):
                name = f"{item['namespace']}.{name}"
            return f"assistant calls {name}({args if isinstance(args, str) else ''})", ""
        if kind == "mcp_call":
            name = f"{item.get('server_label') or '?'}.{item.get('name') or '?'}"
            output = string_or(item.get("output"), "")
            if not output and item.get("error"):
                output = f"[error] {json.dumps(item['error'], ensure_ascii=False)}"
            return f"assistant calls {name}({item.get('arguments') or ''})", output
        if kind in ("local_shell_call", "shell_call"):
            action = object_or(item.get("action"), {})
            command = action.get("command") or action.get("commands") or []
            shown = (
                " ".join(command)
                if isinstance(command, list) and all(isinstance(c, str) for c in command)
                else json.dumps(command, ensure_ascii=False)
            )
            return f"assistant runs {shown}", ""
        if self.role(item) == "tool":
            if (result := self.tool_text(item)) is None:
                output = item.get("output")
                if kind in ("function_call_output", "custom_tool_call_output") and isinstance(output, list):
                    result = "\n".join(filter(None, map(_part_label, output)))  # an image as "[image]", not its base64
                else:
                    result = (
                        "[screenshot]"
                        if kind == "computer_call_output"
                        else (json.dumps(output, ensure_ascii=False) if output is not None else "")
                    )
            return f"tool result ({self.answers(item) or '?'})", result
        rest = {k: v for k, v in item.items() if k not in ("type", "id", "encrypted_content")}
        label = "assistant " + kind.replace("_", " ") if self.role(item) == "assistant" else kind
        return label, json.dumps(rest, ensure_ascii=False) if rest else ""


_VIEW_CHECK: ItemView = ResponsesView(())  # the protocol is satisfied (checked by type checkers)
