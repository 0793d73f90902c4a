"""One managed request as the statistics see it (a `Turn`), the counters it adds to a bucket,
and the headline figures read back from summed counters."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from proxy.emulation import COMPACTION_ACTION, EDITS_ACTION
from proxy.stats.buckets import Fields
from proxy.stats.prices import PriceTable

ACTIONS = ("none", "compact", "compress", "compact+compress", "compress-pending", "compact+compress-pending")
COUNTERS = ("requests", "tokens_before", "tokens_after", "reload_rounds", "searches", "summaries_made",
            "summaries_reused", "summaries_failed", "summaries_pending", "warnings", "store_warnings", "errors",
            "prefix_tokens", "image_tokens_saved", "emulated_compactions", "context_edits")
# What X-Offload-Action adds when the proxy applied the provider's context management itself
# (`proxy.emulation`): counted apart, the offload action is what is left.
EMULATED = {COMPACTION_ACTION: "emulated_compactions", EDITS_ACTION: "context_edits"}
MONEY = ("usd_before", "usd_after")


@dataclass(frozen=True)
class Turn:
    """A managed request, once answered. Never holds content or a credential."""

    namespace: str
    session: str | None
    time: float
    route: str
    model: str | None
    status: int
    stream: bool
    tokens_before: int
    tokens_after: int
    action: str
    refs: int = 0
    refs_created: int = 0
    transport: str = "http"  # "websocket": a response.create of the Responses WebSocket mode
    reload_rounds: int = 0
    searches: int = 0
    summaries_made: int = 0
    summaries_failed: int = 0
    warnings: int = 0
    store_warnings: int = 0
    image_tokens_saved: int = 0  # of tokens_before - tokens_after, by offloading images and documents
    prefix_tokens: int = 0  # of tokens_after, the share a provider's prompt cache could serve (proxy.stats.prefix)
    # Linking a Responses turn to its session (proxy.stats.replies), never listed: the response id
    # it continues from (when its session is to be found from it), the id of its stored answer.
    continues: str | None = None
    response_id: str | None = None
    label: str | None = None  # what the dashboard calls the namespace (Caller.label), never listed


    def row(self) -> dict[str, Any]:
        """As a session lists it."""
        row = asdict(self)
        for name in ("namespace", "session", "continues", "response_id", "label"):
            del row[name]
        row["time"] = round(self.time, 3)
        return row


def split_action(action: str) -> tuple[str, set[str]]:
    """(the offload action, the emulated parts) of an X-Offload-Action value."""
    parts = action.split("+")
    emulated = {p for p in parts if p in EMULATED}
    return "+".join(p for p in parts if p not in EMULATED) or "none", emulated


def turn_fields(turn: Turn, prices: PriceTable) -> Fields:
    """What one turn adds to a bucket. A summary is *reused* when the turn went out compressed
    without making one; *pending* when it went out uncompressed while its summary was being
    made in the background (a stall avoided: the turn did not wait)."""
    action, emulated = split_action(turn.action)
    compressed = "compress" in action
    pending = "compress-pending" in action
    fields: Fields = {
        "requests": 1,
        "tokens_before": turn.tokens_before,
        "tokens_after": turn.tokens_after,
        f"action:{action}": 1,
        **{EMULATED[part]: 1 for part in emulated},
        "reload_rounds": turn.reload_rounds,
        "searches": turn.searches,
        "summaries_made": turn.summaries_made,
        "summaries_failed": turn.summaries_failed,
        "summaries_reused": int(compressed and not pending and turn.summaries_made == 0),
        "summaries_pending": int(pending),
        "warnings": turn.warnings,
        "store_warnings": turn.store_warnings,
        "errors": int(turn.status >= 400),
        "prefix_tokens": turn.prefix_tokens,
        "image_tokens_saved": turn.image_tokens_saved,
        "usd_before": prices.cost(turn.model, turn.tokens_before),
        "usd_after": prices.cost(turn.model, turn.tokens_after),
    }
    return {k: v for k, v in fields.items() if v}  # zeros are not written


def headline(fields: Mapping[str, int | float]) -> dict[str, Any]:
    """Summed counters as the API shows them (every counter present, 0 when none)."""
    n = {name: int(fields.get(name, 0)) for name in COUNTERS}
    before, after = n["tokens_before"], n["tokens_after"]
    usd_before, usd_after = (round(float(fields.get(name, 0.0)), 6) for name in MONEY)
    actions = {a: 0 for a in ACTIONS}
    actions.update({name.split(":", 1)[1]: int(v) for name, v in fields.items() if name.startswith("action:")})
    return {
        "requests": n["requests"],
        "tokens_before": before,
        "tokens_after": after,
        "tokens_saved": before - after,
        "image_tokens_saved": n["image_tokens_saved"],
        "text_tokens_saved": before - after - n["image_tokens_saved"],
        "forwarded_ratio": round(after / before, 4) if before else None,
        "prefix_tokens": n["prefix_tokens"],
        "prefix_reuse": round(n["prefix_tokens"] / after, 4) if after else None,
        "cost_before_usd": usd_before,
        "cost_after_usd": usd_after,
        "cost_saved_usd": round(usd_before - usd_after, 6),
        "actions": actions,
        "reload_rounds": n["reload_rounds"],
        "reload_rate": round(n["reload_rounds"] / n["requests"], 4) if n["requests"] else None,
        "searches": n["searches"],
        "summaries": {"made": n["summaries_made"], "reused": n["summaries_reused"],
                      "failed": n["summaries_failed"], "pending": n["summaries_pending"]},
        "stalls_avoided": n["summaries_pending"],
        "warnings": n["warnings"],
        "store_warnings": n["store_warnings"],
        "errors": n["errors"],
        "emulated": {"compactions": n["emulated_compactions"], "context_edits": n["context_edits"]},
    }


def point(start: int, fields: Mapping[str, int | float]) -> dict[str, Any]:
    """One point of a time series: the counters a chart draws."""
    actions = {name.split(":", 1)[1]: int(v) for name, v in fields.items() if name.startswith("action:")}
    return {
        "t": start,
        "requests": int(fields.get("requests", 0)),
        "tokens_before": int(fields.get("tokens_before", 0)),
        "tokens_after": int(fields.get("tokens_after", 0)),
        "prefix_tokens": int(fields.get("prefix_tokens", 0)),
        "image_tokens_saved": int(fields.get("image_tokens_saved", 0)),
        "reload_rounds": int(fields.get("reload_rounds", 0)),
        "actions": actions,
    }
