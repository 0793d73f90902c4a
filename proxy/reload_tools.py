"""The tools the proxy injects and runs itself: `context_reload` and `context_search`.

A reload of content within the token budget returns the original text byte-for-byte with
nothing added; larger content comes in pages of lines (very long lines are cut into chunks so
that every byte is reachable), each page ending with a note on how to get the next one.
"""

from __future__ import annotations

import json
from typing import Any

import regex

from proxy import observe
from proxy.events import event
from proxy.markers import RELOAD_TOOL, SEARCH_TOOL
from proxy.refs import RefStore
from proxy.store import StoreUnavailable
from proxy.tokens import TokenCounter

SEGMENT_CHARS = 2_000  # a longer line is cut into chunks of this size for paging
SEARCH_TIMEOUT = 1.0  # seconds for one pattern over one item
MAX_MATCHES = 200
MATCH_LINE_CHARS = 300

RELOAD_TOOL_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": RELOAD_TOOL,
            "description": (
                "Return offloaded context by its reference (the ref=... in an '[offloaded ...]' "
                "marker): the full original text, or one page of its lines when it is large."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "ref": {"type": "string", "description": "The reference, e.g. from ref=AbC123."},
                    "offset": {"type": "integer", "minimum": 0, "description": "First line (0-based)."},
                    "limit": {"type": "integer", "minimum": 1, "description": "Number of lines."},
                },
                "required": ["ref"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": SEARCH_TOOL,
            "description": (
                "Search offloaded context with a case-insensitive regular expression. Returns "
                "matching lines with their ref and line number. Searches one ref, or all of them."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "A regular expression."},
                    "ref": {"type": "string", "description": "Limit the search to this reference."},
                },
                "required": ["pattern"],
            },
        },
    },
]


def segments(text: str) -> list[str]:
    """Lines with their endings, long ones cut: ''.join(segments(t)) == t."""
    out: list[str] = []
    for line in text.splitlines(keepends=True):
        if len(line) <= SEGMENT_CHARS:
            out.append(line)
        else:
            out.extend(line[i:i + SEGMENT_CHARS] for i in range(0, len(line), SEGMENT_CHARS))
    return out


def unavailable(ref: str) -> str:
    return f"Reference ref={ref} is not available: unknown, expired, or not offloaded under this credential."


class ReloadTools:
    """Runs injected tool calls for one request, within one tenant namespace."""

    def __init__(
        self, refs: RefStore, counter: TokenCounter, max_tokens: int, request_refs: list[str], session: str | None
    ) -> None:
        self.refs, self.counter, self.max_tokens = refs, counter, max_tokens
        self.request_refs, self.session = request_refs, session
        self.events: list[dict] = []  # one per call, recorded after the response

    async def scope(self) -> list[str]:
        """What `context_search` looks at without a ref: the session's items, else the request's."""
        if not self.session:
            return self.request_refs
        return sorted(set(self.request_refs) | await self.refs.session_refs(self.session))

    async def run(self, name: str, arguments: str) -> str:
        result = await self._run(name, arguments)
        if (rec := observe.current.get()) is not None:
            rec.count_reload(name)
        self.events.append(event("reload", tool=name, arguments=arguments[:200], result_chars=len(result)))
        return result

    async def _run(self, name: str, arguments: str) -> str:
        try:
            args = json.loads(arguments or "{}")
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except ValueError as exc:
            return f"Invalid arguments for {name}: {exc}"
        try:
            if name == RELOAD_TOOL:
                return await self.reload(str(args.get("ref", "")), args.get("offset"), args.get("limit"))
            if name == SEARCH_TOOL:
                return await self.search(str(args.get("pattern", "")), args.get("ref"))
        except StoreUnavailable:
            return "The offloaded content is temporarily unavailable (store unreachable). Try again later."
        return f"Unknown tool {name}."

    async def reload(self, ref: str, offset: Any = None, limit: Any = None) -> str:
        item = await self.refs.load(ref)
        if item is None:
            return unavailable(ref)
        text = item.text
        if offset is None and limit is None and self.counter.text(text) <= self.max_tokens:
            return text
        try:
            start = max(0, int(offset or 0))
            wanted = max(1, int(limit)) if limit is not None else None
        except (TypeError, ValueError):
            return "offset and limit must be integers."
        parts = segments(text)
        if start >= len(parts):
            return f"ref={ref} has {len(parts)} lines; offset {start} is past the end."
        page: list[str] = []
        used = 0
        for part in parts[start:]:
            if wanted is not None and len(page) >= wanted:
                break
            cost = self.counter.text(part)
            if page and used + cost > self.max_tokens:
                break
            page.append(part)
            used += cost
        end = start + len(page)
        body = "".join(page)
        if end >= len(parts):
            note = f"[{RELOAD_TOOL}: lines {start}-{end - 1} of {len(parts)} of ref={ref}; this is the end.]"
        else:
            note = (
                f"[{RELOAD_TOOL}: lines {start}-{end - 1} of {len(parts)} of ref={ref}. "
                f"Next page: {RELOAD_TOOL}(ref=\"{ref}\", offset={end}).]"
            )
        return body + "\n" + note  # the page is everything before the last line

    async def search(self, pattern: str, ref: Any = None) -> str:
        try:
            compiled = regex.compile(pattern, regex.IGNORECASE | regex.MULTILINE)
        except regex.error as exc:
            return f"Invalid regular expression {pattern!r}: {exc}"
        refs = [str(ref)] if ref else await self.scope()
        budget = self.max_tokens * 3  # characters, a cheap bound on the result size
        lines: list[str] = []
        size = 0
        truncated = False
        for r in refs:
            item = await self.refs.load(r)
            if item is None:
                if ref:
                    return unavailable(r)
                continue
            try:
                for number, line in enumerate(item.text.splitlines()):
                    if compiled.search(line, timeout=SEARCH_TIMEOUT):
                        shown = line if len(line) <= MATCH_LINE_CHARS else line[:MATCH_LINE_CHARS] + "…"
                        entry = f"ref={r} line {number}: {shown}"
                        if len(lines) >= MAX_MATCHES or size + len(entry) > budget:
                            truncated = True
                            break
                        lines.append(entry)
                        size += len(entry) + 1
            except TimeoutError:
                return f"The pattern {pattern!r} took too long; use a simpler one."
            if truncated:
                break
        if not lines:
            where = f"ref={ref}" if ref else f"{len(refs)} offloaded item(s)"
            return f"No match for {pattern!r} in {where}."
        if truncated:
            lines.append(f"[{len(lines)} matches shown; more exist. Narrow the pattern or give a ref.]")
        return "\n".join(lines)
