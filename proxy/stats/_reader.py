"""Reading statistics back for the JSON API: a window's totals and series, the tenants table,
a tenant's sessions (paged) and one session's turns."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.core import jsonio
from proxy.stats._buckets import ALL, Fields, Span, add, merged, rollup
from proxy.stats._recorder import label_key, session_keys, sessions_key
from proxy.stats._turns import OBSERVED, headline, point
from proxy.store import sealing as resealing
from proxy.store.base import Store
from proxy.store.sealing import Sealer

MAX_MODELS = 8  # models listed per session, most turns first
MAX_TENANT_ROWS = 100  # tenants listed, most raw tokens first
PLAIN = Sealer(None)
LABEL_READS_AT_ONCE = 16  # the labels of a tenants table (100 at most): store reads in flight at once


def display_name(namespace: str, names: Mapping[str, str]) -> str:
    """The tenants-file name of a proxy key's namespace, else the namespace's first 12 digits."""
    return names.get(namespace) or namespace[:12]


async def tenant_labels(
    store: Store, namespaces: Sequence[str], names: Mapping[str, str], *, sealer: Sealer = PLAIN
) -> dict[str, str | None]:
    """namespace → what the recorder was told to call it (`Caller.label`: a sub-tenant's
    `name/sub`, a client key's fingerprint), None when nothing was (or it is the tenants-file
    name): read for the namespaces without a tenants-file name only."""
    wanted = [ns for ns in dict.fromkeys(namespaces) if ns not in names]
    gate = asyncio.Semaphore(LABEL_READS_AT_ONCE)

    async def read(ns: str) -> bytes | None:
        async with gate:
            raw = await store.get(label_key(ns))
            return None if raw is None else await resealing.opened(store, label_key(ns), raw, sealer=sealer)

    opened = dict(zip(wanted, await asyncio.gather(*(read(ns) for ns in wanted))))
    return {ns: jsonio.stored_text(text) if (text := opened.get(ns)) else None for ns in namespaces}


async def window_stats(store: Store, span: Span, namespace: str | None) -> dict[str, Any]:
    """Totals and time series of one tenant (None: all tenants) over `span`, and when its
    first request of the span was (the dashboard's default window fits the data)."""
    starts = span.starts(span.window.series)
    buckets = await store.hashes(span.series_keys(namespace or ALL))
    series = rollup(starts, buckets, span.points(), step=span.window.step)
    return {
        "totals": headline(merged(fields for _, fields in series)),
        "series": [point(t, fields) for t, fields in series],
        # the start of the window's first bucket (minute; hour for 7d and 30d) with a request
        "first_seen": next(
            (
                start
                for start, fields in zip(starts, buckets)
                if fields.get("requests") or fields.get(OBSERVED + "requests")
            ),
            None,
        ),
    }


async def tenant_rows(
    store: Store, span: Span, names: Mapping[str, str], *, sealer: Sealer = PLAIN
) -> tuple[list[dict[str, Any]], bool]:
    """The tenants with most raw tokens in the span (`MAX_TENANT_ROWS` at most) with their
    totals, most raw tokens first; and whether there were more. Namespaces are the clients' to
    make (sub-tenants, keys), so what is read is bounded whatever their number: the first of each
    hour's or day's ranking (`top_key`), then the buckets of the first of those only."""
    scores: Fields = {}
    more = False
    for top in span.top_keys():
        total, first = await store.ranked(top, 0, MAX_TENANT_ROWS)
        more |= total > MAX_TENANT_ROWS
        add(scores, dict(first))
    more |= len(scores) > MAX_TENANT_ROWS
    namespaces = sorted(scores, key=lambda ns: (-scores[ns], ns))[:MAX_TENANT_ROWS]
    per = len(span.starts(span.window.rows))
    found = await store.hashes([k for ns in namespaces for k in span.row_keys(ns)])
    rows: list[dict[str, Any]] = []
    for i, ns in enumerate(namespaces):
        totals = headline(merged(found[i * per : (i + 1) * per]))
        if totals["requests"] or totals.get("observed"):  # a tenant in observe mode is one too
            rows.append({"tenant": ns, "name": display_name(ns, names), "totals": totals})
    labelled = await tenant_labels(store, [r["tenant"] for r in rows], names, sealer=sealer)
    for row in rows:
        row["label"] = labelled[row["tenant"]] or row["name"]
    rows.sort(key=lambda r: (-_raw_tokens(r["totals"]), r["tenant"]))
    return rows, more


def _raw_tokens(totals: Mapping[str, Any]) -> int:
    """The raw tokens of a tenant's managed and observed turns (what its ranking counts)."""
    observed = totals.get("observed")
    return int(totals["tokens_before"]) + (int(observed["tokens_forwarded"]) if observed else 0)


def _session_row(name: str, last: float, fields: Mapping[str, int | float]) -> dict[str, Any]:
    """A session's totals; of its models (the client's strings, any number of them) the
    `MAX_MODELS` with most turns, and how many others there were. `turns` counts its observed
    turns too (`observed` holds their figures; the others are the managed turns')."""
    used = sorted(
        ((k.split(":", 1)[1], int(v)) for k, v in fields.items() if k.startswith("model:")), key=lambda m: (-m[1], m[0])
    )
    totals = headline(fields)
    observed = totals.get("observed")  # observe mode's turns (their counters apart): turns of the session too
    turns = totals.pop("requests") + (observed["requests"] if observed else 0)
    return {
        "id": name,
        "last_seen": round(last, 3),
        "turns": turns,
        "models": dict(used[:MAX_MODELS]),
        "models_other": max(0, len(used) - MAX_MODELS),
        **totals,
    }


async def sessions_page(store: Store, namespace: str, offset: int, *, limit: int) -> tuple[int, list[dict[str, Any]]]:
    """(how many sessions the tenant has, one page of them: the most recently active first)."""
    total, page = await store.ranked(sessions_key(namespace), offset, limit)
    found = await store.hashes([session_keys(namespace, name)[1] for name, _ in page])
    return total, [_session_row(name, last, fields) for (name, last), fields in zip(page, found)]


async def session_detail(store: Store, namespace: str, session: str, *, sealer: Sealer) -> dict[str, Any] | None:
    """A session's totals and its last turns (oldest first); None when it has none. `session`
    is the id the client sent, or the name the listing shows (with encryption at rest: its
    keyed hash)."""
    for name in dict.fromkeys((sealer.key_name(session, namespace), session)):
        turns_key, totals_key = session_keys(namespace, name)
        items = await store.items(turns_key)
        if not items:
            continue
        opened = await resealing.opened_items(store, turns_key, items, sealer=sealer)
        turns = [json.loads(item) for item in opened if item is not None]
        [fields] = await store.hashes([totals_key])
        last = turns[-1]["time"] if turns else 0.0
        return {**_session_row(name, last, fields), "turns_kept": len(turns), "data": turns}
    return None
