"""`replay --live`: the model's next action in an answer, and how alike two of them are.

An answer (a chat completion, a Responses response or an Anthropic message, non-streamed) is
read as an `Action`: the tools it calls (names and arguments, in order), its text, and why it
stopped (`finish`). Two actions of the same turn (the raw arm's and the proxy arm's) compare as:

- `same_tools`: the same tool names in the same order (both calling none counts as the same);
- `argument_similarity`: the calls paired by position, each pair's arguments as JSON flattened
  to (path, value) pairs (strings with their whitespace collapsed) and compared by Jaccard
  (shared pairs / all pairs); a call without a partner scores 0; the mean over the pairs;
  arguments that are not JSON compare as text (below). None when neither arm called a tool;
- `text_similarity`: difflib's `SequenceMatcher.ratio` of the two texts, whitespace collapsed
  (1.0 when both are empty), each cut to MAX_TEXT characters; None when neither wrote text;
- `same_finish`: the same finish reason;
- `agree`: the same next action: same tools, argument similarity 1.0 (when any) and the same
  finish reason. Text is not part of it (a model rarely writes the same prose twice).
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import Any

MAX_TEXT = 20_000  # characters of each text compared (difflib is quadratic in the worst case)
MAX_FLAT = 10_000  # (path, value) pairs kept of one call's arguments
_SPACE = re.compile(r"\s+")


class AnswerError(ValueError):
    """An answer that holds no next action this module can read (the message says why)."""


@dataclass(frozen=True)
class Call:
    name: str
    arguments: str  # as sent: JSON text (chat, Responses) or the JSON of Anthropic's `input`


@dataclass(frozen=True)
class Action:
    calls: tuple[Call, ...]
    text: str
    finish: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls": [{"name": c.name, "arguments": c.arguments} for c in self.calls],
            "text": self.text,
            "finish": self.finish,
        }

    @staticmethod
    def from_dict(value: dict[str, Any]) -> Action:
        return Action(
            tuple(Call(str(c["name"]), str(c["arguments"])) for c in value["calls"]),
            str(value["text"]),
            str(value["finish"]),
        )


def _texts(parts: Any, kinds: tuple[str, ...]) -> list[str]:
    if isinstance(parts, str):
        return [parts]
    if not isinstance(parts, list):
        return []
    return [
        p["text"] for p in parts if isinstance(p, dict) and p.get("type") in kinds and isinstance(p.get("text"), str)
    ]


def _chat(answer: dict[str, Any]) -> Action:
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise AnswerError("a chat completion without choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise AnswerError("a chat completion without a message")
    calls = []
    tool_calls = message.get("tool_calls")
    for call in tool_calls if isinstance(tool_calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            arguments = function.get("arguments")
            calls.append(
                Call(str(function.get("name")), arguments if isinstance(arguments, str) else json.dumps(arguments))
            )
    return Action(
        tuple(calls), "\n".join(_texts(message.get("content"), ("text",))), str(choices[0].get("finish_reason"))
    )


def _responses(answer: dict[str, Any]) -> Action:
    output = answer.get("output")
    if not isinstance(output, list):
        raise AnswerError("a Responses response without output")
    calls, texts = [], []
    for item in output:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call":
            arguments = item.get("arguments")
            calls.append(
                Call(str(item.get("name")), arguments if isinstance(arguments, str) else json.dumps(arguments))
            )
        elif item.get("type") == "message":
            texts += _texts(item.get("content"), ("output_text", "text"))
    details = answer.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    finish = "function_call" if calls else str(reason or answer.get("status"))
    return Action(tuple(calls), "\n".join(texts), finish)


def _anthropic(answer: dict[str, Any]) -> Action:
    content = answer.get("content")
    if not isinstance(content, list):
        raise AnswerError("an Anthropic message without content")
    calls = [
        Call(str(b.get("name")), json.dumps(b.get("input"), sort_keys=True))
        for b in content
        if isinstance(b, dict) and b.get("type") == "tool_use"
    ]
    return Action(tuple(calls), "\n".join(_texts(content, ("text",))), str(answer.get("stop_reason")))


_READERS = {"chat": _chat, "responses": _responses, "anthropic": _anthropic}


def action_of(answer: Any, format: str) -> Action:
    """The next action in a non-streamed answer of `format`; AnswerError when it has none."""
    if not isinstance(answer, dict):
        raise AnswerError("the answer is not a JSON object")
    return _READERS[format](answer)


def _flat(value: Any, path: str, out: set[tuple[str, str]]) -> None:
    if len(out) >= MAX_FLAT:
        return
    if isinstance(value, dict):
        if not value:
            out.add((path, "{}"))
        for k, v in value.items():
            _flat(v, f"{path}.{k}", out)
    elif isinstance(value, list):
        if not value:
            out.add((path, "[]"))
        for i, v in enumerate(value):
            _flat(v, f"{path}[{i}]", out)
    elif isinstance(value, str):
        out.add((path, _SPACE.sub(" ", value).strip()))
    else:
        out.add((path, json.dumps(value)))


def flattened(value: Any) -> set[tuple[str, str]]:
    """`value`'s leaves as (path, normalised value) pairs: `.key`, `[index]`; strings with their
    whitespace collapsed, numbers and booleans as JSON writes them."""
    out: set[tuple[str, str]] = set()
    _flat(value, "$", out)
    return out


def text_similarity(a: str, b: str) -> float:
    """difflib's ratio of the two texts, whitespace collapsed, each cut to MAX_TEXT (1.0 when both are empty)."""
    a, b = _SPACE.sub(" ", a).strip()[:MAX_TEXT], _SPACE.sub(" ", b).strip()[:MAX_TEXT]
    if a == b:
        return 1.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def arguments_similarity(a: str, b: str) -> float:
    """Jaccard similarity of two calls' arguments as flattened JSON; as text when either is not JSON."""
    try:
        left, right = flattened(json.loads(a)), flattened(json.loads(b))
    except (ValueError, RecursionError):
        return text_similarity(a, b)
    union = left | right
    return len(left & right) / len(union) if union else 1.0


@dataclass(frozen=True)
class Comparison:
    same_tools: bool
    argument_similarity: float | None  # None: neither arm called a tool
    text_similarity: float | None  # None: neither arm wrote text
    same_finish: bool

    @property
    def agree(self) -> bool:
        return self.same_tools and self.same_finish and self.argument_similarity in (None, 1.0)

    def as_dict(self) -> dict[str, Any]:
        return {
            "same_tools": self.same_tools,
            "argument_similarity": _round(self.argument_similarity),
            "text_similarity": _round(self.text_similarity),
            "same_finish": self.same_finish,
            "agree": self.agree,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def compare(raw: Action, proxied: Action) -> Comparison:
    """How alike the raw arm's next action and the proxy arm's are (see the module's docstring)."""
    pairs = max(len(raw.calls), len(proxied.calls))
    arguments = None
    if pairs:
        scores = [arguments_similarity(a.arguments, b.arguments) for a, b in zip(raw.calls, proxied.calls)]
        arguments = sum(scores) / pairs  # an unpaired call scores 0
    text = text_similarity(raw.text, proxied.text) if (raw.text.strip() or proxied.text.strip()) else None
    return Comparison(
        [c.name for c in raw.calls] == [c.name for c in proxied.calls], arguments, text, raw.finish == proxied.finish
    )
