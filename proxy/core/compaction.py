"""Compaction, pure: which tool results leave the context (`plan_compaction`), the providers' own
context management as the planners must respect it (`ProviderContext`), the values between the
turn and a format's emulation of that management, and the proxy's own compaction tokens (what
an emulated compaction item carries).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.core import jsonio, texts
from proxy.core.fold import plan_folds
from proxy.core.media import plan_media
from proxy.core.preview import CompactionRule
from proxy.core.settings import OffloadSettings
from proxy.core.texts import is_marker, make_ref, refs_in, tool_result_marker
from proxy.core.tokens import TokenCounter
from proxy.core.view import ItemView
from proxy.errors import Failure, Kind

# ==================== provider context
# The providers' own context management, as the planners must respect it. Pure.
#
# Both providers reduce a history server-side: OpenAI Responses with `context_management`
# compaction (and `/responses/compact`, `compaction_trigger`), Anthropic with the
# `context_management` edits (`compact_20260112`, `clear_tool_uses_20250919`, …). Their
# compaction leaves an opaque item (a Responses `compaction` item, a Messages `compaction` block)
# that the client sends back and before which the provider ignores everything. The rules:
#
# - A provider compaction item is opaque: the planners never summarise, compact or cut it off
#   from its place. The items before the newest one are what the provider ignores: they neither
#   count towards the proxy's triggers nor go into a summary; the proxy's own cuts fall after it
#   (`live_start`). A `compaction_trigger` (compact now) stays the last item.
# - When the provider compacts the history itself (`ProviderContext.compacts`), the proxy never
#   compresses it: two summaries of one history would fight. Its compaction still runs (one
#   tool result at a time, each reloadable).
# - When the provider clears old tool results (`clear_tool_uses_20250919`), the proxy compacts
#   only what that edit leaves: the results of the most recent `keep` tool uses and of the
#   `exclude_tools` (`clearable_calls`).
# - A client that compacts by itself (Codex CLI with any provider but OpenAI's: a summarisation
#   turn, then a new history of its initial context, the recent user messages and one user
#   message holding the summary; Claude Code's /compact and auto-compaction likewise) leaves a boundary too, but the upstream reads what precedes
#   it: that part still counts, yet stays verbatim, and the proxy's summaries start after the
#   newest client summary (`client_summary_end`): one summary never folds the client's compacted
#   state together with the work after it.
#
# Each format reads its own request into a `ProviderContext` (`WireFormat.provider_context`) and
# marks its items through `ItemView.is_provider_compaction` / `is_compaction_trigger`.

DEFAULT_KEEP_TOOL_USES = 3  # Anthropic's default `keep` of clear_tool_uses_20250919
# How a client's own compaction summary begins: Codex CLI's (codex-rs/core/templates/compact/
# summary_prefix.md, its first sentence; the summary follows the whole template and a newline),
# Claude Code's after /compact or its auto-compaction (the first sentence, as its CLI writes it).
CLIENT_SUMMARY_PREFIXES = (
    "Another language model started to solve this problem and produced a summary of its thinking process.",
    "This session is being continued from a previous conversation that ran out of context.",
)


@dataclass(frozen=True)
class ProviderContext:
    """What the request asks the provider to do with its context."""

    compacts: bool = False  # the provider summarises this history itself: no compression by the proxy
    trigger: bool = False  # the input ends with a compaction_trigger: it must stay last (nothing appended)
    clears_tool_results: bool = False  # an edit clears older tool results (clear_tool_uses_20250919)
    keep_tool_uses: int = DEFAULT_KEEP_TOOL_USES  # ...all but the results of this many recent tool uses
    exclude_tools: frozenset[str] = frozenset()  # ...and of these tools

    @property
    def active(self) -> bool:
        return self.compacts or self.trigger or self.clears_tool_results


NONE = ProviderContext()


def live_start(items: list[Any], view: ItemView) -> int:
    """The index after the newest provider compaction item (0 without one): what the provider
    reads of the history starts there, the compaction item standing for all before it."""
    for i in range(len(items) - 1, -1, -1):
        if view.is_provider_compaction(items[i]):
            return i + 1
    return 0


def client_summary_end(items: list[Any], view: ItemView, start: int = 0) -> int:
    """The index after the newest client compaction summary in items[start:] (a user message
    whose text begins with one of CLIENT_SUMMARY_PREFIXES), else `start`."""
    for i in range(len(items) - 1, start - 1, -1):
        if view.role(items[i]) == "user" and (view.text(items[i]) or "").startswith(CLIENT_SUMMARY_PREFIXES):
            return i + 1
    return start


def trigger_index(items: list[Any], view: ItemView) -> int | None:
    """The index of the `compaction_trigger` item that ends `items`, if one does (the API
    refuses one anywhere else)."""
    return len(items) - 1 if items and view.is_compaction_trigger(items[-1]) else None


def clearable_calls(items: list[Any], view: ItemView, provider: ProviderContext, *, start: int = 0) -> set[str]:
    """The ids of the calls (in items[start:]) whose results the provider's clear edit may clear:
    all but the `keep_tool_uses` most recent calls and the calls of `exclude_tools`. Empty when
    the request carries no such edit."""
    if not provider.clears_tool_results:
        return set()
    calls: list[str] = []
    excluded: set[str] = set()
    for item in items[start:]:
        ids = view.calls(item)
        names = [name for name, _ in view.call_details(item)]
        for k, call_id in enumerate(ids):
            calls.append(call_id)
            if k < len(names) and names[k] in provider.exclude_tools:
                excluded.add(call_id)
    kept = set(calls[len(calls) - provider.keep_tool_uses :]) if provider.keep_tool_uses > 0 else set()
    return {c for c in calls if c not in kept and c not in excluded}


# ==================== the compaction plan
# Compaction: which tool results leave the context, as a pure function of (items, settings).
#
# Deterministic and idempotent: the same input yields the same output, and a planned output
# planned again changes nothing (the proxy's own markers and the results of its reload tools
# are never offloaded again). Works on any wire format's history through its `ItemView`.

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
    (`proxy.core.preview`).

    Only the items after the newest provider compaction item count and are replaced (the
    provider ignores those before it, which go as sent), and no tool result the provider's own
    clear edit may clear (`clearable_calls`)."""
    counter.recall(items, key=namespace)  # what an earlier turn of the conversation counted
    before = counter.messages(items)
    counter.remember(items, key=namespace)
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


