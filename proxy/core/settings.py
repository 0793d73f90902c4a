"""Per-request offload settings: server defaults ← tenants file ← X-Offload-* headers.

Headers are validated with pydantic; a bad value is a 400 naming the header and what it allows.
The server may cap what a header can ask for (`header_caps`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from proxy.errors import Kind, ProxyError

Mode = Literal["auto", "compact", "compress", "off", "observe"]
# Who applies a request's `context_management` (and `/responses/compact`): the upstream
# (relay), the proxy (emulate), or the upstream when it is OpenAI's or Anthropic's own API (auto).
ContextManagement = Literal["relay", "emulate", "auto"]
# Does the proxy add prompt caching a client did not ask for (`proxy.formats.messages.cache_control`,
# `proxy.formats.openai_cache`): auto adds it, off leaves every request's caching as sent.
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
    """Everything that decides what a request offloads. Field `foo_bar` ↔ header X-Offload-Foo-Bar."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Mode = "auto"
    max_total_tokens: int = Field(18_000, ge=0, le=10_000_000)
    # None: TOOL_RESULT_TOKENS, at most a third of max_total_tokens (`tool_result_limit`)
    max_tool_message_tokens: int | None = Field(None, ge=1, le=10_000_000)
    keep_recent: int | None = Field(None, ge=0, le=10_000)
    # A tool result above this many tokens is compacted even among the keep_recent last items.
    max_fresh_tool_message_tokens: int = Field(FRESH_TOOL_RESULT_TOKENS, ge=1, le=10_000_000)
    keep_images: int = Field(3, ge=0, le=100_000)  # the most recent images stay; older ones are offloaded
    # Older images are offloaded this many at a time (between keep_images and keep_images +
    # image_batch - 1 stay): the forwarded prefix then changes once every image_batch images, as
    # the reference computer-use loops remove screenshots in chunks. 6: the cheapest with a prompt
    # cache counted (bench/computer_use.py, docs/performance.md), at both providers' prices.
    image_batch: int = Field(6, ge=1, le=1_000)
    max_reload_tokens: int = Field(8_000, ge=100, le=1_000_000)
    max_reload_rounds: int = Field(4, ge=0, le=50)
    reload_tools: bool = True
    # A tool result that repeats an earlier one goes as a pointer to it, with its diff (`proxy.core.fold`).
    fold: bool = True
    tenant: str | None = Field(None, pattern=IDENT_PATTERN)
    session: str | None = Field(None, pattern=IDENT_PATTERN)
    group_token_threshold: int = Field(0, ge=0, le=10_000_000)
    compaction_ratio: float = Field(0.75, ge=0.0, le=1.0)
    # A summary is started in the background once what it would fold reaches this share of the
    # trigger (0: never ahead of time); the turn that crosses the trigger then finds it ready.
    precompress_ratio: float = Field(0.8, ge=0.0, le=1.0)
    # Above this many forwarded tokens a turn waits for its summary (None: 2 x max_total_tokens,
    # capped by the model's context window when known); below it, it goes out without.
    hard_max_tokens: int | None = Field(None, ge=1, le=10_000_000)
    summary_model: str | None = Field(None, pattern=r"^[A-Za-z0-9._:/-]{1,128}$")
    context_management: ContextManagement = "auto"
    cache_control: CacheControl = "auto"
    # 1-token requests that keep a large, active session's prompt cache warm (`proxy.offload.keepalive`)
    cache_keepalive: bool = False
    # The share of sessions forwarded unchanged as a control (`proxy.core.holdout`, `proxy.http.holdout`):
    # the operator's (server or tenants file); a header may only repeat it (`OPERATOR_ONLY`)
    holdout: float = Field(0.0, ge=0.0, lt=1.0)

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
# Settings a header may not change (it may repeat the value in force): a client choosing its own
# arm of the holdout would make the comparison one of clients, not of the proxy.
OPERATOR_ONLY = frozenset({"holdout"})
# What a tenants-file table may hold beside settings (read by `proxy.http.caller` and the summariser).
TENANT_KEYS = frozenset(
    {"api_keys", "upstream", "upstream_api_key", "anthropic_upstream", "anthropic_api_key", "summary_prompt"}
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


def load_tenants_file(path: Path | None) -> dict[str, dict[str, Any]]:
    """`[tenants.<id>]` tables (TOML) or a `tenants:` mapping (YAML), each of setting overrides."""
    if path is None:
        return {}
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        import yaml  # imported only for a YAML tenants file

        data = yaml.safe_load(text) or {}
    else:
        data = tomllib.loads(text)
    tenants = data.get("tenants", data) if isinstance(data, dict) else None
    if not isinstance(tenants, dict) or not all(isinstance(v, dict) for v in tenants.values()):
        raise ValueError("expected one table of settings per tenant, e.g. [tenants.team-a]")
    for tenant, overrides in tenants.items():
        unknown = sorted(set(overrides) - set(SETTING_FIELDS) - TENANT_KEYS - {"tenant", "session"})
        if unknown:
            raise ValueError(
                f"tenant {tenant!r}: unknown key {', '.join(unknown)} (settings: "
                f"{', '.join(SETTING_FIELDS)}; also {', '.join(sorted(TENANT_KEYS))})"
            )
        try:
            OffloadSettings(**{k: v for k, v in overrides.items() if k in SETTING_FIELDS})  # fail at startup
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"tenant {tenant!r}: {problems}") from None
    return tenants


