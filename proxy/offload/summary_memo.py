"""What this process remembers of the summary records it read or wrote, per store.

A summary record never changes once written (its key is the hash of what it summarises), so
this process keeps the ones it read, per store (a record another store holds is no record of
this one's: a replay or a test runs several stores in one process); it re-reads one a minute
to extend its idle TTL (`REFRESH`).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import MutableMapping

from proxy.core.compression import PriorSummary

RECORDS = 10_000  # records remembered per store (then forgotten at once, and read again)
REFRESH = 60.0
_records: MutableMapping[object, dict[str, tuple[float, PriorSummary]]] = weakref.WeakKeyDictionary()


def memo(store: object) -> dict[str, tuple[float, PriorSummary]]:
    """The records this process read from or wrote to `store`, by key: (when, record)."""
    found = _records.get(store)
    if found is None:
        found = _records[store] = {}
    return found


def keep(store: object, summary_key: str, record: PriorSummary) -> PriorSummary:
    remembered = memo(store)
    if len(remembered) > RECORDS:
        remembered.clear()
    remembered[summary_key] = (time.monotonic(), record)
    return record
