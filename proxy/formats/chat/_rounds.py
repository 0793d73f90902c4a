"""The reload rounds of a chat completion (`ChatRounds`, streamed and not) and Chat Completions'
usage as a bill (`USAGE`, asking for it on a stream).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.core import jsonio, texts
from proxy.core.answers import UNREPORTED, Bill, GrowingText, add_usage, of_openai_usage
from proxy.core.jsonio import JsonObject, array_or, object_or
from proxy.core.media import Reloaded, ToolResult
from proxy.core.rounds import ToolCall
from proxy.core.texts import INJECTED_TOOLS
from proxy.formats.chat._items import reloaded_part
from proxy.upstream import sse

# --- usage ---
# Chat Completions' usage as a bill (`proxy.core.answers`), and asking for it on a stream.
#
# `usage.prompt_tokens` is every input token, `prompt_tokens_details.cached_tokens` the share a
# prompt cache served (OpenAI reports no cache writes: they cost the input price),
# `completion_tokens` the output. A stream reports usage only when asked
# (`stream_options.include_usage`): one chunk with no choices, and `"usage": null` on every other
# chunk. The proxy asks when the client did not (`asking`) and takes out what asking added
# (`unasked`), so the client's events are those it would have got.

_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace


def bill_of(usage: object) -> Bill:
    return of_openai_usage(
        usage, input_key="prompt_tokens", output_key="completion_tokens", details_key="prompt_tokens_details"
    )


class ChatUsageStream:
    """The last `usage` object a stream's chunks carry (the usage chunk's; some upstreams put
    it on the last chunk with choices)."""

    def __init__(self) -> None:
        self._usage: object = None

    def feed(self, event: JsonObject) -> None:
        if isinstance(event.get("usage"), dict):
            self._usage = event["usage"]

    def bill(self) -> Bill:
        return bill_of(self._usage)


def asked(body: JsonObject) -> bool:
    """Did the client ask for a stream's usage itself?"""
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


class ChatUsage:
    def of_answer(self, answer: Any) -> Bill:
        return bill_of(answer.get("usage")) if isinstance(answer, dict) else UNREPORTED

    def stream(self) -> ChatUsageStream:
        return ChatUsageStream()

    def asking(self, body: JsonObject) -> JsonObject | None:
        if body.get("stream") is not True or asked(body):
            return None
        options = body.get("stream_options")
        if options is not None and not isinstance(options, dict):
            return None  # the upstream refuses it as the client sent it
        return {**body, "stream_options": {**(options or {}), "include_usage": True}}

    def unasked(self, data: bytes) -> bytes | None:
        try:
            event = jsonio.loads(data)
        except ValueError:
            return data
        if not isinstance(event, dict) or "usage" not in event:
            return data
        if isinstance(event["usage"], dict) and not event.get("choices") and "error" not in event:
            return None  # the usage chunk asking added (an error carrying the usage so far stays)
        return without_usage(data, event)


def without_usage(data: bytes, event: JsonObject) -> bytes:
    """`data` (the JSON text of `event`) without its top-level `usage` member, the rest byte for
    byte; re-written whole only when no cut of the text gives that object. The top-level members
    are found in one pass (`_members`): a `"usage"` key nested in the chunk is never tried (one
    parse per key was quadratic in a chunk holding many)."""
    expected = {k: v for k, v in event.items() if k != "usage"}
    text = data.decode("utf-8", "surrogatepass")
    try:
        members = _members(text)
        if members is not None:
            for name, start, end in reversed(members):  # from the last: the earlier ones stay in place
                if name == "usage":
                    text = _cut(text, start, end)
            if jsonio.loads(text.encode("utf-8", "surrogatepass")) == expected:
                return text.encode("utf-8", "surrogatepass")
    except (ValueError, RecursionError):
        pass
    return jsonio.dumps(expected)


def _cut(text: str, start: int, end: int) -> str:
    """`text` without the member at [start, end) and one comma beside it."""
    before, after = text[:start].rstrip(), text[end:].lstrip()
    if before.endswith(","):
        return before[:-1] + text[end:]
    if after.startswith(","):
        return text[:start] + after[1:]
    return text[:start] + text[end:]


def _skip(text: str, pos: int) -> int:
    """`pos` past any JSON whitespace."""
    match = _SPACE.match(text, pos)
    return match.end() if match else pos


def _members(text: str) -> list[tuple[str, int, int]] | None:
    """The top-level members of a JSON object's text: (its key, where the key starts, where the
    value ends); None when the text is not one object. Each value is skipped by the decoder."""
    decoder = json.JSONDecoder()
    pos = _skip(text, 0)
    if text[pos : pos + 1] != "{":
        return None
    pos = _skip(text, pos + 1)
    members: list[tuple[str, int, int]] = []
    if text[pos : pos + 1] == "}":
        return members
    while True:
        start = pos
        name, pos = decoder.raw_decode(text, pos)
        pos = _skip(text, pos)
        if not isinstance(name, str) or text[pos : pos + 1] != ":":
            return None
        _, pos = decoder.raw_decode(text, _skip(text, pos + 1))
        members.append((name, start, pos))
        pos = _skip(text, pos)
        if text[pos : pos + 1] == "}":
            return members
        if text[pos : pos + 1] != ",":
            return None
        pos = _skip(text, pos + 1)


