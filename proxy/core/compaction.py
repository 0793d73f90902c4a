"""Compaction: which tool results leave the context, as a pure function of (items, settings).

Deterministic and idempotent: the same input yields the same output, and a planned output
planned again changes nothing (the proxy's own markers and the results of its reload tools
are never offloaded again). Works on any wire format's history through its `ItemView`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.core import texts
from proxy.core.compaction_rule import CompactionRule
from proxy.core.fold import plan_folds
from proxy.core.markers import is_marker, make_ref, refs_in, tool_result_marker
from proxy.core.media import plan_media
from proxy.core.provider_context import NONE, ProviderContext, clearable_calls, live_start
from proxy.core.settings import OffloadSettings
from proxy.core.tokens import TokenCounter
from proxy.core.view import ItemView

COMPACT_KEEP_RECENT = 1


@dataclass(frozen=True)
class Offload:
    """One piece of content to store under `ref`."""

    ref: str
    kind: str  # "tool_result" | "history" | "image" | "document" | "audio" (`proxy.core.media`)
    text: str
    tokens: int


@dataclass
class Plan:
    items: list[Any]  # the history as it is forwarded
    offloads: list[Offload] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)  # every ref in the forwarded items
    tokens_before: int = 0
    tokens_after: int = 0
    media_tokens_saved: int = 0  # of tokens_before - tokens_after, what offloading images and documents saved
    folded: int = 0  # tool results forwarded as a pointer to an earlier one (`proxy.core.fold`)
    # index of a folded item → (the index of its base, the item as forwarded without the fold):
    # what `proxy.core.compression.assemble` restores when a summary hides the base
    unfold: dict[int, tuple[int, Any]] = field(default_factory=dict)


def injected_call_ids(items: list[Any], view: ItemView) -> set[str]:
    """Ids of calls to the proxy's own reload tools: their results are never offloaded."""
    ids: set[str] = set()
    for item in items:
        ids.update(view.injected_calls(item))
    return ids


def present_refs(items: list[Any], view: ItemView) -> list[str]:
    """The references the proxy's markers in `items` carry, in order of appearance."""
    seen: dict[str, None] = {}
    for item in items:
        text = view.text(item)
        if text:
            for ref in refs_in(text) or fold_refs(text) or texts.media_refs_in(text):
                seen.setdefault(ref, None)
    return list(seen)


def fold_refs(text: str) -> list[str]:
    ref = texts.fold_ref(text)
    return [ref] if ref else []


def plan_compaction(
    items: list[Any],
    view: ItemView,
    settings: OffloadSettings,
    *,
    counter: TokenCounter,
    namespace: str,
    provider: ProviderContext = NONE,
    compact: bool = True,
) -> Plan:
    """Replace the older images and large documents (`proxy.core.media`, whatever the history's
    size, unless the mode is off), then, when `compact` and the history is too large, every
    large tool result outside the recent tail and every very large one inside it
    (`proxy.core.compaction_rule`).

    Only the items after the newest provider compaction item count and are replaced (the
    provider ignores those before it, which go as sent), and no tool result the provider's own
    clear edit may clear (`proxy.core.provider_context`)."""
    before = counter.messages(items)
    plan = Plan(items=items, tokens_before=before, tokens_after=before)
    start = live_start(items, view)
    media = plan_media(items[start:], view, settings, counter=counter, namespace=namespace)
    if media.offloads:
        plan.offloads = [Offload(o.ref, o.kind, o.text, o.tokens) for o in media.offloads]
        plan.tokens_after = before + sum(
            counter.message(new) - counter.message(old)
            for new, old in zip(media.items, items[start:])
            if new is not old
        )
        items = plan.items = [*items[:start], *media.items]
        plan.media_tokens_saved = before - plan.tokens_after
    reload_ids = injected_call_ids(items, view)
    rule = CompactionRule.of(settings, keep_recent=COMPACT_KEEP_RECENT)
    if settings.mode != "off" and settings.fold:
        _fold(
            plan,
            view,
            counter=counter,
            namespace=namespace,
            start=start,
            reload_ids=reload_ids,
            rule=rule if compact else None,
        )
        items = plan.items
    live = plan.tokens_after if start == 0 else counter.messages(items[start:])
    if settings.mode == "off" or not compact or live <= settings.max_total_tokens:
        plan.refs = present_refs(items, view)
        return plan
    left_to_provider = clearable_calls(items, view, provider, start=start)
    out = list(items)
    after = plan.tokens_after
    for i in range(start, len(items)):
        base, unfolded = plan.unfold.get(i, (-1, None))
        item = items[i] if unfolded is None else unfolded  # a fold: what it would be without it
        # Whatever carries a tool's result: a tool message, or an item holding its own result
        # (a Responses `mcp_call`, whose call fields stay as they are); not what the provider clears.
        if left_to_provider and view.answers(item) in left_to_provider:
            continue
        text = view.tool_text(item)
        if text is None or is_marker(text) or texts.fold_ref(text) or view.answers(item) in reload_ids:
            continue
        tokens = counter.text(text)
        if not rule.replaces(tokens, index=i, length=len(items), total=live):
            continue
        ref = make_ref(namespace, "tool_result", text)
        replaced = view.with_tool_text(item, tool_result_marker(text, ref, tokens))
        if unfolded is not None:
            plan.unfold[i] = (base, replaced)  # the same ref as the fold's, the same content stored
            continue
        out[i] = replaced
        after += counter.message(replaced) - counter.message(item)
        plan.offloads.append(Offload(ref, "tool_result", text, tokens))
    plan.items = out
    plan.tokens_after = after
    plan.refs = present_refs(out, view)
    return plan


def _fold(
    plan: Plan,
    view: ItemView,
    *,
    counter: TokenCounter,
    namespace: str,
    start: int,
    reload_ids: set[str],
    rule: CompactionRule | None,
) -> None:
    """Fold the tool results that repeat an earlier one (`proxy.core.fold`), whatever the
    history's size: on the turn they arrive, so never a rewrite of what was forwarded before."""
    folds = plan_folds(
        plan.items, view, namespace=namespace, counter=counter, compaction=rule, start=start, skip_calls=reload_ids
    )
    if not folds:
        return
    out = list(plan.items)
    for i, fold in folds.items():
        out[i] = view.with_tool_text(plan.items[i], fold.text)
        plan.unfold[i] = (fold.base, plan.items[i])
        plan.tokens_after += counter.message(out[i]) - counter.message(plan.items[i])
        plan.offloads.append(Offload(fold.ref, "tool_result", fold.original, counter.text(fold.original)))
    plan.items = out
    plan.folded = len(folds)
