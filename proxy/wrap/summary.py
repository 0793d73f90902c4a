"""The one line `wrap` prints when the agent exits, from the proxy's own statistics API
(`GET /v1/offload/stats`, read with the admin token).

The run's numbers are the difference between the totals after the run and before it (a fresh
proxy's store starts empty; a reused one, or a `--data-dir` of earlier runs, does not): requests
(managed turns), tokens as the agent sent them → as forwarded, what the upstream billed (measured:
its usage, priced; split into uncached input, cache reads, cache writes and output), beside it
the ratio to what the raw history would have been billed (an estimate, docs/billing.md), the
reload rounds the proxy ran, and the turns whose upstream reported no usage. The statistics are written by a background task about once a second: the
line waits (a few seconds at most) until the proxy holds no unwritten turn, then reads them.
"""

from __future__ import annotations

import math
import time
import urllib.error
from typing import Any

from proxy.wrap.child import describe, get_json

WINDOW = "30d"  # the longest: nothing of a run falls out of it between the two readings
FIELDS = (
    "requests",
    "tokens_before",
    "tokens_after",
    "reload_rounds",
    "billed_usd",
    "uncached_usd",
    "reads_usd",
    "writes_usd",
    "output_usd",
    "turns_without_usage",
    "cf_usd",
    "cf_billed_usd",
)
# where each is in the statistics' totals
_PATHS = {
    "billed_usd": ("bill", "usd", "total"),
    "uncached_usd": ("bill", "usd", "uncached"),
    "reads_usd": ("bill", "usd", "cache_read"),
    "writes_usd": (("bill", "usd", "cache_write_5m"), ("bill", "usd", "cache_write_1h")),
    "output_usd": ("bill", "usd", "output"),
    "turns_without_usage": ("bill", "turns_without_usage"),
    "cf_usd": ("counterfactual", "usd", "total"),
    "cf_billed_usd": ("counterfactual", "billed_usd"),
}
SETTLE_WITHIN = 5.0  # seconds to wait for the proxy's last turns to be written


NO_TOKEN = "the proxy's admin token is needed: --admin-token"


def _number(value: Any) -> float:
    """A statistic: absent is 0; anything but a finite number is not the statistics API's answer."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"not a number: {str(value)[:40]}")
    return float(value)


def read(url: str, token: str) -> tuple[dict[str, float], int]:
    """The totals of FIELDS, and the turns the proxy still holds unwritten (the admin's `recorder`).
    ValueError when the answer is not the statistics API's (a server that is not the proxy)."""
    body = get_json(f"{url}/v1/offload/stats?window={WINDOW}", token=token)
    totals = body.get("totals") if isinstance(body, dict) else None
    recorder = (body.get("recorder") if isinstance(body, dict) else None) or {}
    if not isinstance(totals, dict) or not isinstance(recorder, dict):
        raise ValueError("no totals in the answer")
    return {name: _field(totals, name) for name in FIELDS}, int(_number(recorder.get("queued")))


def _field(totals: dict, name: str) -> float:
    paths = _PATHS.get(name, (name,))
    total = 0.0
    for path in paths if isinstance(paths[0], tuple) else (paths,):
        value: Any = totals
        for step in path:
            value = value.get(step) if isinstance(value, dict) else None
        total += _number(value)
    return total


def settled(url: str, token: str, within: float = SETTLE_WITHIN) -> dict[str, float]:
    """The totals once every turn served so far is written (or after `within` seconds).

    An answer's `recorder` is taken before its totals are read, so the answer that first says
    nothing is held counts every turn."""
    deadline = time.monotonic() + within
    while True:
        totals, queued = read(url, token)
        if queued == 0 or time.monotonic() > deadline:
            return totals
        time.sleep(0.2)


def difference(before: dict[str, float] | None, after: dict[str, float]) -> dict[str, float]:
    if before is None:
        return dict(after)
    return {name: max(0.0, after[name] - before.get(name, 0.0)) for name in FIELDS}


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def _usd(value: float) -> str:
    return f"${value:,.2f}" if value >= 1 else f"${value:.4f}"


def stats_text(run: dict[str, float]) -> str:
    """`12 requests, 410,200 → 98,450 tokens (0.24), billed $0.0820 (uncached $0.0100, reads
    $0.0500, writes $0.0120, output $0.0100), ×0.41 of the raw history's (est.), 3 reloads`."""
    requests, before, after = int(run["requests"]), int(run["tokens_before"]), int(run["tokens_after"])
    if requests == 0:
        return "no requests went through the proxy"
    parts = [_plural(requests, "request")]
    ratio = f" ({after / before:.2f})" if before else ""
    parts.append(f"{before:,} → {after:,} tokens{ratio}")
    if run["billed_usd"] > 0:
        parts.append(
            f"billed {_usd(run['billed_usd'])} (uncached {_usd(run['uncached_usd'])}, reads "
            f"{_usd(run['reads_usd'])}, writes {_usd(run['writes_usd'])}, output {_usd(run['output_usd'])})"
        )
    if run["cf_usd"] > 0:
        parts.append(f"×{run['cf_billed_usd'] / run['cf_usd']:.2f} of the raw history's (est.)")
    parts.append(_plural(int(run["reload_rounds"]), "reload"))
    if missing := int(run["turns_without_usage"]):
        parts.append(f"{_plural(missing, 'turn')} without usage")
    return ", ".join(parts)


def line(
    *, title: str, status: int, run: dict[str, float] | None, kept: str | None = None, unavailable: str = NO_TOKEN
) -> str:
    """The whole line: what the agent did through the proxy, and, with --keep, where the proxy still is.
    `unavailable`: why there is no `run` (no admin token, the proxy gone)."""
    if run is None:
        text = f"statistics unavailable ({unavailable})"
        if status != 0:
            text = f"{title} exited with status {status}; {text}"
    elif int(run["requests"]) == 0 and status != 0:
        text = f"{title} exited with status {status}; no request went through the proxy"
    else:
        text = stats_text(run)
    return f"offload-proxy: {text}" + (f"; {kept}" if kept else "")


def describe_kept(url: str, pid: int | None, token: str | None, *, own_token: bool, scratch: str | None = None) -> str:
    """The `--keep` tail: the dashboard, how to sign in, how to stop the proxy, and the run's folder
    (its log, and its store of tool results unless --data-dir) that outlives it until removed."""
    sign_in = f" (admin token {token})" if token and own_token else ""
    stop = f", stop it with kill {pid}" if pid else ""
    left = f"; its log and store stay in {scratch} until you remove it" if scratch else ""
    return f"proxy still up at {url}: dashboard {url}/dashboard{sign_in}{stop}{left}"


def safe_read(url: str, token: str | None) -> tuple[dict[str, float] | None, str]:
    """`settled` totals, or None and why they cannot be read (no token, a token refused, the proxy
    gone, a server that is not the proxy)."""
    if not token:
        return None, NO_TOKEN
    try:
        return settled(url, token), ""
    except urllib.error.HTTPError as exc:
        refused = " (a wrong --admin-token?)" if exc.code in (401, 403) else ""
        return None, f"the proxy answered HTTP {exc.code}{refused}"
    except OSError as exc:
        return None, f"the proxy did not answer: {describe(exc)}"
    except ValueError as exc:
        return None, f"no statistics in the proxy's answer: {describe(exc)[:80]}"
