"""The text the model sees in place of offloaded content, and how to recognise it again.

Replacement text is a pure function of (content, ref, token count): the same message always
becomes the same bytes, so the provider's prompt cache keeps hitting turn after turn.
"""

from __future__ import annotations

import base64
import hashlib
import re

MARKER_PREFIX = "[offloaded "
REF_RE = re.compile(r"ref=([A-Za-z0-9_-]{6,64})")
PREVIEW_CHARS = 400
PREVIEW_LINES = 8
RELOAD_TOOL = "context_reload"
SEARCH_TOOL = "context_search"
INJECTED_TOOLS = frozenset({RELOAD_TOOL, SEARCH_TOOL})


def make_ref(namespace: str, kind: str, content: str) -> str:
    """Content-addressed and tenant-keyed: equal content in one tenant → equal ref, always."""
    digest = hashlib.blake2b(
        content.encode("utf-8", "surrogatepass"), digest_size=12, key=namespace.encode()[:64], person=kind.encode()[:16]
    ).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def preview(text: str) -> tuple[str, int]:
    """The first lines of `text` (at most PREVIEW_CHARS), and how many lines were left out."""
    lines = text.splitlines()
    shown: list[str] = []
    size = 0
    for line in lines[:PREVIEW_LINES]:
        room = PREVIEW_CHARS - size
        if room <= 0:
            break
        shown.append(line if len(line) <= room else line[:room] + "…")
        size += len(shown[-1]) + 1
    return "\n".join(shown), len(lines) - len(shown)


def tool_result_marker(text: str, ref: str, tokens: int) -> str:
    head, hidden = preview(text)
    return (
        f"{MARKER_PREFIX}tool result: {tokens} tokens, ref={ref}]\n"
        f"{head}\n"
        f"[… {hidden} more lines. The full text: {RELOAD_TOOL}(ref=\"{ref}\"); "
        f"search it: {SEARCH_TOOL}(pattern, ref=\"{ref}\").]"
    )


def is_marker(text: str) -> bool:
    return text.startswith(MARKER_PREFIX)


def refs_in(text: str) -> list[str]:
    """The references a marker carries (its first line holds them)."""
    if not is_marker(text):
        return []
    return REF_RE.findall(text.split("\n", 1)[0])
