"""The `anthropic-beta` values of what the proxy emulates, taken out of the headers that go
upstream: an upstream that does not apply context management may refuse a beta it does not
know (the proxy applies it instead).

One place for every emulated beta: `EMULATED_BETAS` lists them (add a value there); only those
values are removed, the others stay in their order, a header left with none is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable

EMULATED_BETAS = frozenset(
    {
        "context-management-2025-06-27",  # the clearing edits (proxy.turn._context_edits)
        "compact-2026-01-12",  # threshold compaction (proxy.formats.messages.threshold, proxy.turn._context_compaction)
    }
)


def without_emulated_betas(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """`headers` (raw name/value pairs) with the emulated values out of every `anthropic-beta`."""
    out: list[tuple[bytes, bytes]] = []
    for name, value in headers:
        if name.lower() == b"anthropic-beta":
            values = [v.strip() for v in value.split(b",") if v.strip()]
            kept = [v for v in values if v.decode("latin-1") not in EMULATED_BETAS]
            if not kept:
                continue
            if len(kept) != len(values):  # untouched otherwise: byte for byte
                value = b",".join(kept)
        out.append((name, value))
    return out
