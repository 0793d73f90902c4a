"""The text the model sees in place of offloaded content, and how to recognise it again.

Replacement text is a pure function of (content, ref, token count): the same message always
becomes the same bytes, so the provider's prompt cache keeps hitting turn after turn.

Recognition is exact, never a prefix test: a tool result that merely starts like a marker
(`[offloaded …`) is ordinary content and is compacted like any other. A tool-result marker is
recognised by its whole shape: the first line, a preview within the bounds `proxy.core.preview`
keeps (lines and characters), and the proxy's own trailer line naming the same ref. Anything
recognised is therefore small.
"""

from __future__ import annotations

import base64
import hashlib
import re

from proxy.core.preview import MAX_CHARS as PREVIEW_CHARS
from proxy.core.preview import MAX_LINES as PREVIEW_LINES
from proxy.core.preview import preview

MARKER_PREFIX = "[offloaded "
REF_PATTERN = r"[A-Za-z0-9_-]{6,64}"
REF_RE = re.compile(rf"ref=({REF_PATTERN})")
RELOAD_TOOL = "context_reload"
SEARCH_TOOL = "context_search"
INJECTED_TOOLS = frozenset({RELOAD_TOOL, SEARCH_TOOL})

_TOOL_HEAD = re.compile(rf"\[offloaded tool result: (?:0|[1-9][0-9]{{0,11}}) tokens, ref=({REF_PATTERN})\]")
_COUNT = r"(?:0|[1-9][0-9]{0,11})"
_TOOL_TRAILER = re.compile(
    rf"\[… ({_COUNT}) of ({_COUNT}) lines not shown \({_COUNT} chars in all\)\. "
    rf"The full text: {RELOAD_TOOL}\(ref=\"({REF_PATTERN})\"\); "
    rf"search it: {SEARCH_TOOL}\(pattern, ref=\"({REF_PATTERN})\"\)\.\]"
)
_HISTORY_HEAD = re.compile(
    rf"\[offloaded history: (?:0|[1-9][0-9]{{0,11}}) earlier messages \((?:0|[1-9][0-9]{{0,11}}) tokens\) "
    rf"summarised, ref=({REF_PATTERN})\. {RELOAD_TOOL}\(ref=\"({REF_PATTERN})\"\) returns them as JSON lines; "
    rf"{SEARCH_TOOL}\(pattern, ref=\"({REF_PATTERN})\"\) searches them\.\]"
)


def make_ref(namespace: str, kind: str, content: str) -> str:
    """Content-addressed and tenant-keyed: equal content in one tenant → equal ref, always."""
    digest = hashlib.blake2b(
        content.encode("utf-8", "surrogatepass"), digest_size=12, key=namespace.encode()[:64], person=kind.encode()[:16]
    ).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def tool_result_marker(text: str, ref: str, tokens: int) -> str:
    """The head line, the preview (`proxy.core.preview`), the trailer: sizes and how to get the rest."""
    shown = preview(text)
    return (
        f"{MARKER_PREFIX}tool result: {tokens} tokens, ref={ref}]\n"
        f"{shown.body}\n"
        f"[… {shown.hidden} of {shown.lines} lines not shown ({shown.chars} chars in all). "
        f'The full text: {RELOAD_TOOL}(ref="{ref}"); '
        f'search it: {SEARCH_TOOL}(pattern, ref="{ref}").]'
    )


def history_marker(ref: str, count: int, tokens: int) -> str:
    """The first line of a compression summary message; the summary text follows it."""
    return (
        f"{MARKER_PREFIX}history: {count} earlier messages ({tokens} tokens) summarised, ref={ref}. "
        f'{RELOAD_TOOL}(ref="{ref}") returns them as JSON lines; '
        f'{SEARCH_TOOL}(pattern, ref="{ref}") searches them.]'
    )


def tool_result_ref(text: str) -> str | None:
    """The ref of a tool-result marker made by `tool_result_marker`, else None."""
    if not text.startswith(MARKER_PREFIX):
        return None  # the common case, decided without a scan
    first, _, rest = text.partition("\n")
    head = _TOOL_HEAD.fullmatch(first)
    body, newline, last = rest.rpartition("\n")
    if head is None or not newline or len(body) > PREVIEW_CHARS or body.count("\n") >= PREVIEW_LINES:
        return None
    trailer = _TOOL_TRAILER.fullmatch(last)
    ref = head.group(1)
    if trailer is None or trailer.group(3) != ref or trailer.group(4) != ref:
        return None
    if int(trailer.group(1)) > int(trailer.group(2)):
        return None  # more lines hidden than the text has: not the proxy's
    return ref


def history_ref(text: str) -> str | None:
    """The ref of a compression summary message's text (its first line), else None."""
    if not text.startswith(MARKER_PREFIX):
        return None
    match = _HISTORY_HEAD.fullmatch(text.partition("\n")[0])
    if match is None or not match.group(1) == match.group(2) == match.group(3):
        return None
    return match.group(1)


def is_marker(text: str) -> bool:
    """Is `text` exactly a tool-result marker of the proxy's own (exempt from compaction)?"""
    return tool_result_ref(text) is not None


def refs_in(text: str) -> list[str]:
    """The reference a proxy marker carries (tool result or history summary); [] for anything else."""
    ref = tool_result_ref(text) or history_ref(text)
    return [ref] if ref else []