class SettingsResolver:
    """Builds the OffloadSettings of one request."""

    def __init__(
        self,
        defaults: Mapping[str, Any],
        tenants: Mapping[str, Mapping[str, Any]] | None = None,
        header_caps: Mapping[str, int] | None = None,
    ) -> None:
        self.defaults = OffloadSettings(**defaults)
        self.tenants = tenants or {}
        self.header_caps = dict(header_caps or {})

    def tenant_overrides(self, tenant: str | None) -> dict[str, Any]:
        """Setting overrides for a tenant (non-setting keys such as a prompt are read elsewhere)."""
        raw = self.tenants.get(tenant or "", {})
        return {k: v for k, v in raw.items() if k in SETTING_FIELDS}

    def tenant_extra(self, tenant: str | None, key: str) -> Any:
        return self.tenants.get(tenant or "", {}).get(key)

    def resolve(self, headers: Mapping[str, str], *, tenant: str | None = None) -> OffloadSettings:
        """`tenant`: the tenants-file entry the caller belongs to (decided by its credential)."""
        from_headers: dict[str, str] = {}
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
                from_headers[field] = value.strip()
        merged = self.defaults.model_dump(exclude_unset=False)
        merged.update(self.tenant_overrides(tenant))
        for field, value in from_headers.items():
            try:
                OffloadSettings(**{field: value})
            except ValidationError as exc:
                raise SettingsError(
                    f"Invalid header {header_name(field)}: {value!r}; it must be {_describe(field)}.",
                    param=header_name(field),
                ) from exc
            if field in OPERATOR_ONLY and OffloadSettings(**{field: value}) != OffloadSettings(
                **{field: merged[field]}
            ):
                raise SettingsError(
                    f"Header {header_name(field)} cannot change this server's value "
                    f"({merged[field]}): the holdout is the operator's, set with --{field} or the "
                    "tenants file (a client choosing its arm would bias the comparison; "
                    "X-Offload-Mode: off forwards a request unchanged, outside it).",
                    param=header_name(field),
                )
            cap = self.header_caps.get(field)
            if cap is not None and float(value) > cap:
                raise SettingsError(
                    f"Invalid header {header_name(field)}: {value!r}; this server allows at most {cap}.",
                    param=header_name(field),
                )
            merged[field] = value
        return OffloadSettings(**merged)
