"""What `offload-proxy demo` prints: a turn-by-turn table per format and the totals."""

from __future__ import annotations

import functools
import json
import textwrap
from dataclasses import dataclass, field
from typing import Any

from proxy.replay import TurnResult, answer_positions

STEP_WIDTH = 34  # the "last step" column


@dataclass
class FormatRun:
    """One format's replay of the conversation: what each turn's answer said, and the statistics' rows."""

    format: str
    path: str
    session: str
    turns: list[TurnResult]
    reloads: list[int | None] = field(default_factory=list)  # per turn, from the statistics (None: not read)


def steps(messages: list[Any]) -> list[str]:
    """Per turn, what the agent had just done: the tool call the turn's request ends with the result of."""
    out = []
    for k in answer_positions(messages):
        last = messages[k - 1]
        out.append(_step(messages, k - 1) if last.get("role") == "tool" else f"(the {last.get('role')}'s message)")
    return out


def _step(messages: list[Any], index: int) -> str:
    call_id = messages[index].get("tool_call_id")
    for message in reversed(messages[:index]):
        for call in message.get("tool_calls") or ():
            if call.get("id") == call_id:
                arguments = json.loads(call["function"]["arguments"] or "{}")
                shown = arguments.get("command") or arguments.get("path") or ""
                return f"{call['function']['name']} {shown}"
    return "tool"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _ratio(after: int, before: int) -> str:
    return f"{after / before:.3f}" if before else "-"


def _action(turn: TurnResult) -> str:
    return turn.action or (f"HTTP {turn.status}" if turn.status != 200 else "-")


def _reloads(run: FormatRun, k: int) -> str:
    return str(run.reloads[k]) if k < len(run.reloads) and run.reloads[k] is not None else "?"


# What each part of an action (`X-Offload-Action`, split at `+`) means, for the legend under the table
ACTION_MEANINGS = {
    "none": "forwarded as received",
    "compact": "large tool results stored, a preview with ref= forwarded in their place",
    "compress-pending": "a summary of older turns being made in the background, the turn forwarded without it",
    "compress": "older turns forwarded as their summary",
    "emulated-compaction": "the provider's compaction applied by the proxy",
    "context-edits": "the provider's clearing edits applied by the proxy",
    "HTTP": "the proxy's answer was not a 200",
    "-": "answered without an X-Offload-Action",
}
LEGEND_WIDTH = 110


def legend(actions: list[str], formats: list[str]) -> list[str]:
    """The lines under the turn table: its first format's columns, the actions shown (only
    those), the reloads."""
    parts = {part.split(" ")[0] for action in actions for one in action.split(" | ") for part in one.split("+")}
    said = [f"{name} = {meaning}" for name, meaning in ACTION_MEANINGS.items() if name in parts]
    if any("+" in action for action in actions):
        said.append("a+b = both")
    if any(" | " in action for action in actions):
        said.append(
            f"a | b = the formats' actions differ at that turn (in the order {', '.join(formats)}, each "
            "once): a summary made in the background may land a turn apart in one of them"
        )
    wrap = functools.partial(textwrap.wrap, width=LEGEND_WIDTH, subsequent_indent="  ", break_on_hyphens=False)
    return [
        *wrap(
            f"raw, {formats[0]}/raw: the {formats[0]} format's raw tokens and its forwarded / raw (each "
            "format counts its own: TOTALS below)"
        ),
        *wrap("action: " + "; ".join(said)),
        *wrap(f"reloads: the reload rounds the (fake) model ran, per format ({'/'.join(formats)})"),
    ]


