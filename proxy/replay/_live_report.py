"""`replay --live`'s figures: per trace and overall, from the journal's records of both arms.

A turn is *compared* when both arms answered (HTTP 200 with a readable next action); a turn that
failed in either arm is counted (`failed_raw`, `failed_proxy`, `failed`), never hidden, and left
out of the similarity figures. Over the compared turns (`proxy.replay._live_report`):
`agreement` and `same_tools` and `same_finish` are shares of turns; `argument_similarity` is the
mean over the turns where either arm called a tool, `text_similarity` over those where either
wrote text. Costs are priced with the price table (`proxy.stats._counters`) at the request's model:
the raw arm's, the usage each answer reported; the proxy arm's, what its statistics measured in
the trace's session (the upstream's usage of each of its calls: the turns with their reload
rounds, its summary calls, its keep-alive pings), else (`measured: false`) the usage it answered
with (the upstream's, plus the summaries it folds in).

`replay --live`: the model's next action in an answer, and how alike two of them are.

An answer (a chat completion, a Responses response or an Anthropic message, non-streamed) is
read as an `Action`: the tools it calls (names and arguments, in order), its text, and why it
stopped (`finish`). Two actions of the same turn (the raw arm's and the proxy arm's) compare as:

- `same_tools`: the same tool names in the same order (both calling none counts as the same);
- `argument_similarity`: the calls paired by position, each pair's arguments as JSON flattened
  to (path, value) pairs (strings with their whitespace collapsed) and compared by Jaccard
  (shared pairs / all pairs); a call without a partner scores 0; the mean over the pairs;
  arguments that are not JSON compare as text (below). None when neither arm called a tool;
- `text_similarity`: difflib's `SequenceMatcher.ratio` of the two texts, whitespace collapsed
  (1.0 when both are empty), each cut to MAX_TEXT characters; None when neither wrote text;
- `same_finish`: the same finish reason;
- `agree`: the same next action: same tools, argument similarity 1.0 (when any) and the same
  finish reason. Text is not part of it (a model rarely writes the same prose twice).
"""

from __future__ import annotations

import difflib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from proxy.replay._report import NAME_WIDTH, unique_labels


@dataclass
class TracePairs:
    """One trace's selected turns: each the raw arm's record and the proxy arm's (None: not sent)."""

    position: int
    id: str
    turns: list[tuple[dict[str, Any] | None, dict[str, Any] | None]] = field(default_factory=list)
    measured: dict[str, float] | None = None  # the session's bill per call (turn, summary, keepalive); None: not read


def _int(value: Any) -> int:
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def _ok(record: dict[str, Any] | None) -> bool:
    return record is not None and record.get("status") == 200 and record.get("action") is not None


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _share(flags: list[bool]) -> float | None:
    return round(sum(flags) / len(flags), 4) if flags else None


def figures(
    pairs: list[tuple[dict[str, Any] | None, dict[str, Any] | None]], *, measured: dict[str, float] | None = None
) -> dict[str, Any]:
    """The figures of some turns (see the module's docstring); `measured`: the proxy arm's bill
    per call from its statistics, when read."""
    compared = [
        compare(Action.from_dict(r["action"]), Action.from_dict(p["action"]))  # type: ignore[index]
        for r, p in pairs
        if _ok(r) and _ok(p)
    ]
    arguments = [c.argument_similarity for c in compared if c.argument_similarity is not None]
    texts = [c.text_similarity for c in compared if c.text_similarity is not None]
    raw = [r for r, _ in pairs if r is not None]
    proxied = [p for _, p in pairs if p is not None]

    def arm(records: list[dict[str, Any]]) -> dict[str, Any]:
        answered = [r for r in records if r.get("status") == 200]
        bills = [r.get("bill") or {} for r in answered]
        return {
            "answered": len(answered),
            "usd": round(sum(float(r.get("usd") or 0.0) for r in answered), 6),
            "input_tokens": sum(
                sum(b.get(p, 0) for p in ("uncached", "cache_read", "cache_write_5m", "cache_write_1h")) for b in bills
            ),
            "output_tokens": sum(b.get("output", 0) for b in bills),
            "answers_without_usage": sum(1 for b in bills if not b.get("answers")),
        }

    raw_arm, proxy_arm = arm(raw), arm(proxied)
    proxy_arm["reload_rounds"] = sum(_int(p.get("reload_rounds")) for p in proxied)  # X-Offload-Reload-Rounds
    proxy_arm.update(_measured(measured, proxy_arm["usd"]))
    failed_raw = sum(1 for r, _ in pairs if not _ok(r))
    failed_proxy = sum(1 for _, p in pairs if not _ok(p))
    errors = Counter(str(rec.get("status")) for rec in raw + proxied if rec.get("status") != 200)
    first = next(
        (
            f"{rec['trace']} turn {rec['turn']} ({rec['arm']}): {rec.get('error')}"
            for r, p in pairs
            for rec in (r, p)
            if rec is not None and not _ok(rec)
        ),
        None,
    )
    return {
        "turns": len(pairs),
        "compared": len(compared),
        "failed": sum(1 for r, p in pairs if not (_ok(r) and _ok(p))),
        "failed_raw": failed_raw,
        "failed_proxy": failed_proxy,
        "agreement": _share([c.agree for c in compared]),
        "same_tools": _share([c.same_tools for c in compared]),
        "argument_similarity": _mean(arguments),
        "argument_turns": len(arguments),
        "text_similarity": _mean(texts),
        "text_turns": len(texts),
        "same_finish": _share([c.same_finish for c in compared]),
        "raw": raw_arm,
        "proxy": proxy_arm,
        "cost_ratio": _ratio(proxy_arm["total_usd"], raw_arm["usd"]),
        "proxy_actions": dict(
            sorted(Counter(p.get("offload_action") for p in proxied if p.get("offload_action")).items())
        ),
        "errors_by_status": dict(sorted(errors.items())),
        "first_error": first,
    }


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 4) if b else None


