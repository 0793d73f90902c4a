"""Every text the model sees that the proxy writes, in one place, with the exact patterns that
recognise the proxy's own texts again.

The markers that stand for offloaded content (a pure function of content, ref and size, so the
prompt cache keeps hitting; recognised exactly, never by prefix), then the injected tools'
schemas, what the tools answer, the summariser's prompt and the index of a summarised part.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

from proxy.core.preview import MAX_CHARS as PREVIEW_CHARS
from proxy.core.preview import MAX_LINES as PREVIEW_LINES
from proxy.core.preview import preview

# ==================== markers
# The text the model sees in place of offloaded content, and how to recognise it again.
#
# Replacement text is a pure function of (content, ref, token count): the same message always
# becomes the same bytes, so the provider's prompt cache keeps hitting turn after turn.
#
# Recognition is exact, never a prefix test: a tool result that merely starts like a marker
# (`[offloaded …`) is ordinary content and is compacted like any other. A tool-result marker is
# recognised by its whole shape: the first line, a preview within the bounds `proxy.core.preview`
# keeps (lines and characters), and the proxy's own trailer line naming the same ref. Anything
# recognised is therefore small.

MARKER_PREFIX = "[offloaded "
REF_PATTERN = r"[A-Za-z0-9_-]{6,64}"
REF_RE = re.compile(rf"ref=({REF_PATTERN})")
RELOAD_TOOL = "context_reload"
SEARCH_TOOL = "context_search"
INJECTED_TOOLS = frozenset({RELOAD_TOOL, SEARCH_TOOL})

_TOOL_HEAD = re.compile(rf"\[offloaded tool result: (?:0|[1-9][0-9]{{0,11}}) tokens, ref=({REF_PATTERN})\]")
_COUNT = r"(?:0|[1-9][0-9]{0,11})"
_TOOL_TRAILER = re.compile(
    rf"\[… ({_COUNT}) of ({_COUNT}) lines not shown \({_COUNT} chars in all\)\. "
    rf"The full text: {RELOAD_TOOL}\(ref=\"({REF_PATTERN})\"\); "
    rf"search it: {SEARCH_TOOL}\(pattern, ref=\"({REF_PATTERN})\"\)\.\]"
)
_HISTORY_HEAD = re.compile(
    rf"\[offloaded history: (?:0|[1-9][0-9]{{0,11}}) earlier messages \((?:0|[1-9][0-9]{{0,11}}) tokens\) "
    rf"summarised, ref=({REF_PATTERN})\. {RELOAD_TOOL}\(ref=\"({REF_PATTERN})\"\) returns them as JSON lines; "
    rf"{SEARCH_TOOL}\(pattern, ref=\"({REF_PATTERN})\"\) searches them\.\]"
)


def make_ref(namespace: str, kind: str, content: str) -> str:
    """Content-addressed and tenant-keyed: equal content in one tenant → equal ref, always."""
    digest = hashlib.blake2b(
        content.encode("utf-8", "surrogatepass"), digest_size=12, key=namespace.encode()[:64], person=kind.encode()[:16]
    ).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def tool_result_marker(text: str, ref: str, tokens: int) -> str:
    """The head line, the preview (`proxy.core.preview`), the trailer: sizes and how to get the rest."""
    shown = preview(text)
    return (
        f"{MARKER_PREFIX}tool result: {tokens} tokens, ref={ref}]\n"
        f"{shown.body}\n"
        f"[… {shown.hidden} of {shown.lines} lines not shown ({shown.chars} chars in all). "
        f'The full text: {RELOAD_TOOL}(ref="{ref}"); '
        f'search it: {SEARCH_TOOL}(pattern, ref="{ref}").]'
    )


def history_marker(ref: str, count: int, tokens: int) -> str:
    """The first line of a compression summary message; the summary text follows it."""
    return (
        f"{MARKER_PREFIX}history: {count} earlier messages ({tokens} tokens) summarised, ref={ref}. "
        f'{RELOAD_TOOL}(ref="{ref}") returns them as JSON lines; '
        f'{SEARCH_TOOL}(pattern, ref="{ref}") searches them.]'
    )


def tool_result_ref(text: str) -> str | None:
    """The ref of a tool-result marker made by `tool_result_marker`, else None."""
    if not text.startswith(MARKER_PREFIX):
        return None  # the common case, decided without a scan
    first, _, rest = text.partition("\n")
    head = _TOOL_HEAD.fullmatch(first)
    body, newline, last = rest.rpartition("\n")
    if head is None or not newline or len(body) > PREVIEW_CHARS or body.count("\n") >= PREVIEW_LINES:
        return None
    trailer = _TOOL_TRAILER.fullmatch(last)
    ref = head.group(1)
    if trailer is None or trailer.group(3) != ref or trailer.group(4) != ref:
        return None
    if int(trailer.group(1)) > int(trailer.group(2)):
        return None  # more lines hidden than the text has: not the proxy's
    return ref


def history_ref(text: str) -> str | None:
    """The ref of a compression summary message's text (its first line), else None."""
    if not text.startswith(MARKER_PREFIX):
        return None
    match = _HISTORY_HEAD.fullmatch(text.partition("\n")[0])
    if match is None or not match.group(1) == match.group(2) == match.group(3):
        return None
    return match.group(1)