USAGE = ChatUsage()


# --- rounds ---
# Reload rounds of a chat completion (`proxy.core.rounds.Rounds` for Chat Completions).
#
# The client sees one ordinary completion: injected tool calls never reach it, `usage` is summed
# over every round, and a stream continues across rounds as one stream (one id, one model, one
# final finish_reason, one [DONE]).
#
# Several choices (`n` > 1): choice 0 drives the loop, as the only one whose tool calls are run.
# Choices 1… are the first round's answers, independent samples of the client's own prompt: in
# a stream they are relayed as they come in the first round and left out of later rounds; in a
# non-streamed completion they are taken from the first round too. In every choice, calls to
# the injected tools are removed, and a `tool_calls` finish_reason left with no call becomes
# `stop` (choice 0: once the loop ends).


def is_injected(call: Any) -> bool:
    return isinstance(call, dict) and (call.get("function") or {}).get("name") in INJECTED_TOOLS


def strip_injected(completion: JsonObject) -> None:
    """Remove injected tool calls from every choice of a final (non-stream) completion."""
    for choice in completion.get("choices") or ():
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            continue
        calls = message.get("tool_calls")
        if not calls or not isinstance(calls, list):
            continue
        kept = [c for c in calls if not is_injected(c)]
        if kept:
            message["tool_calls"] = kept
        else:
            message.pop("tool_calls", None)
            if choice.get("finish_reason") == "tool_calls":
                choice["finish_reason"] = "stop"


def _tool_calls(calls: Sequence[JsonObject]) -> list[ToolCall]:
    return [
        ToolCall((c.get("function") or {}).get("name", ""), (c.get("function") or {}).get("arguments", ""))
        for c in calls
    ]


@dataclass
class _Choice:
    """What one choice announced in one streamed round."""

    injected: dict[int, JsonObject] = field(default_factory=dict)  # tool index → the call as announced
    arguments: dict[int, GrowingText] = field(default_factory=dict)  # tool index → its arguments so far
    client_index: dict[int, int] = field(default_factory=dict)  # upstream index → client index
    content: GrowingText = field(default_factory=GrowingText)

    def injected_calls(self) -> list[JsonObject]:
        """The injected calls, their arguments whole."""
        return [
            {**call, "function": {**call["function"], "arguments": self.arguments[index].text()}}
            for index, call in self.injected.items()
        ]

    def injected_only(self) -> bool:
        return bool(self.injected) and not self.client_index


def _filter_tool_deltas(delta: JsonObject, state: _Choice) -> None:
    kept = []
    for tc in delta.get("tool_calls") or ():
        if not isinstance(tc, dict):
            continue
        index = tc.get("index", 0)
        if index not in state.injected and index not in state.client_index:
            name = (tc.get("function") or {}).get("name")
            if name in INJECTED_TOOLS:
                state.injected[index] = {"id": tc.get("id"), "type": "function", "function": {"name": name}}
                state.arguments[index] = GrowingText()
            else:
                state.client_index[index] = len(state.client_index)
        if index in state.injected:
            arguments = (tc.get("function") or {}).get("arguments")
            if isinstance(arguments, str):
                state.arguments[index].add(arguments)
        else:
            kept.append({**tc, "index": state.client_index[index]})
    if "tool_calls" in delta:
        if kept:
            delta["tool_calls"] = kept
        else:
            del delta["tool_calls"]


