"""Usage statistics: per-tenant time buckets and per-session turns, kept in the store.

- `_counters`: one managed request as the statistics see it, its counters and headline figures,
  the pure arithmetic of buckets and windows, and tokens valued in money (the prices);
- `_sessions`: the sessions of clients that send no `X-Offload-Session` (derived from the
  conversation, or from the stored Responses answer a turn continues), and the holdout's
  sessions in the store, its two arms compared, and the report of it;
- `_recorder`: the writes off the request path, their backlog while the store refuses them, and
  the prompt-cache reuse estimate;
- `_reader`: the reads of the JSON API.

This surface is what the server (`proxy.http`), its settings (`proxy.config`) and the replay use.
"""

from proxy.stats._counters import WINDOWS, PriceTable, parse_prices, parse_retention, span_of
from proxy.stats._reader import display_name, session_detail, sessions_page, tenant_labels, tenant_rows, window_stats
from proxy.stats._recorder import STOP_TIMEOUT, Recorder
from proxy.stats._sessions import (
    MAX_SESSION_ITEMS,
    holdout_outcomes,
    holdout_report,
    session_from_history,
    session_from_name,
)

__all__ = [
    "MAX_SESSION_ITEMS",
    "STOP_TIMEOUT",
    "WINDOWS",
    "PriceTable",
    "Recorder",
    "display_name",
    "holdout_outcomes",
    "holdout_report",
    "parse_prices",
    "parse_retention",
    "session_detail",
    "session_from_history",
    "session_from_name",
    "sessions_page",
    "span_of",
    "tenant_labels",
    "tenant_rows",
    "window_stats",
]