def _measured(measured: dict[str, float] | None, answered_usd: float) -> dict[str, Any]:
    """The proxy arm's cost: its statistics' per call, else what its answers reported."""
    if measured is None:
        return {
            "measured": False,
            "turns_usd": None,
            "summaries_usd": None,
            "keepalive_usd": None,
            "total_usd": answered_usd,
        }
    parts = {
        "turns_usd": measured.get("turn", 0.0),
        "summaries_usd": measured.get("summary", 0.0),
        "keepalive_usd": measured.get("keepalive", 0.0),
    }
    return {"measured": True, **{k: round(v, 6) for k, v in parts.items()}, "total_usd": round(sum(parts.values()), 6)}


def report_of(traces: list[TracePairs], *, header: dict[str, Any]) -> dict[str, Any]:
    """report.json: the run's settings (`header`), overall and per trace (each turn's comparison)."""
    rows = []
    for trace in traces:
        per_turn = []
        for k, (r, p) in enumerate(trace.turns, 1):
            row: dict[str, Any] = {
                "turn": k,
                "raw_status": r.get("status") if r else None,
                "proxy_status": p.get("status") if p else None,
                "offload_action": p.get("offload_action") if p else None,
            }
            if _ok(r) and _ok(p):
                row.update(compare(Action.from_dict(r["action"]), Action.from_dict(p["action"])).as_dict())  # type: ignore[index]
            per_turn.append(row)
        rows.append(
            {
                "id": trace.id,
                "position": trace.position,
                **figures(trace.turns, measured=trace.measured),
                "per_turn": per_turn,
            }
        )
    overall = {"traces": len(traces), **figures([pair for t in traces for pair in t.turns])}
    # the proxy arm's cost: the sum of the traces' (each measured by the statistics, or not)
    proxy = overall["proxy"]
    for name in ("turns_usd", "summaries_usd", "keepalive_usd", "total_usd"):
        proxy[name] = round(sum(r["proxy"][name] or 0.0 for r in rows), 6)
    proxy["measured"] = all(r["proxy"]["measured"] for r in rows if r["proxy"]["answered"])
    overall["unmeasured_traces"] = sum(1 for r in rows if r["proxy"]["answered"] and not r["proxy"]["measured"])
    overall["cost_ratio"] = _ratio(proxy["total_usd"], overall["raw"]["usd"])
    return {**header, "overall": overall, "traces": rows}


