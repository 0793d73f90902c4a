"""Chat Completions' usage as a bill (`proxy.core.answers`), and asking for it on a stream.

`usage.prompt_tokens` is every input token, `prompt_tokens_details.cached_tokens` the share a
prompt cache served (OpenAI reports no cache writes: they cost the input price),
`completion_tokens` the output. A stream reports usage only when asked
(`stream_options.include_usage`): one chunk with no choices, and `"usage": null` on every other
chunk. The proxy asks when the client did not (`asking`) and takes out what asking added
(`unasked`), so the client's events are those it would have got.
"""

from __future__ import annotations

import json
import re
from typing import Any

from proxy.core import jsonio
from proxy.core.answers import UNREPORTED, Bill, of_openai_usage
from proxy.core.jsonio import JsonObject

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