def is_marker(text: str) -> bool:
    """Is `text` exactly a tool-result marker of the proxy's own (exempt from compaction)?"""
    return tool_result_ref(text) is not None


def refs_in(text: str) -> list[str]:
    """The reference a proxy marker carries (tool result or history summary); [] for anything else."""
    ref = tool_result_ref(text) or history_ref(text)
    return [ref] if ref else []


# ==================== tool schemas, tool answers, prompts
# Every text the model sees that the proxy writes, in one place.
#
# The markers that stand for offloaded content are above (the few words of their previews
# in `proxy.core.preview`), beside the exact patterns that recognise them again; everything
# else is here: the injected tools' schemas, what the tools answer, the summariser's
# prompt, and the index of a summarised part. Changing a text here changes what models read.

# The tools the proxy injects and runs itself, chat-style (each format converts them).
RELOAD_TOOL_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": RELOAD_TOOL,
            "description": (
                "Return offloaded context by its reference (the ref=... in an '[offloaded ...]' "
                "marker): the full original text, or one page of its lines when it is large; "
                "an offloaded image or document is given back as itself."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "ref": {"type": "string", "description": "The reference, e.g. from ref=AbC123."},
                    "offset": {"type": "integer", "minimum": 0, "description": "First line (0-based)."},
                    "limit": {"type": "integer", "minimum": 1, "description": "Number of lines."},
                },
                "required": ["ref"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": SEARCH_TOOL,
            "description": (
                "Search offloaded context with a case-insensitive regular expression. Returns "
                "matching lines with their ref and line number. Searches one ref, or all of them."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "A regular expression."},
                    "ref": {"type": "string", "description": "Limit the search to this reference."},
                },
                "required": ["pattern"],
            },
        },
    },
]


SUMMARY_PROMPT = """You compress the history of an AI agent's work into a dense state snapshot that \
replaces that history in the agent's context. The agent will continue from your snapshot alone.

Write exactly one <state_snapshot> block with these sections:
<task_overview>the user's goal and requirements, constraints and success criteria</task_overview>
<current_state>what has been done and what holds now: files changed, commands run, results</current_state>
<important_discoveries>facts learned, decisions and why, errors met and how they were solved</important_discoveries>
<next_steps>what remains, in order</next_steps>
<context_to_preserve>anything else the agent must not lose</context_to_preserve>

Rules: keep file paths, identifiers, commands, numbers, URLs and error messages verbatim. Make \
every reference self-contained (no "the file above"). Be dense; omit pleasantries. When a \
previous snapshot is given, update it with the new messages: keep what still holds, correct \
what changed, add what is new."""

# The summary asked for at the end of the conversation itself (`--summary-request prefix`): the
# same tools and messages as the turns (a provider's prompt cache serves them), then this message.
SUMMARY_INSTRUCTION = """Stop here: do not answer the conversation above and do not call any tool. \
The history above is about to be replaced in your context by a dense state snapshot, and you will \
continue from that snapshot alone. Write it now.

Write exactly one <state_snapshot> block, covering everything above this message, with these sections:
<task_overview>the user's goal and requirements, constraints and success criteria</task_overview>
<current_state>what has been done and what holds now: files changed, commands run, results</current_state>
<important_discoveries>facts learned, decisions and why, errors met and how they were solved</important_discoveries>
<next_steps>what remains, in order</next_steps>
<context_to_preserve>anything else you must not lose</context_to_preserve>

Rules: keep file paths, identifiers, commands, numbers, URLs and error messages verbatim. Make \
every reference self-contained (no "the file above"). Be dense; omit pleasantries. When the history \
starts with an earlier snapshot (a message marked "[offloaded history: ...]"), fold it in: keep what \
still holds, correct what changed, add what is new. Answer with the block only."""


# ---------------------------------------------------------------- folded tool results

# A tool result that repeats an earlier one (`proxy.core.fold`) goes as a pointer to it: identical,
# or that result with a unified diff (its hunks only). The full text stays reloadable by its ref.
FOLD_PREFIX = "[folded tool result: "
FOLD_MAX_CHARS = 4_000  # a fold is never longer (`proxy.core.fold` makes none longer): recognised only within it
CALL_ID_PATTERN = r"[A-Za-z0-9_.:-]{1,128}"  # the calls a fold may name (any other: not a base)
FOLD_HEAD_RE = re.compile(
    rf"\[folded tool result: (?:identical to the result of call ({CALL_ID_PATTERN}) above \({_COUNT} chars\)"
    rf"|the result of call ({CALL_ID_PATTERN}) above with these changes \(unified diff: - that result, "
    rf"\+ this one; {_COUNT} chars in all\)), ref=({REF_PATTERN})\. "
    rf"The full text: {RELOAD_TOOL}\(ref=\"({REF_PATTERN})\"\)\.\]"
)