def _f(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(report: dict[str, Any]) -> str:
    """The printed summary: a row per trace, the overall row, what the figures are."""
    header = (
        f"{'trace':{NAME_WIDTH}} {'turns':>5} {'cmp':>4} {'fail':>4} {'agree':>6} {'tools':>6} {'args':>6} "
        f"{'text':>6} {'finish':>6} {'raw $':>10} {'proxy $':>10}"
    )
    rows = [header, "-" * len(header)]

    def row(name: str, r: dict[str, Any]) -> str:
        return (
            f"{name:{NAME_WIDTH}} {r['turns']:>5} {r['compared']:>4} {r['failed']:>4} {_f(r['agreement']):>6} "
            f"{_f(r['same_tools']):>6} {_f(r['argument_similarity']):>6} {_f(r['text_similarity']):>6} "
            f"{_f(r['same_finish']):>6} {r['raw']['usd']:>10.4f} {r['proxy']['total_usd']:>10.4f}"
        )

    names = unique_labels([t["id"] for t in report["traces"]], NAME_WIDTH)
    rows += [row(name, t) for name, t in zip(names, report["traces"])]
    o = report["overall"]
    rows += ["-" * len(header), row("OVERALL", o)]
    rows.append(
        f"{o['turns']} turns of {o['traces']} traces, {o['compared']} compared (both arms answered); "
        f"failed: {o['failed_raw']} raw, {o['failed_proxy']} through the proxy"
        + (
            f" (HTTP {', '.join(f'{s} × {n}' for s, n in o['errors_by_status'].items())}); first: {o['first_error']}"
            if o["first_error"]
            else ""
        )
    )
    rows.append(
        "agree: same tools, arguments and finish reason; tools: same tool names; args: arguments' "
        "flattened-JSON Jaccard; text: difflib ratio; finish: same finish reason"
    )
    ratio = f" (×{o['cost_ratio']:.3f})" if o["cost_ratio"] is not None else ""
    p = o["proxy"]
    rows.append(
        f"billed (the upstream's usage × the price table): raw ${o['raw']['usd']:.4f}, through the proxy "
        f"${p['total_usd']:.4f}{ratio}: its turns ${p['turns_usd']:.4f}, its summary calls "
        f"${p['summaries_usd']:.4f}, keep-alive ${p['keepalive_usd']:.4f} (the proxy's statistics); input "
        f"tokens raw {o['raw']['input_tokens']}, proxy {p['input_tokens']} (its answers); reload rounds "
        f"the model ran through the proxy: {p['reload_rounds']}"
    )
    if o["unmeasured_traces"]:
        rows.append(
            f"for {o['unmeasured_traces']} traces the proxy's statistics (/v1/offload/sessions) did not "
            f"answer: their proxy cost is the usage its answers reported (the summaries it folds in included)"
        )
    unreported = o["raw"]["answers_without_usage"] + o["proxy"]["answers_without_usage"]
    if unreported:
        rows.append(
            f"answers without usage (not billed here): {o['raw']['answers_without_usage']} raw, "
            f"{o['proxy']['answers_without_usage']} proxy"
        )
    return "\n".join(rows)


MAX_TEXT = 20_000  # characters of each text compared (difflib is quadratic in the worst case)
MAX_FLAT = 10_000  # (path, value) pairs kept of one call's arguments
_SPACE = re.compile(r"\s+")


class AnswerError(ValueError):
    """An answer that holds no next action this module can read (the message says why)."""


@dataclass(frozen=True)
class Call:
    name: str
    arguments: str  # as sent: JSON text (chat, Responses) or the JSON of Anthropic's `input`


@dataclass(frozen=True)
class Action:
    calls: tuple[Call, ...]
    text: str
    finish: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "calls": [{"name": c.name, "arguments": c.arguments} for c in self.calls],
            "text": self.text,
            "finish": self.finish,
        }

    @staticmethod
    def from_dict(value: dict[str, Any]) -> Action:
        return Action(
            tuple(Call(str(c["name"]), str(c["arguments"])) for c in value["calls"]),
            str(value["text"]),
            str(value["finish"]),
        )


def _texts(parts: Any, kinds: tuple[str, ...]) -> list[str]:
    if isinstance(parts, str):
        return [parts]
    if not isinstance(parts, list):
        return []
    return [
        p["text"] for p in parts if isinstance(p, dict) and p.get("type") in kinds and isinstance(p.get("text"), str)
    ]


