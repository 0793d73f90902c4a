"""A fake model whose next action depends on what it is sent (for `replay --live`'s tests).

It reads the tool results of the request (chat `tool` messages, Responses `function_call_output`
items, Anthropic `tool_result` blocks) and collects the identifiers in them (`name_123`, in order
of appearance, each once). With some, it calls the request's first tool (other than the proxy's
reload tools) with `{"count": n, "first": …, "last": …}` and says so in its text; with none, it
answers in text alone. A proxy that hides a tool result (offloads it to a reference) therefore
changes its answer; one that changes nothing does not. The usage it reports is the request
body's bytes / 4 as input, 12 tokens of output, so a smaller forwarded history bills less.
The proxy's summary calls get `snapshot_answer`.
"""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from proxy.core.texts import RELOAD_TOOL_SCHEMAS
from tests.harness import anthropic as fake_anthropic
from tests.harness import responses as fake_responses
from tests.harness.servers import (
    completion,
    default_handler,
    is_responses_create,
    is_summary_call,
    snapshot_answer,
    tool_call,
)

IDENTIFIER = re.compile(r"\b[a-z]+_\d{3}\b")
RELOAD_TOOLS = {t["function"]["name"] for t in RELOAD_TOOL_SCHEMAS}
OUTPUT_TOKENS = 12


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            _text(
                p.get("text") if isinstance(p, dict) and "text" in p else p.get("content") if isinstance(p, dict) else p
            )
            for p in content
        )
    return ""


def tool_results(body: dict, kind: str) -> list[str]:
    """The texts of the request's tool results, in order."""
    if kind == "chat":
        return [
            _text(m.get("content"))
            for m in body.get("messages") or []
            if isinstance(m, dict) and m.get("role") == "tool"
        ]
    if kind == "responses":
        return [
            _text(i.get("output"))
            for i in body.get("input") or []
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
    return [
        _text(b.get("content"))
        for m in body.get("messages") or []
        if isinstance(m, dict) and isinstance(m.get("content"), list)
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]


def identifiers(texts: list[str]) -> list[str]:
    seen: dict[str, None] = {}
    for text in texts:
        for name in IDENTIFIER.findall(text):
            seen.setdefault(name, None)
    return list(seen)


def first_tool(body: dict) -> str:
    for tool in body.get("tools") or []:
        name = (tool.get("function") or {}).get("name") if "function" in tool else tool.get("name")
        if name and name not in RELOAD_TOOLS:
            return name
    return "open"


def answer(rec: Any, kind: str) -> Response:
    """The next action for `rec`'s request (`kind`: chat, responses or messages)."""
    body = rec.json()
    names = identifiers(tool_results(body, "anthropic" if kind == "messages" else kind))
    usage = (len(rec.body) // 4, OUTPUT_TOKENS)
    model = body.get("model", "gpt-4o")
    arguments = {"count": len(names), "first": names[0], "last": names[-1]} if names else None
    text = f"I have seen {len(names)} names, from {names[0]} to {names[-1]}." if names else "Nothing seen yet."
    tool = first_tool(body)
    if kind == "chat":
        calls = [tool_call(tool, arguments)] if arguments else None
        return JSONResponse(completion(text, tool_calls=calls, model=model, usage=usage))
    if kind == "responses":
        output = [fake_responses.message(text)]
        if arguments:
            output.append(fake_responses.function_call(tool, arguments))
        return JSONResponse(fake_responses.response(*output, model=model, usage=fake_responses.usage(*usage)))
    content = [fake_anthropic.text(text)]
    if arguments:
        content.append(fake_anthropic.tool_use(tool, arguments))
    return JSONResponse(fake_anthropic.message(*content, model=model, usage=fake_anthropic.usage(*usage)))


async def attentive_handler(request: Request, rec: Any) -> Response:
    """A FakeUpstream handler: summary calls get a snapshot, model requests `answer`, the rest the default."""
    if is_summary_call(rec):
        return snapshot_answer(rec)
    if rec.method == "POST" and rec.path.endswith("/chat/completions"):
        return answer(rec, "chat")
    if is_responses_create(rec):
        return answer(rec, "responses")
    if fake_anthropic.is_messages_create(rec):
        return answer(rec, "messages")
    return await default_handler(request, rec)
