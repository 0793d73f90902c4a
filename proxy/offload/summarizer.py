"""The LLM call that turns old history into a `<state_snapshot>`.

Same upstream, the request's own credentials, non-streaming, bounded by a timeout. Two shapes:

- prefix (`summarize_prefix`, the default): the conversation as its turns send it (the same
  tools and leading items, byte for byte, so the provider's prompt cache serves them), then one
  instruction; the wire format builds the request and reads the answer;
- transcript (`summarize`, `--summary-request transcript`): a system prompt and one user message
  rendering the items, on chat completions, for upstreams without prefix caching; a previous
  summary is handed to the model to update rather than starting over.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx2

from proxy.core import jsonio, texts
from proxy.core.answers import Bill, UsageReader
from proxy.core.jsonio import JsonObject
from proxy.errors import ProxyError
from proxy.formats.chat import USAGE as CHAT_USAGE
from proxy.telemetry import UpstreamRecord
from proxy.upstream.client import Headers, Upstream

DEFAULT_PROMPT = texts.SUMMARY_PROMPT  # the transcript shape's system prompt
DEFAULT_INSTRUCTION = texts.SUMMARY_INSTRUCTION  # the prefix shape's last message

SNAPSHOT_OPEN, SNAPSHOT_CLOSE = "<state_snapshot>", "</state_snapshot>"
MESSAGE_CHARS = 6_000  # one message's share of the transcript


@functools.lru_cache(maxsize=64)  # asked once per request; prompts are few
def prompt_version(prompt: str) -> str:
    return hashlib.blake2b(prompt.encode(), digest_size=6).hexdigest()


def render_transcript(lines: list[tuple[str, str]]) -> str:
    """The summarised items, as (header, text) from their format's `ItemView.transcript`."""
    out = []
    for header, text in lines:
        if len(text) > MESSAGE_CHARS:
            text = text[: MESSAGE_CHARS // 2] + "\n[…]\n" + text[-MESSAGE_CHARS // 2 :]
        out.append(f"{header}\n{text}".rstrip())
    return "\n\n".join(out)


class SummaryFailed(Exception):
    pass


@dataclass(frozen=True)
class Summary:
    text: str
    tokens_in: int
    tokens_out: int
    bill: Bill = Bill()  # what the provider reports it charged for the call (`proxy.core.answers`)


ESTIMATED_SUMMARY_TOKENS = 2048  # half the summary's output budget (4,096 tokens): what an observed turn assumes


def estimated(tokens: int = ESTIMATED_SUMMARY_TOKENS) -> Summary:
    """A stand-in for a summary that was not asked for (an observed turn plans what it would have
    forwarded): about `tokens` tokens of filler, never sent anywhere, costing nothing."""
    return Summary(" ".join(["state"] * max(1, tokens)), 0, 0)


class BilledFailure(SummaryFailed):
    """A call the upstream answered (and billed) whose answer is no summary."""

    def __init__(self, message: str, bill: Bill) -> None:
        super().__init__(message)
        self.bill = bill


async def summarize(
    upstream: Upstream,
    headers: Headers,
    model: str,
    *,
    prompt: str,
    lines: list[tuple[str, str]],
    previous: str | None,
    timeout: float,
    base: str | None = None,
    record: UpstreamRecord | None = None,
) -> Summary:
    user = ""
    if previous:
        user += f"Previous snapshot:\n{previous}\n\nNew messages since then:\n\n"
    user += render_transcript(lines)
    body = {"model": model, "messages": [{"role": "system", "content": prompt}, {"role": "user", "content": user}]}
    return await _call(
        upstream,
        headers,
        "chat/completions",
        body=body,
        read=_chat_answer,
        timeout=timeout,
        base=base,
        usage=CHAT_USAGE,
        record=record,
    )


async def summarize_prefix(
    upstream: Upstream,
    headers: Headers,
    request: tuple[str, JsonObject],
    *,
    read: Callable[[Any], tuple[str, int, int]],
    timeout: float,
    base: str | None = None,
    usage: UsageReader = CHAT_USAGE,
    record: UpstreamRecord | None = None,
) -> Summary:
    """`request`: (endpoint, body) from the wire format's `summary_request`; `read` its
    `summary_answer`, `usage` its `usage`."""
    endpoint, body = request
    return await _call(
        upstream, headers, endpoint, body=body, read=read, timeout=timeout, base=base, usage=usage, record=record
    )


def _chat_answer(data: Any) -> tuple[str, int, int]:
    content = data["choices"][0]["message"]["content"] or ""
    usage = data.get("usage") or {}
    return content, int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)


MAX_ANSWER_BYTES = 8 * 1024 * 1024  # a summary answer larger than this is refused, not read into memory


def snapshot_in(content: str) -> str | None:
    """The first `<state_snapshot>…</state_snapshot>` block, found in linear time (a lazy regex
    over an answer repeating the opening tag is quadratic: seconds on the event loop)."""
    start = content.find(SNAPSHOT_OPEN)
    if start < 0:
        return None
    end = content.find(SNAPSHOT_CLOSE, start + len(SNAPSHOT_OPEN))
    return None if end < 0 else content[start : end + len(SNAPSHOT_CLOSE)]


async def _read_answer(response: httpx2.Response) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > MAX_ANSWER_BYTES:
            raise SummaryFailed(f"summary answer is larger than {MAX_ANSWER_BYTES} bytes")
    return bytes(body)


async def _call(
    upstream: Upstream,
    headers: Headers,
    endpoint: str,
    *,
    body: JsonObject,
    read: Callable[[Any], tuple[str, int, int]],
    timeout: float,
    base: str | None,
    usage: UsageReader,
    record: UpstreamRecord | None,
) -> Summary:
    payload = jsonio.dumps(body)
    try:
        async with asyncio.timeout(timeout):
            response = await upstream.send("POST", endpoint, headers=headers, content=payload, base=base, record=record)
            try:
                raw = await _read_answer(response)
            finally:
                await response.aclose()
    except TimeoutError as exc:
        raise SummaryFailed(f"summary call timed out after {timeout:g}s") from exc
    except ProxyError as exc:
        raise SummaryFailed(f"summary call failed: {exc.message}") from exc
    except httpx2.HTTPError as exc:  # the answer broke off while it was read
        raise SummaryFailed(f"summary answer broke off: {type(exc).__name__}") from exc
    if response.status_code != 200:
        raise SummaryFailed(f"summary call answered {response.status_code}")
    try:
        answer = jsonio.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise BilledFailure("summary call returned an unusable body", usage.of_answer(None)) from exc
    bill = usage.of_answer(answer)
    try:
        content, tokens_in, tokens_out = read(answer)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError) as exc:
        raise BilledFailure("summary call returned an unusable body", bill) from exc
    snapshot = snapshot_in(content) if isinstance(content, str) else None
    if snapshot is None:
        raise BilledFailure("summary has no <state_snapshot> block", bill)
    return Summary(snapshot, tokens_in, tokens_out, bill)