# ==================== compaction token
# The proxy's own compaction tokens: what an emulated compaction item carries. Pure.
#
# When the proxy emulates the providers' compaction (`POST /v1/responses/compact`, Responses
# `context_management`), the `compaction` item it answers holds, as `encrypted_content`, a token
# of its own instead of the provider's encrypted state:
#
#     offload-compaction-v1:<base64url(record id (16 bytes) + tag (16 bytes))>
#
# The record id names the stored items the token stands for (the summary with its `ref=`, and
# what the compaction kept), in the namespace that made it; the tag is an HMAC of the version, the
# namespace, the id and the API whose items the record holds (Responses items, or Messages
# messages: a token moved from one API's compaction into the other's is refused, not read as the
# other's history), keyed by the server's names key (`--namespace-key`, else `--encryption-key`) when there is one. A
# token is therefore bound to its namespace twice: another credential's tag does not verify, and
# its record is not in the other's store. The token holds no content: the content stays in the
# store, reloadable and encrypted at rest like every offload. The version lets a later format
# recognise and refuse (or read) older tokens.
#
# Only the canonical spelling is read: the prefix, then exactly 43 characters of the URL-safe
# base64 alphabet, no padding, no whitespace, the unused low bits zero (the spelling `make_token`
# writes). Anything else that claims to be ours (any case, around whitespace) is refused, never
# read leniently nor passed on as someone else's.
#
# Where a token is one: as the value of an `encrypted_content` field (a Responses item, a Messages
# block, at any depth: `sealed_fields`). The same characters inside text (a message, a tool
# output) are content like any other and are never read.

