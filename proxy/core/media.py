"""Media, pure: images, documents and audio leave the context by content hash (which, and what
replaces them), their refs remembered per process so a resent screenshot is not hashed again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from proxy.core import texts
from proxy.core.settings import OffloadSettings
from proxy.core.texts import make_ref
from proxy.core.tokens import MEDIA_TYPES, TokenCounter, binary_tokens, data_url_header, info_tokens, split_data_url
from proxy.core.view import ItemView, MediaPart

# ==================== ref cache
# The refs of large contents (images, documents), remembered per process.
#
# A computer-use client resends every screenshot of its session on every turn, and each one older
# than the kept images becomes its ref again: a keyed blake2b over ~330 KB of base64, ~0.35 ms a
# screenshot, most of a turn's CPU by the end of a long session. `RefCache.ref` gives the same
# ref as `make_ref` without hashing again a content it has seen in the same namespace: it looks an
# entry up by (namespace, kind, length, a fingerprint of sampled characters), then compares the
# whole content with the remembered one (a memcmp, ~20 µs) before reusing its ref. So a ref is
# never reused for other bytes (a fingerprint collision costs a hash, never a wrong ref) nor
# across namespaces (the namespace is in the key and the ref was computed in it).
#
# Bounded by the characters it holds (`MAX_CHARS`, least recently used evicted first); contents
# under `MIN_CHARS` are hashed directly (their hash is cheaper than an entry). Safe to share
# between threads (large bodies are planned off the event loop).

MIN_CHARS = 16 * 1024
MAX_CHARS = 64 * 1024 * 1024  # about 200 screenshots of 1280×800
SAMPLES = 256  # characters sampled along the content, with its first and last 64


def fingerprint(content: str) -> int:
    """A cheap digest of `content`'s length and of characters spread over all of it."""
    step = max(1, len(content) // SAMPLES)
    return hash((len(content), content[:64], content[-64:], content[::step]))


class RefCache:
    def __init__(self, *, max_chars: int = MAX_CHARS, min_chars: int = MIN_CHARS) -> None:
        self.max_chars, self.min_chars = max_chars, min_chars
        self._entries: OrderedDict[tuple[str, str, int], tuple[str, str]] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0
        self.chars_hashed = 0  # characters make_ref hashed (misses and small contents)

    def __len__(self) -> int:
        return len(self._entries)

    def ref(self, namespace: str, kind: str, content: str) -> str:
        """`make_ref(namespace, kind, content)`, without hashing a large content seen lately."""
        if len(content) < self.min_chars or len(content) > self.max_chars:
            self.chars_hashed += len(content)
            return make_ref(namespace, kind, content)
        key = (namespace, kind, fingerprint(content))
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
        if entry is not None and (entry[0] is content or entry[0] == content):
            self.hits += 1
            return entry[1]
        ref = make_ref(namespace, kind, content)
        with self._lock:
            self.misses += 1
            self.chars_hashed += len(content)
            old = self._entries.pop(key, None)
            if old is not None:
                self._chars -= len(old[0])
            self._entries[key] = (content, ref)
            self._chars += len(content)
            while self._chars > self.max_chars:
                _, (evicted, _ref) = self._entries.popitem(last=False)
                self._chars -= len(evicted)
        return ref

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._chars = 0


MEDIA_REFS = RefCache()  # the process's, used by `plan_media`


# ==================== media
# Images, documents and audio leave the context by content hash: which, and what replaces them.
#
# A pure function of (items, settings), like compaction: images older than the most recent
# `keep_images` of the conversation, and base64 documents and audio above
# `max_tool_message_tokens` outside the recent tail, are stored and replaced by a one-line text
# marker (`proxy.core.texts.media_marker`). The ref is a hash of the bytes (as a data URL) in the
# namespace, so an image resent every turn is stored once and always becomes the same marker:
# the forwarded prefix stays byte-stable turn after turn.
#
# Only content whose bytes are in the request is offloaded (a URL or a file id is counted, never
# fetched), and only an image whose header is readable and agrees with its declared media type:
# anything else (invalid base64, a lying media type, an empty payload) is forwarded as it came,
# for the upstream to judge, so nothing the proxy changes can reach the upstream corrupted.
# Nothing is decoded but the first bytes of an image's header (`proxy.core.tokens`).

DOCUMENT_KEEP_RECENT = 1  # items at the end whose documents stay (as compaction's tail)


@dataclass(frozen=True)
class MediaOffload:
    """One image, document or audio part to store under `ref` (its data URL is `text`)."""

    ref: str
    kind: str
    text: str
    tokens: int


@dataclass
class MediaPlan:
    items: list[Any]
    offloads: list[MediaOffload] = field(default_factory=list)


@dataclass(frozen=True)
class Reloaded:
    """What `context_reload` of a media ref gives back: each format shows it as itself."""

    ref: str
    kind: str
    data_url: str

    @property
    def media_type(self) -> str:
        split = split_data_url(self.data_url)
        return split[0] if split else "application/octet-stream"

    @property
    def base64(self) -> str:
        return self.data_url.partition(",")[2]


ToolResult = str | Reloaded  # what an injected call gives back


def as_text(result: ToolResult) -> str:
    """A result where only text can go (a call the client's next request answers)."""
    return result if isinstance(result, str) else texts.media_carried(result.kind, result.ref)


def _describe_image(part: MediaPart) -> tuple[str, int] | None:
    read = data_url_header(part.inline or "")
    if read is None:
        return None
    declared, info = read
    if info is None or MEDIA_TYPES[info.format] != declared:
        return None  # unreadable, or not what it says it is: forwarded as it came
    tokens = info_tokens(info, billing=part.billing, detail=part.detail)
    return f"{info.format} {info.width}×{info.height}", tokens


def _describe_binary(part: MediaPart) -> tuple[str, int] | None:
    split = split_data_url(part.inline or "")
    if split is None or not split[1]:
        return None
    declared, payload = split
    size = len(payload) * 3 // 4 - payload[-2:].count("=")
    return f"{declared or 'unknown type'}, {size:,} bytes", binary_tokens(payload)


def plan_media(
    items: list[Any], view: ItemView, settings: OffloadSettings, *, counter: TokenCounter, namespace: str
) -> MediaPlan:
    """Replace the images before the most recent `keep_images` (in whole batches of
    `image_batch`), and the large documents."""
    plan = MediaPlan(items)
    if settings.mode == "off":
        return plan
    found = _parts(items, view)
    if not found:
        return plan
    images = [entry for entry in found if entry[2].kind == "image"]
    older = max(0, len(images) - settings.keep_images)
    old_images = images[: older - older % settings.image_batch]
    last_document_item = len(items) - DOCUMENT_KEEP_RECENT
    candidates = old_images + [e for e in found if e[2].kind != "image" and e[0] < last_document_item]
    return _replaced(items, view, candidates, namespace=namespace, document_limit=settings.tool_result_limit())


def without_media(items: list[Any], view: ItemView, *, namespace: str) -> MediaPlan:
    """`items` with every image, document and audio part whose bytes they carry replaced by its
    marker, whatever its age or size: the stored form of summarised items
    (`proxy.offload.summaries`), so that reloading them pages through text, never through
    base64, and each part comes back as itself, byte for byte, from its own ref. What
    `plan_media` would forward as it came (an unreadable or lying image) stays as it is."""
    return _replaced(items, view, _parts(items, view), namespace=namespace, document_limit=-1)


def _parts(items: list[Any], view: ItemView) -> list[tuple[int, int, MediaPart]]:
    """(item index, part index in `view.media` order, part) of every media part of `items`."""
    return [(i, k, part) for i, item in enumerate(items) for k, part in enumerate(view.media(item))]


def _replaced(
    items: list[Any],
    view: ItemView,
    candidates: list[tuple[int, int, MediaPart]],
    *,
    namespace: str,
    document_limit: int,
) -> MediaPlan:
    """`items` with each of `candidates` (item index, part index in `view.media` order, part)
    that can be offloaded replaced by its marker; documents and audio of at most
    `document_limit` tokens stay."""
    markers: dict[int, dict[int, str]] = {}
    stored: dict[str, MediaOffload] = {}
    for i, k, part in candidates:
        if part.inline is None:
            continue
        described = _describe_image(part) if part.kind == "image" else _describe_binary(part)
        if described is None:
            continue
        what, tokens = described
        if part.kind != "image" and tokens <= document_limit:
            continue
        ref = MEDIA_REFS.ref(namespace, part.kind, part.inline)
        markers.setdefault(i, {})[k] = texts.media_marker(part.kind, what, tokens, ref=ref)
        stored.setdefault(ref, MediaOffload(ref, part.kind, part.inline, tokens))
    if not markers:
        return MediaPlan(items)
    out = list(items)
    for i, replaced in markers.items():
        out[i] = view.with_media(items[i], replaced)
    return MediaPlan(out, list(stored.values()))