def turn_table(runs: list[FormatRun], labels: list[str]) -> str:
    """Turn by turn: the raw tokens (the first format's), the tokens forwarded in each format (the
    proxy's X-Offload-Tokens-Before/-After), the first format's ratio, the action it took (one
    when the formats agree) and the reload rounds the (fake) model ran in each format; then a
    legend of the actions shown."""
    names = [r.format for r in runs]
    first = names[0]
    ratio = f"{first[:9]}/raw"
    header = (
        f"{'turn':>4}  {'the agent had just run':{STEP_WIDTH}} {'raw':>6} "
        + " ".join(f"{n[:9]:>9}" for n in names)
        + f" {ratio:>{len(ratio)}}  {'action':24} reloads"
    )
    rows = [
        "forwarded tokens per format (" + ", ".join(f"{r.format}: POST {r.path}" for r in runs) + ")",
        header,
        "-" * len(header),
    ]
    shown = []
    for k in range(max(len(r.turns) for r in runs)):
        turns = [r.turns[k] if k < len(r.turns) else TurnResult(0) for r in runs]
        before = turns[0].tokens_before or 0
        action = " | ".join(dict.fromkeys(_action(t) for t in turns))
        shown.append(action)
        label = labels[k] if k < len(labels) else ""
        rows.append(
            f"{k + 1:>4}  {_clip(label, STEP_WIDTH):{STEP_WIDTH}} {before:>6} "
            + " ".join(f"{t.tokens_after or 0:>9}" for t in turns)
            + f" {_ratio(turns[0].tokens_after or 0, before):>{len(ratio)}}  {action:24} "
            + "/".join(_reloads(r, k) for r in runs)
        )
    return "\n".join([*rows, *legend(shown, names)])


def totals(run: FormatRun) -> dict[str, Any]:
    before = sum(t.tokens_before or 0 for t in run.turns)
    after = sum(t.tokens_after or 0 for t in run.turns)
    actions = [t.action or "" for t in run.turns]
    known = [r for r in run.reloads if r is not None]
    return {
        "format": run.format,
        "turns": len(run.turns),
        "errors": sum(1 for t in run.turns if t.status != 200),
        "raw": before,
        "forwarded": after,
        "ratio": _ratio(after, before),
        "compacted": sum(1 for a in actions if "compact" in a),
        "compressed": sum(1 for a in actions if "compress" in a and "pending" not in a),
        "reloads": sum(known) if len(known) == len(run.turns) else "?",
    }


def totals_table(runs: list[FormatRun], tenant: dict[str, Any] | None = None) -> str:
    """One row per format, then the sum: the figures the dashboard shows for these sessions; and
    the tenant's totals from the statistics API (`tenant`: its `totals`), when read."""
    header = (
        f"{'TOTALS':10} {'turns':>5} {'errors':>6} {'raw':>9} {'forwarded':>9} {'ratio':>6} {'compacted':>9} "
        f"{'compressed':>10} {'reloads':>7}"
    )
    rows = [header, "-" * len(header)]
    for t in map(totals, runs):
        rows.append(
            f"{t['format']:10} {t['turns']:>5} {t['errors']:>6} {t['raw']:>9} {t['forwarded']:>9} "
            f"{t['ratio']:>6} {t['compacted']:>9} {t['compressed']:>10} {t['reloads']:>7}"
        )
    raw, forwarded = sum(totals(r)["raw"] for r in runs), sum(totals(r)["forwarded"] for r in runs)
    rows += [
        "-" * len(header),
        f"{'all':10} {sum(len(r.turns) for r in runs):>5} {sum(totals(r)['errors'] for r in runs):>6} "
        f"{raw:>9} {forwarded:>9} {_ratio(forwarded, raw):>6}",
    ]
    if tenant:
        summaries = tenant.get("summaries") or {}
        rows.append(
            f"the statistics API: {tenant.get('requests')} requests, {tenant.get('tokens_saved')} tokens "
            f"saved, summaries made {summaries.get('made', 0)} (reused {summaries.get('reused', 0)}), "
            f"reload rounds {tenant.get('reload_rounds')}, prefix reuse {tenant.get('prefix_reuse')}"
        )
    return "\n".join(rows)