PREFIX = "offload-compaction-v1:"
ANY_VERSION = "offload-compaction-v"  # what a token of ours starts with, whatever its version
ID_BYTES = TAG_BYTES = 16
MAX_TOKEN_CHARS = 256  # ours are 66 characters; a longer "token" is nothing to look up
BODY_CHARS = 43  # base64url of ID_BYTES + TAG_BYTES, unpadded
_CANONICAL = re.compile(r"[A-Za-z0-9_-]{%d}" % BODY_CHARS)
SEALED_FIELD = "encrypted_content"  # the field a compaction item (block) carries its state in
_SEALED_KEY = f'"{SEALED_FIELD}"'.encode()
APIS = ("responses", "messages")  # whose items a record holds (Responses input items, Messages messages)


class TokenError(Failure, ValueError):
    """A token of ours that this namespace may not use: malformed, of another namespace, or of
    a version this proxy does not read."""

    kind = Kind.UNPROCESSABLE


def _tag_key(secret: str | None) -> bytes:
    return hashlib.sha256(b"offload-proxy/compaction-token/v1\0" + (secret or "").encode()).digest()


def _tag(record_id: bytes, namespace: str, secret: str | None, *, api: str) -> bytes:
    material = b"v1\0" + namespace.encode() + b"\0" + record_id
    if api != "responses":  # the Responses tokens' tag as first issued
        material += b"\0" + api.encode()
    return hmac.new(_tag_key(secret), material, hashlib.sha256).digest()[:TAG_BYTES]


def record_id_for(namespace: str, content: bytes) -> bytes:
    """The id of a record: the same content in the same namespace always gives the same token
    (a repeated compaction of the same history answers the same bytes)."""
    return hashlib.sha256(b"offload-compaction-record\0" + namespace.encode() + b"\0" + content).digest()[:ID_BYTES]


def make_token(record_id: bytes, namespace: str, secret: str | None = None, *, api: str = "responses") -> str:
    raw = record_id + _tag(record_id, namespace, secret, api=api)
    return PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def is_ours(value: object) -> bool:
    """Does `value` (an `encrypted_content`) claim to be one of the proxy's tokens, in any
    spelling (case, surrounding whitespace)? Such a value is read (`read_token`) or refused,
    never forwarded: a provider's encrypted state never holds these characters."""
    return isinstance(value, str) and (ANY_VERSION in value or ANY_VERSION in value[:MAX_TOKEN_CHARS].lower())


def may_hold_token(text: bytes) -> bool:
    """Could a JSON document (its bytes, escapes undone) hold a token of ours where one counts?
    Only if it has an `encrypted_content` key (a fast test, about 6 ms for 20 MB, before
    `sealed_fields` walks it). A token elsewhere is text, never read."""
    return jsonio.contains(text, _SEALED_KEY)


def may_spell_token(raw: bytes) -> bool:
    """`may_hold_token` on bytes as they came, escapes not undone: a body that escapes a
    printable ASCII character (`\\u0020` to `\\u007f`) may spell the key otherwise, so it is read
    too. Escapes of other characters (`\\u00e9`, `\\u4e2d`: what `ensure_ascii` writes) cannot."""
    return may_hold_token(raw) or jsonio.escapes_ascii(raw)


_FOUND = object()  # sealed_fields' mark of a token found in an array
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _field_path(at: str, key: str) -> str:
    """`at.key`, or `at["key"]` (JSON-quoted) for a key that is no plain name: a key spelled
    `input[1]` must not name the path of `input`'s second item (whose compaction position its
    caller would then accept)."""
    if _NAME.fullmatch(key):
        return f"{at}.{key}" if at else key
    return f"{at}[{json.dumps(key)}]"