def _chat(answer: dict[str, Any]) -> Action:
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise AnswerError("a chat completion without choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise AnswerError("a chat completion without a message")
    calls = []
    tool_calls = message.get("tool_calls")
    for call in tool_calls if isinstance(tool_calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            arguments = function.get("arguments")
            calls.append(
                Call(str(function.get("name")), arguments if isinstance(arguments, str) else json.dumps(arguments))
            )
    return Action(
        tuple(calls), "\n".join(_texts(message.get("content"), ("text",))), str(choices[0].get("finish_reason"))
    )


def _responses(answer: dict[str, Any]) -> Action:
    output = answer.get("output")
    if not isinstance(output, list):
        raise AnswerError("a Responses response without output")
    calls, texts = [], []
    for item in output:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call":
            arguments = item.get("arguments")
            calls.append(
                Call(str(item.get("name")), arguments if isinstance(arguments, str) else json.dumps(arguments))
            )
        elif item.get("type") == "message":
            texts += _texts(item.get("content"), ("output_text", "text"))
    details = answer.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    finish = "function_call" if calls else str(reason or answer.get("status"))
    return Action(tuple(calls), "\n".join(texts), finish)


def _anthropic(answer: dict[str, Any]) -> Action:
    content = answer.get("content")
    if not isinstance(content, list):
        raise AnswerError("an Anthropic message without content")
    calls = [
        Call(str(b.get("name")), json.dumps(b.get("input"), sort_keys=True))
        for b in content
        if isinstance(b, dict) and b.get("type") == "tool_use"
    ]
    return Action(tuple(calls), "\n".join(_texts(content, ("text",))), str(answer.get("stop_reason")))


_READERS = {"chat": _chat, "responses": _responses, "anthropic": _anthropic}


def action_of(answer: Any, format: str) -> Action:
    """The next action in a non-streamed answer of `format`; AnswerError when it has none."""
    if not isinstance(answer, dict):
        raise AnswerError("the answer is not a JSON object")
    return _READERS[format](answer)


def _flat(value: Any, path: str, out: set[tuple[str, str]]) -> None:
    if len(out) >= MAX_FLAT:
        return
    if isinstance(value, dict):
        if not value:
            out.add((path, "{}"))
        for k, v in value.items():
            _flat(v, f"{path}.{k}", out)
    elif isinstance(value, list):
        if not value:
            out.add((path, "[]"))
        for i, v in enumerate(value):
            _flat(v, f"{path}[{i}]", out)
    elif isinstance(value, str):
        out.add((path, _SPACE.sub(" ", value).strip()))
    else:
        out.add((path, json.dumps(value)))


def flattened(value: Any) -> set[tuple[str, str]]:
    """`value`'s leaves as (path, normalised value) pairs: `.key`, `[index]`; strings with their
    whitespace collapsed, numbers and booleans as JSON writes them."""
    out: set[tuple[str, str]] = set()
    _flat(value, "$", out)
    return out


def text_similarity(a: str, b: str) -> float:
    """difflib's ratio of the two texts, whitespace collapsed, each cut to MAX_TEXT (1.0 when both are empty)."""
    a, b = _SPACE.sub(" ", a).strip()[:MAX_TEXT], _SPACE.sub(" ", b).strip()[:MAX_TEXT]
    if a == b:
        return 1.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def arguments_similarity(a: str, b: str) -> float:
    """Jaccard similarity of two calls' arguments as flattened JSON; as text when either is not JSON."""
    try:
        left, right = flattened(json.loads(a)), flattened(json.loads(b))
    except (ValueError, RecursionError):
        return text_similarity(a, b)
    union = left | right
    return len(left & right) / len(union) if union else 1.0


@dataclass(frozen=True)
class Comparison:
    same_tools: bool
    argument_similarity: float | None  # None: neither arm called a tool
    text_similarity: float | None  # None: neither arm wrote text
    same_finish: bool

    @property
    def agree(self) -> bool:
        return self.same_tools and self.same_finish and self.argument_similarity in (None, 1.0)

    def as_dict(self) -> dict[str, Any]:
        return {
            "same_tools": self.same_tools,
            "argument_similarity": _round(self.argument_similarity),
            "text_similarity": _round(self.text_similarity),
            "same_finish": self.same_finish,
            "agree": self.agree,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def compare(raw: Action, proxied: Action) -> Comparison:
    """How alike the raw arm's next action and the proxy arm's are (see the module's docstring)."""
    pairs = max(len(raw.calls), len(proxied.calls))
    arguments = None
    if pairs:
        scores = [arguments_similarity(a.arguments, b.arguments) for a, b in zip(raw.calls, proxied.calls)]
        arguments = sum(scores) / pairs  # an unpaired call scores 0
    text = text_similarity(raw.text, proxied.text) if (raw.text.strip() or proxied.text.strip()) else None
    return Comparison(
        [c.name for c in raw.calls] == [c.name for c in proxied.calls], arguments, text, raw.finish == proxied.finish
    )
