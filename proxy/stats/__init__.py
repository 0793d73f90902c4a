"""Usage statistics: per-tenant time buckets and per-session turns, kept in the store.

- `_prices`: tokens valued in money;
- `_buckets`: the pure arithmetic of buckets and windows;
- `_turns`: one managed request as the statistics see it, its counters and headline figures;
- `_sessions`: the sessions of clients that send no `X-Offload-Session` (derived from the
  conversation, or from the stored Responses answer a turn continues);
- `_recorder`: the writes off the request path, their backlog while the store refuses them, and
  the prompt-cache reuse estimate;
- `_holdout`: the holdout's sessions in the store, its two arms compared, and the report of it;
- `_reader`: the reads of the JSON API.

This surface is what the server (`proxy.http`), its settings (`proxy.config`) and the replay use.
"""

from proxy.stats._buckets import WINDOWS, parse_retention, span_of
from proxy.stats._holdout import holdout_outcomes, holdout_report
from proxy.stats._prices import PriceTable, parse_prices
from proxy.stats._reader import display_name, session_detail, sessions_page, tenant_labels, tenant_rows, window_stats
from proxy.stats._recorder import STOP_TIMEOUT, Recorder
from proxy.stats._sessions import MAX_SESSION_ITEMS, session_from_history, session_from_name

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