def sealed_fields(value: Any, path: str = "") -> Iterator[str]:
    """The paths (`input[3].encrypted_content`, `messages[0].content[1].encrypted_content`) of the
    `encrypted_content` fields holding a token of ours in `value`, at any depth (iterative: a
    deep document costs no recursion). An `encrypted_content` that is an array or an object
    holding one (`["offload-compaction-v1:…"]`) names the string's own path inside it
    (`input[0].encrypted_content[0]`): no compaction position, and never forwarded."""
    stack: list[tuple[Any, str, bool]] = [(value, path, False)]
    while stack:
        node, at, sealed = stack.pop()  # sealed: inside the value of an `encrypted_content`
        if type(node) is dict:
            for k, v in node.items():
                here = _field_path(at, k)
                if (k == SEALED_FIELD or sealed) and is_ours(v):
                    yield here
                elif type(v) is dict or type(v) is list:
                    stack.append((v, here, sealed or k == SEALED_FIELD))
        elif type(node) is list:
            for i in range(len(node) - 1, -1, -1):
                v = node[i]
                if sealed and is_ours(v):
                    stack.append((_FOUND, f"{at}[{i}]", True))  # yielded in its turn: document order
                elif type(v) is dict or type(v) is list:
                    stack.append((v, f"{at}[{i}]", sealed))
        elif node is _FOUND:
            yield at


def read_token(token: str, namespace: str, secret: str | None = None, *, api: str = "responses") -> str:
    """The record id (hex) a token of ours names; TokenError when it may not be used here (by
    this namespace, in this API's requests)."""
    if not token.startswith(PREFIX):
        if token.startswith(ANY_VERSION):
            raise TokenError("it is a compaction token of a version this proxy does not read")
        raise TokenError("it is not a compaction token this proxy issued (not its exact spelling)")
    body = token[len(PREFIX) :]
    if not _CANONICAL.fullmatch(body):
        raise TokenError("it is not a compaction token this proxy issued (not its exact spelling)")
    try:
        raw = base64.urlsafe_b64decode(body + "=")
    except (binascii.Error, ValueError):
        raise TokenError("it is not a compaction token this proxy issued") from None
    if len(raw) != ID_BYTES + TAG_BYTES or base64.urlsafe_b64encode(raw).decode().rstrip("=") != body:
        raise TokenError("it is not a compaction token this proxy issued (not its exact spelling)")
    record_id, tag = raw[:ID_BYTES], raw[ID_BYTES:]
    if not hmac.compare_digest(tag, _tag(record_id, namespace, secret, api=api)):
        if any(
            hmac.compare_digest(tag, _tag(record_id, namespace, secret, api=other)) for other in APIS if other != api
        ):
            raise TokenError(
                "it was made for another API's requests (a compaction of the Responses API and one "
                "of the Messages API do not stand for the same kind of history)"
            )
        raise TokenError("it was not issued to this credential (or tenant)")
    return record_id.hex()


# ==================== provider emulation
# The values between the turn and a format's emulation of its provider's context management
# (`proxy.core.wire.ProviderCompaction`, `ClearingEdits`). Pure.
#
# The turn (`proxy.turn._context_management`, `proxy.turn._context_management`, `proxy.turn._context_management`) does the
# format-neutral steps (the stores, the summariser, the plan); each format reads its own request
# into these values and writes its own answer from them.

# What X-Offload-Action gains when the proxy applied the provider's context management itself
# (alone, or after a `+`: `Prepared.with_action`); the statistics count them apart.
COMPACTION_ACTION = "emulated-compaction"
EDITS_ACTION = "context-edits"


@dataclass(frozen=True)
class Threshold:
    """A threshold compaction the request asks for."""

    tokens: int | None  # compact when the forwarded input holds more tokens; None: the proxy's own trigger
    pause: bool = False  # Messages `pause_after_compaction`: answer the compaction alone, no turn
    instructions: str | None = None  # Messages `instructions`: replaces the summariser's instruction


class Records(Protocol):
    """What a format reads of the compaction records (`proxy.offload.records`)."""

    async def stands_for(self, token: str) -> list[Any]: ...


@dataclass(frozen=True)
class Expanded:
    """A request with the proxy's compaction tokens replaced by what they stand for."""

    body: dict[str, Any]  # the body as it goes on
    items: list[Any]  # its history as it goes on
    checked: Any  # what no token may be left in any more (the part the records brought)
    where: str  # the path of `checked` in the body, as an error names it


@dataclass
class Edited:
    """The history after a format's clearing edits."""

    items: list[Any]
    applied: list[dict[str, Any]] = field(default_factory=list)  # `applied_edits`, in the order applied
    offloads: list[Offload] = field(default_factory=list)  # what the markers stand for: to store
    cleared_tokens: int = 0  # input tokens all the edits freed
