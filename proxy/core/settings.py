"""Per-request offload settings: server defaults ← tenants file ← X-Offload-* headers.

The settings (validated with pydantic, raising their own SettingsError), the X-Offload-* header
names and what to say of one the proxy does not know, and the holdout arm a session is in (the
share of sessions forwarded unchanged is a setting; the arm a pure function of the session).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from proxy.errors import Kind, ProxyError

# ==================== settings
# Per-request offload settings: server defaults ← tenants file ← X-Offload-* headers.
#
# Headers are validated with pydantic; a bad value is a 400 naming the header and what it allows.
# The server may cap what a header can ask for (`header_caps`).

Mode = Literal["auto", "compact", "compress", "off", "observe"]
# Who applies a request's `context_management` (and `/responses/compact`): the upstream
# (relay), the proxy (emulate), or the upstream when it is OpenAI's or Anthropic's own API (auto).
ContextManagement = Literal["relay", "emulate", "auto"]
# Does the proxy add prompt caching a client did not ask for (`proxy.formats.messages`,
# `proxy.formats.prompt_cache`): auto adds it, off leaves every request's caching as sent.
CacheControl = Literal["auto", "off"]
HEADER_PREFIX = "x-offload-"
MAX_HEADER_VALUE = 256
IDENT_PATTERN = r"^[A-Za-z0-9._:@/-]{1,128}$"


class SettingsError(ProxyError, ValueError):
    """An X-Offload-* header the proxy refuses (a bad request naming `param`)."""

    def __init__(self, message: str, *, param: str) -> None:
        super().__init__(Kind.BAD_REQUEST, message, code="invalid_offload_header", param=param)
        self.param = param


# Tool results above this many tokens are compacted by default. In auto mode a summary folds the
# smaller ones anyway, and compacting a result re-sends what follows it (the newest result goes
# whole, then as a preview): 6,000 is the cheapest threshold at the highest recall measured on
# real agent traces (bench/recall_frontier.py, docs/fidelity.md#issue-32-the-tool-result-threshold).
TOOL_RESULT_TOKENS = 6_000
# A newer result above this many tokens is compacted on arrival, the recent tail included, once
# the history is over max_total_tokens (`proxy.core.preview`): what agents cap their own
# reads at (Claude Code's Read: 25,000 tokens), so a result the agent did not cap itself (a
# runaway log, a whole file) never overflows the model's window on the turn it arrives.
FRESH_TOOL_RESULT_TOKENS = 25_000


class OffloadSettings(BaseModel):
    """Everything that decides what a request offloads. Field `foo_bar` ↔ header X-Offload-Foo-Bar,
    tenants-file key `foo_bar`, and (but `tenant` and `session`, which only a request names) server
    option --foo-bar / OFFLOAD_FOO_BAR: each declared here alone, its `description` the option's
    help (`proxy.config` builds the server's fields from these)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Mode = Field("auto", description="Default X-Offload-Mode: auto|compact|compress|off|observe (auto).")
    max_total_tokens: int = Field(
        18_000, ge=0, le=10_000_000, description="Default X-Offload-Max-Total-Tokens (18000)."
    )
    # None: TOOL_RESULT_TOKENS, at most a third of max_total_tokens (`tool_result_limit`)
    max_tool_message_tokens: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="Default X-Offload-Max-Tool-Message-Tokens (6000, at most a third of the trigger when not set).",
    )
    keep_recent: int | None = Field(
        None, ge=0, le=10_000, description="Default X-Offload-Keep-Recent (1 compact, 2 compress)."
    )
    # A tool result above this many tokens is compacted even among the keep_recent last items.
    max_fresh_tool_message_tokens: int = Field(
        FRESH_TOOL_RESULT_TOKENS,
        ge=1,
        le=10_000_000,
        description="Default X-Offload-Max-Fresh-Tool-Message-Tokens (25000): a tool result above it is "
        "compacted even among the recent messages, on the turn it arrives, once over max-total-tokens.",
    )
    # the most recent images stay; older ones are offloaded
    keep_images: int = Field(
        3, ge=0, le=100_000, description="Default X-Offload-Keep-Images (3): older images are offloaded."
    )
    # Older images are offloaded this many at a time (between keep_images and keep_images +
    # image_batch - 1 stay): the forwarded prefix then changes once every image_batch images, as
    # the reference computer-use loops remove screenshots in chunks. 6: the cheapest with a prompt
    # cache counted (bench/computer_use.py, docs/performance.md), at both providers' prices.
    image_batch: int = Field(
        6,
        ge=1,
        le=1_000,
        description="Default X-Offload-Image-Batch (6): images offloaded so many "
        "at a time (the prefix changes once per batch).",
    )
    max_reload_tokens: int = Field(
        8_000, ge=100, le=1_000_000, description="Default X-Offload-Max-Reload-Tokens (8000)."
    )
    max_reload_rounds: int = Field(4, ge=0, le=50, description="Default X-Offload-Max-Reload-Rounds (4).")
    reload_tools: bool = Field(True, description="Default X-Offload-Reload-Tools: on|off (on).")
    # A tool result that repeats an earlier one goes as a pointer to it, with its diff (`proxy.core.fold`).
    fold: bool = Field(
        True,
        description="Default X-Offload-Fold: on|off (on): a tool result repeating an "
        "earlier one goes as a pointer to it plus its diff, reloadable byte for byte.",
    )
    tenant: str | None = Field(None, pattern=IDENT_PATTERN)
    session: str | None = Field(None, pattern=IDENT_PATTERN)
    group_token_threshold: int = Field(
        0, ge=0, le=10_000_000, description="Default X-Offload-Group-Token-Threshold (0: one summary call)."
    )
    compaction_ratio: float = Field(0.75, ge=0.0, le=1.0, description="Default X-Offload-Compaction-Ratio (0.75).")
    # A summary is started in the background once what it would fold reaches this share of the
    # trigger (0: never ahead of time); the turn that crosses the trigger then finds it ready.
    precompress_ratio: float = Field(
        0.8,
        ge=0.0,
        le=1.0,
        description="Default X-Offload-Precompress-Ratio (0.8): start a summary in the background once "
        "what it would fold reaches this share of max-total-tokens (0: only when crossed).",
    )
    # Above this many forwarded tokens a turn waits for its summary (None: 2 x max_total_tokens,
    # capped by the model's context window when known); below it, it goes out without.
    hard_max_tokens: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="Default X-Offload-Hard-Max-Tokens (2 x max-total-tokens, capped by the model's "
        "context window when known): above it a request waits for its summary instead of going out without.",
    )
    summary_model: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9._:/-]{1,128}$",
        description="Default X-Offload-Summary-Model (else the request's).",
    )
    context_management: ContextManagement = Field(
        "auto",
        description="Default X-Offload-Context-Management: relay|emulate|auto (auto). Who applies a request's "
        "context_management and POST /v1/responses/compact: the upstream (relay), the proxy with its own summaries "
        "and refs (emulate), or auto: relay to api.openai.com and api.anthropic.com, emulate for any other upstream.",
    )
    cache_control: CacheControl = Field(
        "auto",
        description="Default X-Offload-Cache-Control: auto|off (auto). auto: an Anthropic request carrying no "
        "cache_control gets the proxy's prompt caching (request-level caching and a breakpoint after the tools and "
        "system), and a request to api.openai.com without a prompt_cache_key its session's; off: as sent.",
    )
    # 1-token requests that keep a large, active session's prompt cache warm (`proxy.offload.cache_keepalive`)
    cache_keepalive: bool = Field(
        False,
        description="Default X-Offload-Cache-Keepalive: on|off (off). on: a session whose forwarded prefix is "
        "large (--cache-keepalive-min-tokens) and was sent lately gets a 1-token request with that exact prefix, "
        "with its own credential, shortly before the provider's cache would expire (docs/caching.md).",
    )
    # The share of sessions forwarded unchanged as a control (`arm` below, `proxy.http.observed`):
    # the operator's (server or tenants file); a header may only repeat it (`OPERATOR_ONLY`)
    holdout: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="Default holdout (0: none): the share of sessions, from 0 to below 1, forwarded unchanged "
        "as a control while the others are managed, decided from the session id alike on every replica; per "
        "tenant in the tenants file. GET /v1/offload/stats compares the arms (docs/safety.md).",
    )

    @field_validator("reload_tools", "fold", "cache_keepalive", mode="before")
    @classmethod
    def _on_off(cls, value: Any) -> Any:
        if isinstance(value, str):
            lowered = value.strip().lower()
            if lowered in ("on", "true", "1", "yes"):
                return True
            if lowered in ("off", "false", "0", "no"):
                return False
            raise ValueError("must be on or off")
        return value

    def keep_recent_for(self, default: int) -> int:
        return default if self.keep_recent is None else self.keep_recent

    def tool_result_limit(self) -> int:
        """Tool results (and documents) above this many tokens are compacted: max_tool_message_tokens
        when set, else TOOL_RESULT_TOKENS but at most a third of max_total_tokens, so that with a
        smaller budget no single result outgrows it (the last items are never summarised); at
        least 1, as max_tool_message_tokens, when a third rounds to 0 (a trigger of 0 to 2 tokens
        compacts every result, as 3 does, not none up to 6,000)."""
        if self.max_tool_message_tokens is not None:
            return self.max_tool_message_tokens
        return min(TOOL_RESULT_TOKENS, max(1, self.max_total_tokens // 3))


SETTING_FIELDS = tuple(OffloadSettings.model_fields)
# Settings only a request names (who it is): the others have a server default (`proxy.config`).
REQUEST_ONLY = frozenset({"tenant", "session"})
SERVER_DEFAULTS = tuple(name for name in SETTING_FIELDS if name not in REQUEST_ONLY)
# Settings a header may not change (it may repeat the value in force): a client choosing its own
# arm of the holdout would make the comparison one of clients, not of the proxy.
OPERATOR_ONLY = frozenset({"holdout"})
# The settings `--header-caps` may cap: what a header gives of them is a number.
NUMERIC = frozenset(
    name for name, info in OffloadSettings.model_fields.items() if info.annotation in (int, float, int | None)
)


def header_name(field: str) -> str:
    return "X-Offload-" + "-".join(part.capitalize() for part in field.split("_"))


def _describe(field: str) -> str:
    info = OffloadSettings.model_fields[field]
    annotation = str(info.annotation)
    if field == "mode":
        return "one of auto, compact, compress, off, observe"
    if field == "context_management":
        return "one of relay, emulate, auto"
    if field == "cache_control":
        return "one of auto, off"
    if field in ("reload_tools", "fold", "cache_keepalive"):
        return "on or off"
    if field in ("tenant", "session", "summary_model"):
        return "1-128 characters of A-Z a-z 0-9 . _ : @ / -"
    if field in ("compaction_ratio", "precompress_ratio"):
        return "a number from 0 to 1"
    if field == "holdout":
        return "a number from 0 to below 1"
    bounds = [m for m in info.metadata if hasattr(m, "ge") or hasattr(m, "le")]
    low = next((m.ge for m in bounds if getattr(m, "ge", None) is not None), None)
    high = next((m.le for m in bounds if getattr(m, "le", None) is not None), None)
    return f"an integer from {low} to {high}" if "int" in annotation else annotation


def header_settings(headers: Mapping[str, str]) -> dict[str, str]:
    """The settings X-Offload-* headers give (field → value stripped), as yet unchecked; other
    headers, and X-Offload-* ones naming no setting, are left out."""
    given: dict[str, str] = {}
    for name, value in headers.items():
        lname = name.lower()
        if not lname.startswith(HEADER_PREFIX):
            continue
        field = lname[len(HEADER_PREFIX) :].replace("-", "_")
        if field in SETTING_FIELDS:
            if len(value) > MAX_HEADER_VALUE:
                raise SettingsError(
                    f"Header {header_name(field)} is longer than {MAX_HEADER_VALUE} characters.",
                    param=header_name(field),
                )
            given[field] = value.strip()
    return given


def resolve_settings(
    defaults: OffloadSettings,
    headers: Mapping[str, str],
    *,
    tenant: Mapping[str, Any] | None = None,
    caps: Mapping[str, int] | None = None,
) -> OffloadSettings:
    """The settings of one request: the server's `defaults` ← the `tenant`'s overrides (its
    tenants-file table, checked at startup; keys other than settings ignored) ← X-Offload-*
    `headers`, each checked here: a refused one is a SettingsError naming it and what it allows,
    a value above the server's `caps`, or one changing an `OPERATOR_ONLY` setting."""
    merged: dict[str, Any] = defaults.model_dump()
    merged.update({k: v for k, v in (tenant or {}).items() if k in SETTING_FIELDS})
    for field, value in header_settings(headers).items():
        try:
            OffloadSettings.model_validate({field: value})
        except ValidationError as exc:
            raise SettingsError(
                f"Invalid header {header_name(field)}: {value!r}; it must be {_describe(field)}.",
                param=header_name(field),
            ) from exc
        if field in OPERATOR_ONLY and OffloadSettings.model_validate({field: value}) != OffloadSettings.model_validate(
            {field: merged[field]}
        ):
            raise SettingsError(
                f"Header {header_name(field)} cannot change this server's value "
                f"({merged[field]}): the holdout is the operator's, set with --{field} or the "
                "tenants file (a client choosing its arm would bias the comparison; "
                "X-Offload-Mode: off forwards a request unchanged, outside it).",
                param=header_name(field),
            )
        cap = (caps or {}).get(field)
        if cap is not None and float(value) > cap:
            raise SettingsError(
                f"Invalid header {header_name(field)}: {value!r}; this server allows at most {cap}.",
                param=header_name(field),
            )
        merged[field] = value
    return OffloadSettings.model_validate(merged)


class SettingsResolver:
    """The server's side of `resolve_settings`: its defaults, tenants and header caps, held."""

    def __init__(
        self,
        defaults: Mapping[str, Any],
        tenants: Mapping[str, Mapping[str, Any]] | None = None,
        header_caps: Mapping[str, int] | None = None,
    ) -> None:
        self.defaults = OffloadSettings.model_validate(dict(defaults))
        self.tenants = tenants or {}
        self.header_caps = dict(header_caps or {})

    def tenant_extra(self, tenant: str | None, key: str) -> Any:
        return self.tenants.get(tenant or "", {}).get(key)

    def resolve(self, headers: Mapping[str, str], *, tenant: str | None = None) -> OffloadSettings:
        """`tenant`: the tenants-file entry the caller belongs to (decided by its credential)."""
        return resolve_settings(
            self.defaults, headers, tenant=self.tenants.get(tenant or "", {}), caps=self.header_caps
        )


# ==================== header names
# The `X-Offload-*` request headers the proxy reads, and what to say of one it does not.
#
# A misspelt setting (`X-Offload-Max-Tokens: 5`) would otherwise be ignored without a word: the
# request is served as it would be without it, and its answer names each unknown header with the
# known ones closest to it (`difflib`, over the part after `X-Offload-`). A client chooses these
# names, how many and how long: at most MAX_NAMED of one request are matched and named, each
# clipped to MAX_NAME characters first, so a request of a thousand headers, or of one 50 KB name,
# costs no more than one of eight short ones.

UPSTREAM_HEADER = "X-Offload-Upstream"  # read by proxy.upstream.base_url: a header, not a setting
KNOWN = tuple(sorted({*(header_name(field) for field in SETTING_FIELDS), UPSTREAM_HEADER}))
_SUFFIXES = {name.lower()[len(HEADER_PREFIX) :]: name for name in KNOWN}
MAX_NAME = 64  # characters of an unknown header's name matched and shown
MAX_NAMED = 8  # unknown headers of one request matched and named; the rest are only counted
CUTOFF = 0.6  # difflib's: below it, no known header is close enough to be named
NO_MATCH = "none"  # the counter's label of a header that is close to none
UNMATCHED = "unchecked"  # … of one past the first MAX_NAMED of its request


def is_known(name: str) -> bool:
    """Whether the proxy reads header `name` (lower-case): a setting as the resolver reads it
    (`-` or `_` between words), or the upstream header."""
    if len(name) > len(HEADER_PREFIX) + MAX_NAME:
        return False
    field = name[len(HEADER_PREFIX) :].replace("-", "_")
    return field in SETTING_FIELDS or name == UPSTREAM_HEADER.lower()


def _shown(name: str) -> str:
    """`name` as a response header may carry it: printable ASCII, at most MAX_NAME characters,
    its words capitalised as the documentation writes them (ASGI servers lower-case names)."""
    clipped = "".join(c if " " < c < "\x7f" else "?" for c in name[:MAX_NAME])
    shown = "-".join(part.capitalize() for part in clipped.split("-"))
    return shown + "..." if len(name) > MAX_NAME else shown


def closest(name: str) -> tuple[str, ...]:
    """The known headers closest to `name` (lower-case, `X-Offload-…`), the closest first: two at
    most (`X-Offload-Max-Tokens` is as close to `…-Max-Total-Tokens` as to `…-Hard-Max-Tokens`),
    none when none is close."""
    suffix = name[len(HEADER_PREFIX) : len(HEADER_PREFIX) + MAX_NAME].replace("_", "-")
    return tuple(_SUFFIXES[match] for match in difflib.get_close_matches(suffix, _SUFFIXES, n=2, cutoff=CUTOFF))


@dataclass(frozen=True)
class UnknownHeader:
    name: str  # as sent, clipped (`_shown`)
    closest: tuple[str, ...]  # the known headers' names, the closest first

    def text(self) -> str:
        hint = f"did you mean {' or '.join(self.closest)}?" if self.closest else "not an X-Offload-* setting"
        return f"unknown header {self.name} ignored ({hint})"


@dataclass(frozen=True)
class UnknownHeaders:
    """The unknown `X-Offload-*` headers of one request: the first MAX_NAMED, and how many more."""

    named: tuple[UnknownHeader, ...]
    more: int = 0

    def warning(self) -> str:
        """The `X-Offload-Warning` text: ASCII, a few hundred characters at most."""
        texts = [header.text() for header in self.named]
        if self.more:
            texts.append(f"{self.more} more unknown X-Offload-* headers ignored")
        return "; ".join(texts)

    def labels(self) -> dict[str, int]:
        """How many to count under each label (a known header's name, NO_MATCH or UNMATCHED): a
        set of values bounded by KNOWN, whatever the client sent."""
        counts: dict[str, int] = {}
        for header in self.named:
            label = header.closest[0] if header.closest else NO_MATCH
            counts[label] = counts.get(label, 0) + 1
        if self.more:
            counts[UNMATCHED] = self.more
        return counts


def unknown_headers(names: Iterable[str]) -> UnknownHeaders | None:
    """The `X-Offload-*` names among `names` the proxy does not read (each once), or None."""
    named: list[UnknownHeader] = []
    seen: set[str] = set()
    more = 0
    for name in names:
        lname = name.lower()
        if not lname.startswith(HEADER_PREFIX) or is_known(lname):
            continue
        key = lname[: len(HEADER_PREFIX) + MAX_NAME + 1]
        if key in seen:
            continue
        seen.add(key)
        if len(named) < MAX_NAMED:
            named.append(UnknownHeader(_shown(name), closest(lname)))
        else:
            more += 1
    return UnknownHeaders(tuple(named), more) if named else None


# ==================== holdout
# Which arm of a holdout a session is in: a pure function of the session, so every replica of a
# fleet, and the same replica after a restart, puts a session in the same arm with nothing stored.
#
# A holdout (`--holdout 0.1`) forwards a stable fraction of sessions unchanged (the control arm)
# and manages the others. The arm comes from a keyed digest of the tenant's namespace and the
# session id mapped to [0, 1): below the fraction is control. The namespace keeps two tenants'
# sessions of the same name apart; the salt (`--holdout-salt`) lets an operator draw a new split.

Arm = Literal["control", "managed"]
ARMS: tuple[Arm, Arm] = ("control", "managed")


def position(namespace: str, session: str, *, salt: str = "") -> float:
    """Where the session falls in [0, 1): uniform over sessions, the same wherever computed."""
    digest = blake2b(
        f"{namespace}\x00{session}".encode(), digest_size=8, key=salt.encode()[:64], person=b"offload-arm"
    ).digest()
    return int.from_bytes(digest, "big") / 2**64


def arm(namespace: str, session: str | None, fraction: float, *, salt: str = "") -> Arm | None:
    """The session's arm, or None when there is no holdout (fraction 0) or no session to decide by
    (a request the statistics give no session is managed, outside the comparison)."""
    if fraction <= 0 or not session:
        return None
    return "control" if position(namespace, session, salt=salt) < fraction else "managed"
