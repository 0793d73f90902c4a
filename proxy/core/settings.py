"""Per-request offload settings: server defaults ← tenants file ← X-Offload-* headers.

Headers are validated with pydantic; a bad value is a 400 naming the header and what it allows.
The server may cap what a header can ask for (`header_caps`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from proxy.errors import Kind, ProxyError

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
# the history is over max_total_tokens (`proxy.core.compaction_rule`): what agents cap their own
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
    # The share of sessions forwarded unchanged as a control (`proxy.core.holdout`, `proxy.http.holdout`):
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