def folded_identical(call_id: str, chars: int, *, ref: str) -> str:
    """A tool result identical to the result of `call_id`, earlier in the conversation."""
    return (
        f"{FOLD_PREFIX}identical to the result of call {call_id} above ({chars} chars), ref={ref}. "
        f'The full text: {RELOAD_TOOL}(ref="{ref}").]'
    )


def folded_diff(call_id: str, chars: int, hunks: str, *, ref: str) -> str:
    """A tool result that is the result of `call_id` with a few lines changed: `hunks`, the
    unified diff's hunks (`@@ … @@` headers, ` `/`-`/`+` lines) from that result to this one."""
    return (
        f"{FOLD_PREFIX}the result of call {call_id} above with these changes (unified diff: - that result, "
        f'+ this one; {chars} chars in all), ref={ref}. The full text: {RELOAD_TOOL}(ref="{ref}").]\n{hunks}'
    )


def fold_ref(text: str) -> str | None:
    """The ref of a text that is exactly a fold of the proxy's (`folded_identical`, `folded_diff`),
    else None. Bounded: nothing longer than FOLD_MAX_CHARS is one."""
    if not text.startswith(FOLD_PREFIX) or len(text) > FOLD_MAX_CHARS:
        return None
    first, newline, rest = text.partition("\n")
    match = FOLD_HEAD_RE.fullmatch(first)
    if match is None or match.group(3) != match.group(4):
        return None
    if match.group(1) is not None:
        return match.group(3) if not newline else None
    return match.group(3) if rest.startswith("@@ ") else None


# ---------------------------------------------------------------- offloaded images and documents

MEDIA_KINDS = ("image", "document", "audio")
# `media_marker`'s text, exactly (a text part of its own: recognised only when it is the whole part).
MEDIA_MARKER_RE = re.compile(
    rf"\[(image|document|audio) offloaded: [^\]\n]{{1,80}}, ~(?:0|[1-9][0-9]{{0,2}}(?:,[0-9]{{3}}){{0,4}}) tokens, "
    rf"ref=({REF_PATTERN})\]"
)


def media_marker(kind: str, what: str, tokens: int, *, ref: str) -> str:
    """What stands in place of an offloaded image, document or audio part, e.g.
    `[image offloaded: png 1280×800, ~1,105 tokens, ref=…]`: the same bytes, the same text."""
    return f"[{kind} offloaded: {what}, ~{tokens:,} tokens, ref={ref}]"


def media_ref(text: str) -> str | None:
    """The ref of a text that is exactly a `media_marker`, else None."""
    if not text.startswith("[") or len(text) > 200:
        return None
    match = MEDIA_MARKER_RE.fullmatch(text)
    return match.group(2) if match else None


def media_refs_in(text: str) -> list[str]:
    """The refs of the lines of `text` that are exactly media markers (a content's text parts are
    joined by newlines: a marker is one of them)."""
    if " offloaded: " not in text:
        return []
    return [ref for line in text.split("\n") if (ref := media_ref(line))]


def media_follows(kind: str, ref: str) -> str:
    """Chat's answer to a reload of an image ref (a tool message carries text only)."""
    return f"The {kind} of ref={ref} follows in the next message."


def media_reloaded(kind: str, ref: str) -> str:
    """The text before a reloaded image in chat's user message."""
    return f'[{RELOAD_TOOL}(ref="{ref}"): the offloaded {kind}]'


def media_not_here(kind: str, ref: str) -> str:
    """A reload of a kind of content the format cannot carry back (audio in a tool result)."""
    return f"ref={ref} is an offloaded {kind}; this API cannot show it again in a tool result."


def media_carried(kind: str, ref: str) -> str:
    """An injected reload left unanswered in a round the client must finish: no binary there."""
    return f"ref={ref} is an offloaded {kind}; reload it again to see it."


def media_not_searchable(ref: str, kind: str) -> str:
    return f'ref={ref} is an offloaded {kind}: binary content is not searched. {RELOAD_TOOL}(ref="{ref}") shows it.'


def media_skipped(count: int) -> str:
    return f"[{count} offloaded image(s)/document(s) skipped: binary content is not searched.]"


# ---------------------------------------------------------------- what the reload tools answer


def unknown_tool(name: str) -> str:
    return f"Unknown tool {name}."


