"""What to offload: a pure function of (messages, settings) with no IO.

`plan_compaction` decides which tool results leave the context and what replaces them. It is
deterministic and idempotent: the same input yields the same output, and a planned output
planned again changes nothing (markers and reload results are never offloaded again). Only
the proxy's own markers are exempt, recognised exactly (`markers.is_marker`): a tool result
that merely looks like one is compacted like any other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.markers import INJECTED_TOOLS, is_marker, make_ref, refs_in, tool_result_marker
from proxy.offload_settings import OffloadSettings
from proxy.tokens import TokenCounter

COMPACT_KEEP_RECENT = 1


@dataclass(frozen=True)
class Offload:
    """One piece of content to store under `ref`."""

    ref: str
    kind: str  # "tool_result" | "history"
    text: str
    tokens: int


@dataclass
class Plan:
    messages: list[Any]
    offloads: list[Offload] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)  # every ref in the forwarded messages
    tokens_before: int = 0
    tokens_after: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.offloads)


def text_of(content: Any) -> str | None:
    """The offloadable text of a content: a string, or the text parts of a list joined by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p["text"] for p in content if isinstance(p, dict) and p.get("type") == "text"
                 and isinstance(p.get("text"), str)]
        return "\n".join(texts) if texts else None
    return None


def with_text(content: Any, text: str) -> Any:
    """`content` with its text replaced by `text`; non-text parts stay where they were."""
    if isinstance(content, str):
        return text
    out: list[Any] = []
    placed = False
    for part in content:
        if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
            if not placed:
                out.append({**part, "text": text})
                placed = True
        else:
            out.append(part)
    return out


def injected_call_ids(messages: list[Any]) -> set[str]:
    """Ids of tool calls to the proxy's own reload tools: their results are never offloaded."""
    ids: set[str] = set()
    for m in messages:
        if isinstance(m, dict) and m.get("role") == "assistant":
            for call in m.get("tool_calls") or ():
                if isinstance(call, dict) and (call.get("function") or {}).get("name") in INJECTED_TOOLS:
                    ids.add(call.get("id"))
    return ids


def present_refs(messages: list[Any]) -> list[str]:
    seen: dict[str, None] = {}
    for m in messages:
        text = text_of(m.get("content")) if isinstance(m, dict) else None
        if text:
            for ref in refs_in(text):
                seen.setdefault(ref, None)
    return list(seen)


def plan_compaction(
    messages: list[Any], settings: OffloadSettings, counter: TokenCounter, namespace: str
) -> Plan:
    """Replace every large tool result (outside the recent tail) once the history is too large."""
    before = counter.messages(messages)
    plan = Plan(messages=messages, tokens_before=before, tokens_after=before)
    if settings.mode == "off" or before <= settings.max_total_tokens:
        plan.refs = present_refs(messages)
        return plan

    keep = settings.keep_recent_for(COMPACT_KEEP_RECENT)
    last_eligible = len(messages) - keep
    reload_ids = injected_call_ids(messages)
    out = list(messages)
    after = before
    for i in range(max(0, last_eligible)):
        m = messages[i]
        if not isinstance(m, dict) or m.get("role") != "tool" or m.get("tool_call_id") in reload_ids:
            continue
        text = text_of(m.get("content"))
        if text is None or is_marker(text):
            continue
        tokens = counter.text(text)
        if tokens <= settings.max_tool_message_tokens:
            continue
        ref = make_ref(namespace, "tool_result", text)
        replaced = {**m, "content": with_text(m["content"], tool_result_marker(text, ref, tokens))}
        out[i] = replaced
        after += counter.message(replaced) - counter.message(m)
        plan.offloads.append(Offload(ref, "tool_result", text, tokens))
    plan.messages = out
    plan.tokens_after = after
    plan.refs = present_refs(out)
    return plan
