"""The refs of large contents (images, documents), remembered per process.

A computer-use client resends every screenshot of its session on every turn, and each one older
than the kept images becomes its ref again: a keyed blake2b over ~330 KB of base64, ~0.35 ms a
screenshot, most of a turn's CPU by the end of a long session. `RefCache.ref` gives the same
ref as `make_ref` without hashing again a content it has seen in the same namespace: it looks an
entry up by (namespace, kind, length, a fingerprint of sampled characters), then compares the
whole content with the remembered one (a memcmp, ~20 µs) before reusing its ref. So a ref is
never reused for other bytes (a fingerprint collision costs a hash, never a wrong ref) nor
across namespaces (the namespace is in the key and the ref was computed in it).

Bounded by the characters it holds (`MAX_CHARS`, least recently used evicted first); contents
under `MIN_CHARS` are hashed directly (their hash is cheaper than an entry). Safe to share
between threads (large bodies are planned off the event loop).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from proxy.core.markers import make_ref

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


MEDIA_REFS = RefCache()  # the process's, used by proxy.core.media