class ChatRounds:
    """The reload rounds of one chat completion request (see the module docstring)."""

    what = "chat completion"
    closing = sse.DONE_EVENT
    first_id: str | None = None  # chat completions are not continued from a stored id
    last_id: str | None = None
    unanswered: list[ToolCall] = []  # the client resends its history, without the hidden calls
    context_management: JsonObject | None = None  # no clearing edits in chat completions

    def __init__(
        self,
        body: JsonObject,
        messages: list[Any],
        tools: Sequence[JsonObject],
        *,
        extra_usage: JsonObject | None = None,
    ) -> None:
        self.body, self.messages, self.tools = body, list(messages), list(tools)
        self.extra_usage = extra_usage
        self.asked = asked(body)  # for the stream's usage (else the proxy asked: `proxy.formats.chat._rounds`)
        self.round = 0
        self.offered = False
        self._pending: JsonObject | None = None  # the assistant message whose injected calls are being run
        # non-streamed
        self._usage: JsonObject | None = None
        self._reported = False
        self._others: list[Any] | None = None  # choices 1…, kept from the first round
        self._final: JsonObject | None = None
        # streamed
        self._identity: dict[str, Any] = {}
        self._stream_usage: JsonObject | None = add_usage(None, extra_usage)  # sent only if the upstream reports usage
        self._usage_template: JsonObject | None = None
        self._choices: dict[int, _Choice] = {}

    def request(self, offered: bool) -> JsonObject:
        self.offered = offered
        payload = {**self.body, "messages": self.messages}
        if offered:
            payload["tools"] = [*(self.body.get("tools") or []), *self.tools]
        return payload

    def answer(self, results: list[ToolResult]) -> None:
        """A tool message carries text only: reloaded media is answered with a short text, and
        shown in a user message after the round's tool messages (inside the hidden round)."""
        message = self._pending or {}
        self.messages.append(message)
        calls = message.get("tool_calls") or []
        self.messages.extend(
            {
                "role": "tool",
                "tool_call_id": call.get("id"),
                "content": content if isinstance(content, str) else texts.media_follows(content.kind, content.ref),
            }
            for call, content in zip(calls, results)
        )
        shown: list[JsonObject] = []
        for result in results:
            if isinstance(result, Reloaded):
                shown += [
                    {"type": "text", "text": texts.media_reloaded(result.kind, result.ref)},
                    reloaded_part(result.kind, result.data_url, result.ref),
                ]
        if shown:
            self.messages.append({"role": "user", "content": shown})
        self.round += 1
        self._pending = None
        self._choices = {}

    # -- non-streamed ------------------------------------------------------------------------

    def take(self, answer: JsonObject) -> list[ToolCall]:
        if isinstance(answer.get("usage"), dict):
            self._usage = add_usage(self._usage or add_usage(None, self.extra_usage), answer["usage"])
            self._reported = True
        choices = array_or(answer.get("choices"), [])
        if self._others is None:
            self._others = choices[1:]
        first = choices[0] if choices and isinstance(choices[0], dict) else {}
        message = object_or(first.get("message"), {})
        calls = message.get("tool_calls") or []
        if calls and self.offered and isinstance(calls, list) and all(is_injected(c) for c in calls):
            self._pending = {k: v for k, v in message.items() if k in ("role", "content", "tool_calls")}
            return _tool_calls(calls)
        self._final = answer
        return []

    def result(self) -> JsonObject:
        completion = self._final or {}
        choices = array_or(completion.get("choices"), [])
        if self.round and choices:
            completion["choices"] = [choices[0], *(self._others or [])]
        strip_injected(completion)
        if self._reported:
            completion["usage"] = self._usage
        return completion

    # -- streamed ----------------------------------------------------------------------------

    def feed(self, event: JsonObject) -> list[JsonObject]:
        if "error" in event and "choices" not in event:
            return [event]
        if not self.asked and "usage" in event:  # the proxy asked for it: the client gets none
            if isinstance(event["usage"], dict) and not event.get("choices"):
                return []
            del event["usage"]
        if event.get("usage") and not event.get("choices"):
            self._stream_usage = add_usage(self._stream_usage, event["usage"])  # summed, sent once at the end
            self._usage_template = event
            return []
        return [event] if self._rewrite(event) else []

    def _rewrite(self, chunk: JsonObject) -> bool:
        """Adapt one chunk for the client in place; False when nothing is left to send."""
        if not self._identity:
            self._identity = {k: chunk[k] for k in ("id", "created", "model") if k in chunk}
        else:
            chunk.update(self._identity)
        choices = chunk.get("choices")
        if not choices:
            return True
        kept = []
        last_round = not self.offered
        for choice in choices:
            index = choice.get("index", 0)
            if self.round > 0 and index != 0:
                continue  # choices 1… were answered by the first round
            delta = choice.get("delta") or {}
            if self.round > 0:
                delta.pop("role", None)
            state = self._choices.setdefault(index, _Choice())
            if index == 0:
                if isinstance(delta.get("content"), str):
                    state.content.add(delta["content"])
            _filter_tool_deltas(delta, state)
            finish = choice.get("finish_reason")
            if finish == "tool_calls" and state.injected_only():
                # choice 0 goes on in the next round unless this is the last; the others end here
                choice["finish_reason"] = finish = None if index == 0 and not last_round else "stop"
            if delta or finish is not None or choice.get("logprobs") is not None:
                kept.append(choice)
        chunk["choices"] = kept
        return bool(kept) or chunk.get("usage") is not None

    def calls(self) -> list[ToolCall]:
        zero = self._choices.get(0)
        if not (self.offered and zero is not None and zero.injected_only()):
            return []
        calls = zero.injected_calls()
        self._pending = {"role": "assistant", "content": zero.content.text() or None, "tool_calls": calls}
        return _tool_calls(calls)

    def finish(self) -> list[JsonObject]:
        if self._usage_template is None:
            return []
        return [{**self._usage_template, **self._identity, "usage": self._stream_usage}]

    def fail(self, error: JsonObject) -> list[JsonObject]:
        return [error]

    def encode(self, event: Any) -> bytes:
        return sse.encode(event)

    def carried(self, results: list[ToolResult]) -> list[Any]:
        return []