def invalid_arguments(name: str, why: object) -> str:
    return f"Invalid arguments for {name}: {why}."


def arguments_too_deep(limit: int) -> str:
    """Why arguments are refused that nest past `limit` levels (completes `invalid_arguments`)."""
    return f'arguments nest deeper than {limit} levels; these tools take a flat JSON object such as {{"ref": "…"}}'


def input_not_repeated() -> str:
    """Stands in a history for a tool call's input nested too deeply to send back upstream."""
    return "(arguments nested too deeply to repeat here)"


def too_many_calls(limit: int) -> str:
    return f"Not run: at most {limit} calls to the context tools are run per turn. Ask for fewer at a time."


def store_unavailable() -> str:
    return "The offloaded content is temporarily unavailable (store unreachable). Try again later."


def tool_failed(name: str) -> str:
    return f"{name} failed with an internal error; the content may be retrieved another way."


def unavailable(ref: str) -> str:
    return f"Reference ref={ref} is not available: unknown, expired, or not offloaded under this credential."


def past_the_end(ref: str, lines: int, offset: int) -> str:
    return f"ref={ref} has {lines} lines; offset {offset} is past the end."


def page_note(ref: str, start: int, end: int, *, lines: int) -> str:
    """The last line of a page of `context_reload`: where it stands, and how to get the next."""
    if end >= lines:
        return f"[{RELOAD_TOOL}: lines {start}-{end - 1} of {lines} of ref={ref}; this is the end.]"
    return (
        f"[{RELOAD_TOOL}: lines {start}-{end - 1} of {lines} of ref={ref}. "
        f'Next page: {RELOAD_TOOL}(ref="{ref}", offset={end}).]'
    )


def invalid_pattern(pattern: str, error: object) -> str:
    return f"Invalid regular expression {pattern!r}: {error}"


def search_interrupted() -> str:
    return "The search was interrupted: the proxy is shutting down."


def too_expensive(pattern: str, why: str) -> str:
    return (
        f"The pattern {pattern!r} is too expensive: {why}. Use a simpler pattern "
        f"(fewer or smaller counted repeats x{{n}}, less nesting)."
    )


def no_match_so_far(pattern: str) -> str:
    return f"No match for {pattern!r} so far."


def no_match(pattern: str, where: str) -> str:
    return f"No match for {pattern!r} in {where}."


def stopped_at_time(took: float, limit: str, waited: str, *, found: int, searched: int, total: int) -> str:
    return (
        f"[Search stopped early after {took:.1f} s ({limit}{waited}); {found} match(es) "
        f"found after looking into {searched} of {total} item(s). "
        f"Use a simpler pattern, or give a ref.]"
    )


def stopped_expensive(found: int, searched: int, total: int) -> str:
    return (
        f"[Search stopped early: the pattern was too expensive (matching it needed more memory "
        f"than a search may use, or crashed the search worker); {found} match(es) "
        f"found after looking into {searched} of {total} item(s). Use a simpler pattern.]"
    )


def interrupted_note(found: int) -> str:
    return f"[Search interrupted: the proxy is shutting down; {found} match(es) found.]"


def stopped_at_size(max_bytes: int) -> str:
    return (
        f"[Search stopped early: one search scans at most {max_bytes} bytes of "
        f"offloaded content, and the rest was not searched. Give a ref to search one item.]"
    )


def more_matches(found: int) -> str:
    return f"[{found} matches shown; more exist. Narrow the pattern or give a ref.]"


# ---------------------------------------------------------------- the index of a summarised part
# (proxy.core.summary_index): placed between a history summary's marker line and its snapshot.

INDEX_OPEN = "<index>"
INDEX_CLOSE = "</index>"
INDEX_FILES = "files read or edited (@offset in the ref:lines shown): "
INDEX_COMMANDS = "commands run: "
INDEX_ERRORS = "errors seen: "


def index_more(count: int) -> str:
    """Ends an index line whose entries did not all fit."""
    return f"+{count} more"


# ------------------------------------------- `replay --compare`'s baselines (proxy.replay._compare)
# Not the proxy's own behaviour: what the simple strategies it is compared with would send.

MASKED_TOOL_RESULT = "[Old tool output omitted for brevity.]"  # observation masking's placeholder


# ------------------------------------------------- Anthropic's clear_tool_uses edit, emulated
# (`proxy.formats.messages._clearing_edits`): a cleared tool_use `input` becomes {CLEARED_INPUT_KEY: text}.

CLEARED_INPUT_KEY = "offloaded_input"


def cleared_tool_input(ref: str, tokens: int) -> str:
    """Stands for a tool call's input cleared by a `clear_tool_uses_20250919` edit (its JSON text stored)."""
    return f'[offloaded tool input: {tokens} tokens, ref={ref}. The full input (JSON): {RELOAD_TOOL}(ref="{ref}").]'
