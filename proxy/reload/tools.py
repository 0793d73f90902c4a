"""The tools the proxy injects and runs itself: `context_reload` and `context_search`.

A reload of content within the token budget returns the original text byte-for-byte with
nothing added; larger content comes in pages of lines (very long lines are cut into chunks so
that every byte is reachable), each page ending with a note on how to get the next one.

Arguments come from the model and are checked strictly (`parse_arguments`): anything out of
shape is answered to the model as an error text, never raised to the client. A search runs
in a worker process under one deadline (see `proxy.reload.search`). Splitting and counting a large
item for `context_reload` run in a thread (`proxy.offload.cpu_pool`), a block at a time, not on the event loop.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import math
import time
from collections.abc import Iterable
from typing import Any

from proxy import telemetry
from proxy.core import jsonio, texts
from proxy.core.jsonio import JsonObject
from proxy.core.media import Reloaded, ToolResult
from proxy.core.texts import INJECTED_TOOLS, RELOAD_TOOL
from proxy.core.tokens import EstimateEncoder, TokenCounter
from proxy.errors import Failure, Kind
from proxy.offload.cpu_pool import CPU
from proxy.offload.records import RefStore, event
from proxy.reload.search import INTERRUPTED, LARGE_CHARS, MAX_PATTERN_CHARS, Search, SearchLimits, check_pattern
from proxy.reload.search_worker import EXPENSIVE, SIZE, TIME, Hits
from proxy.store import StoreUnavailable

log = logging.getLogger("proxy.reload.tools")

SEGMENT_CHARS = 2_000  # a longer line is cut into chunks of this size for paging
MAX_LINE_NUMBER = 1_000_000_000  # offset and limit above this are refused, not clamped
MAX_REF_CHARS = 200
MAX_ARGUMENT_DEPTH = 32  # the tools take flat objects: deeper arguments are refused (and never recursed into)
PREVIEW_CHARS = 200  # of a call's arguments, in its event
BLOCK_CHARS = 1 << 20  # a large text is split into lines a block at a time
OFF_LOOP = CPU(True)  # the pool of proxy.offload.cpu_pool: CPU-heavy work on large texts


def segments(text: str) -> list[str]:
    """Lines with their endings, long ones cut: ''.join(segments(t)) == t.

    Splits a block of about BLOCK_CHARS at a time (cut after a \n, so no line break is split):
    run in a thread, it never holds the GIL long.
    """
    out: list[str] = []
    start, end_of_text = 0, len(text)
    while start < end_of_text:
        end = min(end_of_text, start + BLOCK_CHARS)
        if end < end_of_text:
            cut = text.rfind("\n", start, end)
            if cut < 0:
                cut = text.find("\n", end)  # one very long line: take it whole
            end = end_of_text if cut < 0 else cut + 1
        for line in text[start:end].splitlines(keepends=True):
            if len(line) <= SEGMENT_CHARS:
                out.append(line)
            else:
                out.extend(line[i : i + SEGMENT_CHARS] for i in range(0, len(line), SEGMENT_CHARS))
        start = end
    return out


@functools.lru_cache(maxsize=None)
def _longest_token(encoder: Any) -> int | None:
    """The most bytes one token stands for, when the encoder tells (tiktoken) or is the estimate."""
    if isinstance(encoder, EstimateEncoder):
        return 4
    values = getattr(encoder, "token_byte_values", None)
    try:
        return max(map(len, values())) if callable(values) else None
    except (TypeError, ValueError):
        return None


class BadArguments(Failure, ValueError):
    """Tool arguments the model must fix; the message is what it is told."""

    kind = Kind.UNPROCESSABLE


def _integer(args: JsonObject, name: str, low: int) -> int | None:
    value = args.get(name)
    if value is None:
        return None
    integral = isinstance(value, int) or isinstance(value, float) and math.isfinite(value) and value.is_integer()
    if isinstance(value, bool) or not integral:
        raise BadArguments(f"{name} must be an integer, got {json.dumps(value)[:40]}")
    if not low <= value <= MAX_LINE_NUMBER:
        raise BadArguments(f"{name} must be between {low} and {MAX_LINE_NUMBER}")
    return int(value)


def _string(args: JsonObject, name: str, limit: int, *, required: bool) -> str | None:
    value = args.get(name)
    if value is None or (value == "" and not required):
        if required:
            raise BadArguments(f"{name} is required")
        return None
    if not isinstance(value, str) or not 0 < len(value) <= limit:
        raise BadArguments(f"{name} must be a string of 1 to {limit} characters")
    return value


def parse_arguments(name: str, arguments: Any) -> dict[str, Any]:
    """The checked arguments of a call to one of INJECTED_TOOLS; raises BadArguments.

    Nesting past MAX_ARGUMENT_DEPTH is refused as such, however deep (the parser's own
    RecursionError included): the model chose it, the model is told.
    """
    try:  # NaN and ±Infinity parse (as floats), so that the check below names the field
        args = (
            json.loads(arguments or "{}") if isinstance(arguments, str) else arguments
        )  # some upstreams send an object, not its JSON text
    except RecursionError as exc:
        raise BadArguments(texts.arguments_too_deep(MAX_ARGUMENT_DEPTH)) from exc
    except ValueError as exc:  # JSONDecodeError, and integers past 4300 digits
        raise BadArguments(f"not valid JSON ({exc})") from exc
    if jsonio.nested_deeper_than(args, MAX_ARGUMENT_DEPTH):
        raise BadArguments(texts.arguments_too_deep(MAX_ARGUMENT_DEPTH))
    if not isinstance(args, dict):
        raise BadArguments("arguments must be a JSON object")
    if name == RELOAD_TOOL:
        return {
            "ref": _string(args, "ref", MAX_REF_CHARS, required=True),
            "offset": _integer(args, "offset", 0),
            "limit": _integer(args, "limit", 1),
        }
    return {
        "pattern": _string(args, "pattern", MAX_PATTERN_CHARS, required=True),
        "ref": _string(args, "ref", MAX_REF_CHARS, required=False),
    }


def _preview(arguments: Any) -> str:
    """The start of a call's arguments as text; an object is written as JSON unless it nests too deep."""
    if isinstance(arguments, str):
        return arguments[:PREVIEW_CHARS]
    if jsonio.nested_deeper_than(arguments, MAX_ARGUMENT_DEPTH):
        return texts.input_not_repeated()
    try:
        return jsonio.dumps(arguments)[:PREVIEW_CHARS].decode("utf-8", "ignore")
    except (TypeError, ValueError):
        return str(type(arguments).__name__)


