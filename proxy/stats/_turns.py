"""One managed request as the statistics see it (a `Turn`), the counters it adds to a bucket,
and the headline figures read back from summed counters.

Money is the bill the upstream reported (`proxy.core.answers`), valued at the price of the turn's
model when it is recorded: per call (`turn`: the client's answer and its reload rounds;
`summary`: the proxy's summary calls; `keepalive`: cache pings) and per part (uncached input,
cache reads, 5-minute and 1-hour cache writes, output). Beside it the counterfactual, an
estimate (`counterfactual`): what the raw history would have been billed with the same cache
behaviour, for the turns whose every answer reported usage.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from proxy.core.answers import INPUT_PARTS, KINDS, NONE, PARTS, Bill, Meter, Price
from proxy.core.compaction import COMPACTION_ACTION, EDITS_ACTION
from proxy.core.settings import Arm
from proxy.stats._buckets import Fields
from proxy.stats._prices import PriceTable

ACTIONS = ("none", "compact", "compress", "compact+compress", "compress-pending", "compact+compress-pending")
COUNTERS = (
    "requests",
    "tokens_before",
    "tokens_after",
    "reload_rounds",
    "searches",
    "summaries_made",
    "summaries_reused",
    "summaries_failed",
    "summaries_pending",
    "warnings",
    "store_warnings",
    "errors",
    "prefix_tokens",
    "image_tokens_saved",
    "emulated_compactions",
    "context_edits",
)
# What X-Offload-Action adds when the proxy applied the provider's context management itself
# (`proxy.core.compaction`): counted apart, the offload action is what is left.
EMULATED = {COMPACTION_ACTION: "emulated_compactions", EDITS_ACTION: "context_edits"}
MAX_MODELS = 8  # models a headline names with their bill, most money first


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
    prefix_tokens: int = 0  # of tokens_after, the share a provider's prompt cache could serve (proxy.stats._recorder)
    # Linking a Responses turn to its session (proxy.stats._sessions), never listed: the response id
    # it continues from (when its session is to be found from it), the id of its stored answer.
    continues: str | None = None
    response_id: str | None = None
    label: str | None = None  # what the dashboard calls the namespace (Caller.label), never listed
    bill: Bill = NONE  # what the upstream billed for the turn's answers (its reload rounds included)
    summary_bill: Bill = NONE  # for the proxy's summary calls made while the turn waited
    counterfactual: Bill | None = None  # the raw history's estimated bill (`counterfactual`); None: unknown
    # observe mode (`proxy.http.observed`): the raw history went out (`tokens_before`, `bill`);
    # `tokens_after`, `action` and `counterfactual` are what the proxy would have forwarded and billed
    observed: bool = False
    # a session of the holdout (`proxy.http.holdout`): its arm ("control": forwarded as received),
    # how the client's answer ended (`proxy.core.answers`) and the repeated identical tool calls of
    # the request's history (`proxy.core.answers`)
    arm: Arm | None = None
    finish: str | None = None
    answer_error: bool = False
    context_error: bool = False
    repeated_calls: int = 0

    def row(self) -> dict[str, Any]:
        """As a session lists it."""
        row = asdict(self)
        for name in ("namespace", "session", "continues", "response_id", "label"):
            del row[name]
        row["time"] = round(self.time, 3)
        return row


def counterfactual(meter: Meter, *, tokens_before: int, tokens_after: int) -> Bill | None:
    """What the raw history would have been billed with the same cache behaviour (an estimate):
    the first answer's input, each part scaled by raw tokens over forwarded tokens (the same
    shares uncached, read and written), and the last answer's output (what the client got;
    the reload rounds are the proxy's). None when an answer reported no usage, or nothing was
    forwarded."""
    if meter.first is None or meter.last is None or meter.total.unreported or tokens_after <= 0:
        return None
    first = meter.first.scaled_input(tokens_before / tokens_after)
    return replace(first, output=meter.last.output, answers=1, unreported=0)


def bill_fields(bill: Bill, price: Price, call: str, *, model: str | None) -> Fields:
    """What one bill adds to a bucket: tokens and dollars per part of `call`, answers with and
    without usage, and the dollars and tokens of the model."""
    cost = bill.cost(price)
    fields: Fields = {f"bill:{call}:{p}": getattr(bill, p) for p in PARTS}
    fields.update({f"usd:{call}:{p}": getattr(cost, p) for p in PARTS})
    fields[f"answers:{call}"] = bill.answers
    fields[f"unreported:{call}"] = bill.unreported
    if model and bill.answers:
        fields[f"model_usd:{model}"] = cost.total
        fields[f"model_tokens:{model}"] = bill.input + bill.output
    return {k: v for k, v in fields.items() if v}


def split_action(action: str) -> tuple[str, set[str]]:
    """(the offload action, the emulated parts) of an X-Offload-Action value."""
    parts = action.split("+")
    emulated = {p for p in parts if p in EMULATED}
    return "+".join(p for p in parts if p not in EMULATED) or "none", emulated


OBSERVED = "obs:"  # an observed turn's counters: the same names behind this prefix, never mixed with managed ones


def turn_fields(turn: Turn, prices: PriceTable) -> Fields:
    """What one turn adds to a bucket. A summary is *reused* when the turn went out compressed
    without making one; *pending* when it went out uncompressed while its summary was being
    made in the background (a stall avoided: the turn did not wait). An observed turn's are the
    same counters behind `OBSERVED` (`observed_headline` reads them back)."""
    if turn.observed:
        return {OBSERVED + k: v for k, v in turn_fields(replace(turn, observed=False), prices).items()}
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
        "turns_without_usage": int(turn.bill.unreported > 0),
    }
    price = prices.price(turn.model)
    fields.update(bill_fields(turn.bill, price, "turn", model=turn.model))
    fields.update(bill_fields(turn.summary_bill, price, "summary", model=turn.model))
    if turn.counterfactual is not None:
        cf = turn.counterfactual.cost(price)
        fields["cf_turns"] = 1
        fields.update({f"cf:{p}": getattr(turn.counterfactual, p) for p in PARTS})
        fields.update({f"cf_usd:{p}": getattr(cf, p) for p in PARTS})
        fields["cf_billed_usd"] = turn.bill.cost(price).total
    return {k: v for k, v in fields.items() if v}  # zeros are not written


def _split(fields: Mapping[str, int | float], tokens: str, usd: str) -> dict[str, Any]:
    """{"tokens": {part: n}, "usd": {part: $, "total": $}} of summed `<tokens><part>` and
    `<usd><part>` counters."""
    money = {p: round(float(fields.get(f"{usd}{p}", 0.0)), 6) for p in PARTS}
    return {
        "tokens": {p: int(fields.get(f"{tokens}{p}", 0)) for p in PARTS},
        "usd": {**money, "total": round(sum(money.values()), 6)},
    }


def bill_headline(fields: Mapping[str, int | float]) -> dict[str, Any]:
    """The bill of summed counters: per call and all together, the answers that reported no
    usage, the models that cost most."""
    calls = {
        call: {
            **_split(fields, f"bill:{call}:", f"usd:{call}:"),
            "answers": int(fields.get(f"answers:{call}", 0)),
            "answers_without_usage": int(fields.get(f"unreported:{call}", 0)),
        }
        for call in KINDS
    }
    tokens = {p: sum(c["tokens"][p] for c in calls.values()) for p in PARTS}
    money = {p: round(sum(c["usd"][p] for c in calls.values()), 6) for p in PARTS}
    models = sorted(
        ((k.split(":", 1)[1], float(v)) for k, v in fields.items() if k.startswith("model_usd:")),
        key=lambda m: (-m[1], m[0]),
    )
    return {
        "tokens": {**tokens, "input": sum(tokens[p] for p in INPUT_PARTS)},
        "usd": {**money, "total": round(sum(money.values()), 6)},
        "calls": calls,
        "answers": sum(c["answers"] for c in calls.values()),
        "answers_without_usage": sum(c["answers_without_usage"] for c in calls.values()),
        "turns_without_usage": int(fields.get("turns_without_usage", 0)),
        "models": [
            {"model": m, "usd": round(usd, 6), "tokens": int(fields.get(f"model_tokens:{m}", 0))}
            for m, usd in models[:MAX_MODELS]
        ],
    }


def counterfactual_headline(fields: Mapping[str, int | float], bill: Mapping[str, Any]) -> dict[str, Any]:
    """The estimate beside the bill (`counterfactual`): the raw history's bill over the turns it
    is known for, and what the proxy's side cost for the same turns (their bill, and every
    summary call and ping)."""
    cf = _split(fields, "cf:", "cf_usd:")
    extra = bill["calls"]["summary"]["usd"]["total"] + bill["calls"]["keepalive"]["usd"]["total"]
    billed = round(float(fields.get("cf_billed_usd", 0.0)) + extra, 6)
    return {
        "estimate": True,
        "turns": int(fields.get("cf_turns", 0)),
        **cf,
        "billed_usd": billed,
        "saved_usd": round(cf["usd"]["total"] - billed, 6),
        "ratio": round(billed / cf["usd"]["total"], 4) if cf["usd"]["total"] else None,
    }


def headline(fields: Mapping[str, int | float]) -> dict[str, Any]:
    """Summed counters as the API shows them (every counter present, 0 when none)."""
    n = {name: int(fields.get(name, 0)) for name in COUNTERS}
    before, after = n["tokens_before"], n["tokens_after"]
    bill = bill_headline(fields)
    estimate = counterfactual_headline(fields, bill)
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
        "bill": bill,
        "counterfactual": estimate,
        "cost_billed_usd": bill["usd"]["total"],  # measured
        "cost_without_proxy_usd": estimate["usd"]["total"],  # estimated (`counterfactual`)
        "cost_saved_usd": estimate["saved_usd"],  # estimated
        "actions": actions,
        "reload_rounds": n["reload_rounds"],
        "reload_rate": round(n["reload_rounds"] / n["requests"], 4) if n["requests"] else None,
        "searches": n["searches"],
        "summaries": {
            "made": n["summaries_made"],
            "reused": n["summaries_reused"],
            "failed": n["summaries_failed"],
            "pending": n["summaries_pending"],
        },
        "stalls_avoided": n["summaries_pending"],
        "warnings": n["warnings"],
        "store_warnings": n["store_warnings"],
        "errors": n["errors"],
        "emulated": {"compactions": n["emulated_compactions"], "context_edits": n["context_edits"]},
        **({"observed": observed_headline(fields)} if any(k.startswith(OBSERVED) for k in fields) else {}),
    }


def observed_headline(fields: Mapping[str, int | float]) -> dict[str, Any]:
    """The observed turns of summed counters (`OBSERVED`): what went out and was billed (the raw
    history), beside what the proxy would have forwarded and billed (an estimate)."""
    inner = headline({k[len(OBSERVED) :]: v for k, v in fields.items() if k.startswith(OBSERVED)})
    would = inner["counterfactual"]
    billed = inner["bill"]["usd"]["total"]
    return {
        "requests": inner["requests"],
        "tokens_forwarded": inner["tokens_before"],
        "tokens_would_forward": inner["tokens_after"],
        "tokens_would_save": inner["tokens_saved"],
        "would_forward_ratio": inner["forwarded_ratio"],
        "bill": inner["bill"],
        "would_bill": {"estimate": True, "turns": would["turns"], "tokens": would["tokens"], "usd": would["usd"]},
        "would_save_usd": round(billed - would["usd"]["total"], 6) if would["turns"] else None,
        "actions": inner["actions"],
        "errors": inner["errors"],
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
        "billed_usd": round(sum(float(v) for k, v in fields.items() if k.startswith("usd:")), 6),
        "actions": actions,
    }
