"""The `X-Offload-*` request headers the proxy reads, and what to say of one it does not.

A misspelt setting (`X-Offload-Max-Tokens: 5`) would otherwise be ignored without a word: the
request is served as it would be without it, and its answer names each unknown header with the
known ones closest to it (`difflib`, over the part after `X-Offload-`). A client chooses these
names, how many and how long: at most MAX_NAMED of one request are matched and named, each
clipped to MAX_NAME characters first, so a request of a thousand headers, or of one 50 KB name,
costs no more than one of eight short ones.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

from proxy.core.settings import HEADER_PREFIX, SETTING_FIELDS, header_name

UPSTREAM_HEADER = "X-Offload-Upstream"  # read by proxy.upstream.base_url: a header, not a setting
KNOWN = tuple(sorted({*(header_name(field) for field in SETTING_FIELDS), UPSTREAM_HEADER}))
_SUFFIXES = {name.lower()[len(HEADER_PREFIX) :]: name for name in KNOWN}
MAX_NAME = 64  # characters of an unknown header's name matched and shown
MAX_NAMED = 8  # unknown headers of one request matched and named; the rest are only counted
CUTOFF = 0.6  # difflib's: below it, no known header is close enough to be named
NO_MATCH = "none"  # the counter's label of a header that is close to none
UNMATCHED = "unchecked"  # … of one past the first MAX_NAMED of its request


def is_known(name: str) -> bool:
    """Whether the proxy reads header `name` (lower-case): a setting as the resolver reads it
    (`-` or `_` between words), or the upstream header."""
    if len(name) > len(HEADER_PREFIX) + MAX_NAME:
        return False
    field = name[len(HEADER_PREFIX) :].replace("-", "_")
    return field in SETTING_FIELDS or name == UPSTREAM_HEADER.lower()


def _shown(name: str) -> str:
    """`name` as a response header may carry it: printable ASCII, at most MAX_NAME characters,
    its words capitalised as the documentation writes them (ASGI servers lower-case names)."""
    clipped = "".join(c if " " < c < "\x7f" else "?" for c in name[:MAX_NAME])
    shown = "-".join(part.capitalize() for part in clipped.split("-"))
    return shown + "..." if len(name) > MAX_NAME else shown


def closest(name: str) -> tuple[str, ...]:
    """The known headers closest to `name` (lower-case, `X-Offload-…`), the closest first: two at
    most (`X-Offload-Max-Tokens` is as close to `…-Max-Total-Tokens` as to `…-Hard-Max-Tokens`),
    none when none is close."""
    suffix = name[len(HEADER_PREFIX) : len(HEADER_PREFIX) + MAX_NAME].replace("_", "-")
    return tuple(_SUFFIXES[match] for match in difflib.get_close_matches(suffix, _SUFFIXES, n=2, cutoff=CUTOFF))


@dataclass(frozen=True)
class UnknownHeader:
    name: str  # as sent, clipped (`_shown`)
    closest: tuple[str, ...]  # the known headers' names, the closest first

    def text(self) -> str:
        hint = f"did you mean {' or '.join(self.closest)}?" if self.closest else "not an X-Offload-* setting"
        return f"unknown header {self.name} ignored ({hint})"


@dataclass(frozen=True)
class UnknownHeaders:
    """The unknown `X-Offload-*` headers of one request: the first MAX_NAMED, and how many more."""

    named: tuple[UnknownHeader, ...]
    more: int = 0

    def warning(self) -> str:
        """The `X-Offload-Warning` text: ASCII, a few hundred characters at most."""
        texts = [header.text() for header in self.named]
        if self.more:
            texts.append(f"{self.more} more unknown X-Offload-* headers ignored")
        return "; ".join(texts)

    def labels(self) -> dict[str, int]:
        """How many to count under each label (a known header's name, NO_MATCH or UNMATCHED): a
        set of values bounded by KNOWN, whatever the client sent."""
        counts: dict[str, int] = {}
        for header in self.named:
            label = header.closest[0] if header.closest else NO_MATCH
            counts[label] = counts.get(label, 0) + 1
        if self.more:
            counts[UNMATCHED] = self.more
        return counts


def unknown_headers(names: Iterable[str]) -> UnknownHeaders | None:
    """The `X-Offload-*` names among `names` the proxy does not read (each once), or None."""
    named: list[UnknownHeader] = []
    seen: set[str] = set()
    more = 0
    for name in names:
        lname = name.lower()
        if not lname.startswith(HEADER_PREFIX) or is_known(lname):
            continue
        key = lname[: len(HEADER_PREFIX) + MAX_NAME + 1]
        if key in seen:
            continue
        seen.add(key)
        if len(named) < MAX_NAMED:
            named.append(UnknownHeader(_shown(name), closest(lname)))
        else:
            more += 1
    return UnknownHeaders(tuple(named), more) if named else None