class ReloadTools:
    """Runs injected tool calls for one request, within one tenant namespace."""

    def __init__(
        self,
        refs: RefStore,
        counter: TokenCounter,
        *,
        max_tokens: int,
        request_refs: list[str],
        session: str | None,
        limits: SearchLimits = SearchLimits(),
        record: telemetry.TurnRecord = telemetry.NO_RECORD,
    ) -> None:
        """`record`: where each call is counted (the request's record, passed in by the HTTP layer)."""
        self.refs, self.counter, self.max_tokens = refs, counter, max_tokens
        self.request_refs, self.session, self.limits = request_refs, session, limits
        self.record = record
        self.events: list[JsonObject] = []  # one per call, recorded after the response

    async def scope(self) -> list[str]:
        """What `context_search` looks at without a ref: the session's items, else the request's."""
        if not self.session:
            return self.request_refs
        return sorted(set(self.request_refs) | await self.refs.session_refs(self.session))

    async def run(self, name: str, arguments: Any, deadline: float | None = None) -> ToolResult:
        """The tool result for the model: a text, or reloaded media (`Reloaded`), which the
        format shows as itself. `deadline` (monotonic): the end of the request's reload budget."""
        result = await self._run(name, arguments, deadline)
        self.record.count_reload(name)
        size = len(result) if isinstance(result, str) else len(result.data_url)
        self.events.append(event("reload", tool=name, arguments=_preview(arguments), result_chars=size))
        return result

    async def _run(self, name: str, arguments: Any, deadline: float | None) -> ToolResult:
        if name not in INJECTED_TOOLS:
            return texts.unknown_tool(name)
        try:
            args = parse_arguments(name, arguments)
        except BadArguments as exc:
            return texts.invalid_arguments(name, exc)
        try:
            if name == RELOAD_TOOL:
                return await self.reload(args["ref"], args["offset"], args["limit"])
            return await self.search(args["pattern"], args["ref"], deadline)
        except StoreUnavailable:
            return texts.store_unavailable()
        except Exception:  # a bug here must not fail the client's request: the model is told
            log.exception("%s failed", name)
            return texts.tool_failed(name)

    async def reload(self, ref: str, offset: int | None = None, limit: int | None = None) -> ToolResult:
        item = await self.refs.load(ref)
        if item is None:
            return texts.unavailable(ref)
        if item.kind in texts.MEDIA_KINDS:  # an image, a document: itself, whole, byte for byte
            return Reloaded(ref, item.kind, item.text)
        if len(item.text) > LARGE_CHARS:  # counting and splitting take a while: not on the event loop
            return await OFF_LOOP(self._reload, ref, item.text, offset, limit=limit)
        return self._reload(ref, item.text, offset, limit=limit)

    def _fits(self, text: str) -> bool:
        """Is `text` within max_tokens? Not counted when its length alone says no."""
        longest = _longest_token(self.counter.encoder)  # type: ignore[arg-type]  # an encoder is hashable
        if longest is not None and len(text) > self.max_tokens * longest:
            return False  # every token stands for at most `longest` bytes, every character for at least one
        return self.counter.text(text) <= self.max_tokens

    def _reload(self, ref: str, text: str, offset: int | None, *, limit: int | None) -> str:
        if offset is None and limit is None and self._fits(text):
            return text
        start = max(0, offset or 0)
        parts = segments(text)
        if start >= len(parts):
            return texts.past_the_end(ref, len(parts), start)
        page: list[str] = []
        used = 0
        for part in itertools.islice(parts, start, None):
            if limit is not None and len(page) >= limit:
                break
            cost = self.counter.text(part)
            if page and used + cost > self.max_tokens:
                break
            page.append(part)
            used += cost
        end = start + len(page)
        body = "".join(page)
        return (
            body + "\n" + texts.page_note(ref, start, end, lines=len(parts))
        )  # the page is everything before the last line

    async def search(self, pattern: str, ref: str | None = None, deadline: float | None = None) -> str:
        """Matching lines, within `limits`: one deadline and a cap on the bytes scanned.

        The pattern is compiled and matched in a worker process (`proxy.reload.search.Search`).
        """
        started = time.monotonic()
        own = started + self.limits.timeout
        deadline = own if deadline is None else min(own, deadline)
        limit = (
            "the time left of this request's reload budget"
            if deadline < own
            else (f"the search time limit of {self.limits.timeout:g} s")
        )
        try:
            check_pattern(pattern)
        except ValueError as exc:
            return texts.invalid_pattern(pattern, exc)
        hits = Hits(max_chars=self.max_tokens * 3)  # characters, a cheap bound on the result size
        search = Search(pattern, deadline, hits)
        searched = skipped = 0
        try:
            error = await search.open()
            if error is not None:
                return texts.invalid_pattern(pattern, error)
            deadline = search.deadline  # later by a worker's start, if it had to start
            refs = [ref] if ref else await self.scope()
            room = self.limits.max_bytes
            for r in refs if search.compiled else ():
                if time.monotonic() >= deadline:
                    hits.stopped = TIME
                    break
                item = await self.refs.load(r)
                if item is None:
                    if ref:
                        return texts.unavailable(r)
                    continue
                if item.kind in texts.MEDIA_KINDS:
                    if ref:
                        return texts.media_not_searchable(r, item.kind)
                    skipped += 1
                    continue
                room -= await search.scan(r, item.text, room)
                searched += 1
                if hits.stopped is not None:
                    break
        finally:
            search.close()
        took = time.monotonic() - started - search.start_wait
        if not search.compiled and not search.busy:
            if hits.stopped == INTERRUPTED:
                return texts.search_interrupted()
            if hits.stopped not in (TIME, EXPENSIVE):
                raise RuntimeError("the search worker gave an unexpected answer")
            why = (
                f"compiling it did not finish within {limit}"
                if hits.stopped == TIME
                else ("compiling it needed more memory than a search may use, or crashed the search worker")
            )
            return texts.too_expensive(pattern, why)
        answer = self._answer(
            pattern, ref, refs=refs, hits=hits, searched=searched, took=took, limit=limit, busy=search.busy
        )
        return f"{answer}\n{texts.media_skipped(skipped)}" if skipped else answer

    def _answer(
        self,
        pattern: str,
        ref: str | None,
        *,
        refs: list[str],
        hits: Hits,
        searched: int,
        took: float,
        limit: str,
        busy: bool,
    ) -> str:
        lines = list(hits.lines)
        if not lines and hits.stopped in (TIME, SIZE, EXPENSIVE, INTERRUPTED):
            lines.append(texts.no_match_so_far(pattern))
        if hits.stopped == TIME:
            waited = "; every search worker was busy" if busy else ""
            lines.append(
                texts.stopped_at_time(took, limit, waited, found=len(hits.lines), searched=searched, total=len(refs))
            )
        elif hits.stopped == EXPENSIVE:
            lines.append(texts.stopped_expensive(len(hits.lines), searched, len(refs)))
        elif hits.stopped == INTERRUPTED:
            lines.append(texts.interrupted_note(len(hits.lines)))
        elif hits.stopped == SIZE:
            lines.append(texts.stopped_at_size(self.limits.max_bytes))
        elif not lines:
            where = f"ref={ref}" if ref else f"{len(refs)} offloaded item(s)"
            return texts.no_match(pattern, where)
        elif hits.stopped is not None:
            lines.append(texts.more_matches(len(hits.lines)))
        return "\n".join(lines)


def collision_warning(names: Iterable[str]) -> str:
    names = sorted(names)
    return (
        f"the request declares its own tool named {' and '.join(names)}; forwarded without offloading or reload tools"
    )
