"""Server configuration: CLI options and `OFFLOAD_*` environment variables (pydantic-settings).

The settings on a command line: one option per `ServerSettings` field (`serve` and `wrap` take
them alike, `add_settings_options`), their resolution over the environment (`resolve_settings`),
and the one-line messages that say what is wrong with them (`settings_error`, `listen_problem`)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self, get_args

from pydantic import Field, ValidationError, ValidationInfo, create_model, field_validator, model_validator
from pydantic.config import JsonDict
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from proxy.core.settings import NUMERIC, SERVER_DEFAULTS, OffloadSettings
from proxy.option_text import json_or_commas
from proxy.upstream.base_url import anthropic_base, base_url_problem, openai_base

ENV_PREFIX = "OFFLOAD_"
# Marks a setting holding a key, a token or a credential in a URL (`secret_settings`): `wrap` keeps
# every spelling of its variable out of the agent's environment.
SECRET: JsonDict = {"secret": True}


class _ServerSettings(BaseSettings):
    """The process-wide settings of the server alone; `ServerSettings` adds the per-request defaults."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    host: str = Field("127.0.0.1", description="Interface to listen on.")
    port: int = Field(8080, ge=0, le=65535, description="Port to listen on.")
    upstream: str = Field(
        "https://api.openai.com/v1",
        description="Upstream base URL, as an OpenAI SDK's base_url (https://host/v1; a bare https://host gets /v1).",
    )
    upstream_api_key: str | None = Field(
        None,
        json_schema_extra=SECRET,
        description="The operator's provider key. When set, clients must present proxy keys from the "
        "tenants file (their own keys are refused) and the upstream gets this key instead.",
    )
    anthropic_upstream: str = Field(
        "https://api.anthropic.com",
        description="Upstream of the Anthropic Messages API (/v1/messages and requests carrying "
        "anthropic-version), as ANTHROPIC_BASE_URL is written (https://host), or with /v1.",
    )
    anthropic_api_key: str | None = Field(
        None,
        json_schema_extra=SECRET,
        description="The operator's Anthropic key, sent as x-api-key for proxy-key callers on the "
        "Anthropic API (as --upstream-api-key is for OpenAI's). When set, clients must present proxy keys.",
    )
    redis_url: str | None = Field(
        None,
        json_schema_extra=SECRET,
        description="redis://, rediss:// or redis+cluster:// URL; absent = embedded store in --data-dir.",
    )
    redis_cluster: bool = Field(
        False, description="Treat --redis-url as a Redis Cluster (also implied by a redis+cluster:// URL)."
    )
    data_dir: Path = Field(Path(".offload-data"), description="Embedded store location.")
    workers: int = Field(1, ge=1, description="Worker processes.")
    log_level: str = Field(
        "info", pattern="^(critical|error|warning|info|debug|trace)$", description="critical|error|warning|info|debug."
    )
    log_format: str = Field("json", pattern="^(json|text)$", description="json (one object per line) or text.")
    metrics_tenant_label: bool = Field(
        False, description="Label request and token metrics with the tenant namespace hash."
    )
    admin_token: str | None = Field(
        None,
        json_schema_extra=SECRET,
        description="Bearer token required by /metrics; reads every tenant's statistics and dashboard.",
    )
    encryption_key: str | None = Field(
        None,
        json_schema_extra=SECRET,
        description="Secret for AES-256-GCM encryption at rest of stored content (absent = plain). Every "
        "replica sharing a store needs the same one (a replica with another refuses to start).",
    )
    encryption_key_previous: str | None = Field(
        None,
        json_schema_extra=SECRET,
        description="The --encryption-key before a rotation: what it sealed is still read (and sealed again "
        "with --encryption-key as it is read), new values are sealed with --encryption-key. Needs --namespace-key, "
        "and may not be --encryption-key itself (docs/security.md: rotating the key).",
    )
    namespace_key: str | None = Field(
        None,
        json_schema_extra=SECRET,
        description="Secret that keys tenant namespaces, session names in store keys and compaction tokens "
        "(default: --encryption-key). Keep it when rotating --encryption-key, so no tenant's store moves.",
    )
    upstream_allowlist: Annotated[list[str], NoDecode] = Field(  # NoDecode: the validator parses both forms
        default_factory=list,
        description="Hosts (host or host:port) an X-Offload-Upstream header may name, separated by commas "
        "(api.example.com,eu.example.com:8443) or as a JSON list; empty = none.",
    )
    connect_timeout: float = Field(10.0, gt=0, description="Upstream connect timeout (s).")
    read_timeout: float = Field(
        600.0, gt=0, description="Max silence between two upstream chunks (s); streams may last longer."
    )
    max_connections: int = Field(1000, ge=1, description="Upstream connection pool size.")
    store_ttl: int = Field(7 * 24 * 3600, ge=60, description="Idle TTL (s) of offloaded content; every use extends it.")
    tenants_file: Path | None = Field(
        None, description="TOML or YAML file of tenants: proxy keys, upstreams, per-tenant setting overrides."
    )

    cache_keepalive_min_tokens: int = Field(
        4_096,
        ge=1,
        le=10_000_000,
        description="Forwarded tokens below which a session's cache is never kept alive "
        "(4096: the largest minimum cacheable prefix; measured in bench/cache_control.py).",
    )
    cache_keepalive_max_pings: int = Field(
        3, ge=1, le=100, description="Keep-alive requests one session gets between two of its turns, at most."
    )
    cache_keepalive_idle: float = Field(
        900.0,
        gt=0,
        le=86_400,
        description="A session idle this long (s) since its last turn gets no more keep-alive requests.",
    )
    cache_keepalive_bytes: int = Field(
        256 * 1024**2,
        ge=0,
        description="Bytes of forwarded bodies one worker holds for keep-alive requests, at "
        "most (the sessions idle longest are dropped first).",
    )
    holdout_salt: str = Field(
        "",
        max_length=256,
        description="Salt of the holdout's split: another value draws other sessions into the "
        "control arm (every replica of a fleet needs the same).",
    )
    observe_bytes: int = Field(
        256 * 1024**2,
        ge=0,
        description="Bytes one worker holds of its observed sessions' plans (observe mode: "
        "their earlier turns' refs and summaries, in memory only, so each turn plans as a managed one does); the "
        "sessions used longest ago are dropped first; 0: every observed turn plans from nothing.",
    )
    cache_ttl: float = Field(
        300.0,
        ge=1,
        le=86_400,
        description="How long (s) the proxy assumes a provider keeps an idle prompt-cache "
        "prefix (Anthropic's and OpenAI's default: 5 minutes): keep-alive requests go out before it, and a cut due "
        "soon is made once a session has been idle longer (docs/caching.md).",
    )
    summary_timeout: float = Field(60.0, gt=0, description="Timeout (s) of one summarisation call.")
    summary_wait: float = Field(
        5.0, ge=0, description="How long (s) a request waits for a summary another request is making."
    )
    summary_request: Literal["prefix", "transcript"] = Field(
        "prefix",
        description="How a summary is asked for: prefix (the conversation as its turns send it, the "
        "same tools and messages, then one instruction: a provider's prompt cache bills the history at its "
        "cached price) or transcript (a system prompt and a rendering of the history, on chat completions: "
        "for upstreams without prefix caching).",
    )
    summary_concurrency: int = Field(
        4, ge=1, le=1000, description="Summaries one worker makes at once in the background."
    )
    summary_queue: int = Field(
        64, ge=0, le=100_000, description="Background summaries waiting for a slot, at most (more are not started)."
    )
    reload_budget: float = Field(120.0, gt=0, description="Total seconds the reload rounds of one request may take.")
    shutdown_grace: float = Field(
        30.0, ge=0, description="On SIGTERM, how long (s) in-flight requests and streams may take to finish."
    )
    max_body_bytes: int = Field(64 * 1024 * 1024, ge=1024, description="Largest request body accepted (413 above).")
    max_messages: int = Field(100_000, ge=1, description="Most messages (items) a request may hold.")
    store_timeout: float = Field(0.5, gt=0, description="Timeout (s) of one store operation.")
    body_timeout: float = Field(
        60.0,
        gt=0,
        description="Longest silence (s) between two chunks of a request body (408 after); "
        "a slow but steady upload is never cut.",
    )
    ws_connections_per_tenant: int = Field(
        64,
        ge=0,
        le=100_000,
        description="Responses WebSocket connections one tenant or credential may hold open in one worker "
        "(0 = no limit); the upgrade beyond it is refused with 429.",
    )
    ws_connections: int = Field(
        1024,
        ge=0,
        le=1_000_000,
        description="Responses WebSocket connections one worker holds open in all (0 = no limit); the upgrade "
        "beyond it is refused with 429, whoever asks (credentials are not checked with the upstream before a "
        "response.create, so made-up ones could otherwise hold idle connections without end).",
    )
    ws_idle_timeout: float = Field(
        900.0,
        gt=0,
        description="A Responses WebSocket connection with no response running and no frame from "
        "its client for this long (s) is closed (code 1000).",
    )
    ws_held_responses: int = Field(
        16,
        ge=1,
        le=1000,
        description="Responses one WebSocket connection holds for previous_response_id with "
        "store false (the oldest is forgotten first).",
    )
    ws_held_bytes: int = Field(
        1024**3,
        ge=0,
        description="Bytes of memory one worker's Responses WebSocket connections hold together in "
        "responses kept for previous_response_id (counted as parsed objects, not JSON characters); a response that "
        "does not fit forgets its connection's oldest first, else is not held.",
    )
    allow_anonymous: bool = Field(
        False,
        description="Serve requests that carry no credential at all; anonymous clients share one namespace.",
    )
    max_stored_bytes_per_namespace: int = Field(
        1024**3,
        ge=0,
        description="Bytes one namespace may store (0 = no limit); beyond it POST /v1/offload answers 429 "
        "and chat requests go through without offloading.",
    )
    search_timeout: float = Field(
        2.0, gt=0, description="Total time (s) one context_search may take; it returns what it found so far."
    )
    search_max_bytes: int = Field(
        32 * 1024 * 1024, ge=1024, description="Most bytes of offloaded content one context_search scans."
    )
    header_caps: Annotated[dict[str, int], NoDecode] = Field(
        default_factory=dict,
        description='Caps on integer headers: a JSON object, e.g. {"max_reload_rounds": 8}, or '
        "name=value pairs separated by commas (max_reload_rounds=8,max_total_tokens=50000).",
    )
    stats_retention: Annotated[int, NoDecode] = Field(
        14 * 24 * 3600,
        description="How long usage statistics are kept: seconds, or a duration such as 14d or 36h (at least 1d).",
    )
    prices: Annotated[dict[str, tuple[float, float, float, float, float]], NoDecode] = Field(
        default_factory=dict,
        description="Prices ($ per million tokens) valuing the bill the upstream reports, over the built-in table: "
        "model=prices pairs separated by commas, a model's prices input/cached, input/cached/output or "
        "input/cached/write5m/write1h/output (gpt-4o=2.5/1.25/10,*=3/0.3/15; a name is a prefix of model names, "
        "* the fallback; a price not given keeps the built-in ratio to the input price), or a JSON object "
        '({"gpt-4o": [2.5, 1.25, 10]}, {"m": {"input": 3, "cached": 0.3, "cache_write_5m": 3.75, '
        '"cache_write_1h": 6, "output": 15}}). See docs/billing.md.',
    )

    @field_validator("stats_retention", mode="before")
    @classmethod
    def _retention_forms(cls, value: object) -> int:
        from proxy.stats import parse_retention

        return parse_retention(value)

    @field_validator("prices", mode="before")
    @classmethod
    def _price_forms(cls, value: object) -> dict[str, tuple[float, float, float, float, float]]:
        from proxy.stats import parse_prices

        return {
            name: (p.input, p.cached, p.cache_write_5m, p.cache_write_1h, p.output)
            for name, p in parse_prices(value).items()
        }

    @field_validator("upstream", "anthropic_upstream")
    @classmethod
    def _a_base_url(cls, value: str, info: ValidationInfo) -> str:
        """An http(s) base URL, not an endpoint's: a one-line message saying what to give instead."""
        problem = base_url_problem(value, "anthropic" if info.field_name == "anthropic_upstream" else "openai")
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("upstream_allowlist", mode="before")
    @classmethod
    def _allowlist_forms(cls, value: object) -> object:
        """CLI and OFFLOAD_UPSTREAM_ALLOWLIST alike: hosts separated by commas, or a JSON list."""
        expected = (
            "expected hosts (host or host:port) separated by commas, e.g. api.example.com,eu.example.com:8443, "
            'or a JSON list, e.g. ["api.example.com"]'
        )
        if isinstance(value, str):
            value = json_or_commas(value, opener="[", expected=expected)
        if isinstance(value, list):
            for host in value:
                if not isinstance(host, str) or not host or any(c in host for c in "/ \t@"):
                    raise ValueError(f"{expected}; {host!r} is not a host (no scheme, path or spaces)")
        return value

    @field_validator("header_caps", mode="before")
    @classmethod
    def _header_caps_forms(cls, value: object) -> object:
        """CLI and OFFLOAD_HEADER_CAPS alike: a JSON object, or name=value pairs separated by commas."""
        expected = (
            'expected a JSON object of integer caps, e.g. {"max_reload_rounds": 8}, or name=value pairs '
            "separated by commas, e.g. max_reload_rounds=8,max_total_tokens=50000"
        )
        if not isinstance(value, str):
            return value
        parts = json_or_commas(value, opener="{", expected=expected)
        if not isinstance(parts, list):
            return parts
        caps: dict[str, str] = {}
        for pair in parts:
            name, sep, number = pair.partition("=")
            if not sep or not name.strip() or not number.strip():
                raise ValueError(f"{expected}; got {value.strip()!r}")
            caps[name.strip()] = number.strip()
        return caps

    @field_validator(
        "upstream_api_key",
        "anthropic_api_key",
        "admin_token",
        "encryption_key",
        "encryption_key_previous",
        "namespace_key",
    )
    @classmethod
    def _not_the_example_value(cls, value: str | None) -> str | None:
        if value and "change-me" in value.lower():
            raise ValueError("is the example value 'change-me' from deploy/: set a real secret")
        return value

    @model_validator(mode="after")
    def _offload_defaults_are_valid(self) -> Self:
        """The per-request defaults and header caps are checked now, not in the first request."""
        try:
            self.request_defaults()
        except ValidationError as exc:
            problem = exc.errors()[0]
            raise ValueError(f"--{'-'.join(map(str, problem['loc'])).replace('_', '-')}: {problem['msg']}") from None
        if self.redis_cluster and not self.redis_url:
            raise ValueError("--redis-cluster needs --redis-url (a node of the cluster)")
        if self.encryption_key_previous and self.encryption_key_previous == self.encryption_key:
            raise ValueError(
                "--encryption-key-previous is --encryption-key itself: give the key before the rotation "
                "(the old --encryption-key), or leave it out once the rotation is over"
            )
        if self.encryption_key_previous and not (self.encryption_key and self.namespace_key):
            raise ValueError(
                "--encryption-key-previous needs --encryption-key (the new key) and --namespace-key "
                "(the key namespaces were derived from: the old --encryption-key, unless every "
                "tenant's stored content is to start afresh)"
            )
        unknown = sorted(set(self.header_caps) - NUMERIC)
        if unknown:
            raise ValueError(
                f"--header-caps: {', '.join(unknown)} is not a numeric setting; caps apply to "
                f"{', '.join(sorted(NUMERIC))}"
            )
        return self

    def offload_defaults(self) -> dict[str, object]:
        """The per-request defaults given (option, variable or argument): the others are the built-in ones."""
        return {
            name: getattr(self, name)
            for name in SERVER_DEFAULTS
            if name in type(self).model_fields and getattr(self, name) is not None
        }

    def request_defaults(self) -> OffloadSettings:
        """The per-request settings of a request that names none (no tenant, no header)."""
        return OffloadSettings.model_validate(self.offload_defaults())

    @property
    def names_key(self) -> str | None:
        """What keys namespaces, session names in store keys and compaction tokens: stable across a
        rotation of the sealing key."""
        return self.namespace_key or self.encryption_key

    @property
    def upstream_base(self) -> str:
        """The OpenAI upstream with its /v1 (`--upstream` as written, with or without it)."""
        return openai_base(self.upstream)

    @property
    def anthropic_base(self) -> str:
        """The Anthropic upstream with its /v1: what managed and relayed paths are appended to."""
        return anthropic_base(self.anthropic_upstream)


def _as_given(annotation: Any) -> Any:
    """What the server holds of a per-request default: the value as the command line gives it (a
    word for a choice or a switch, a number), or None for the built-in default; OffloadSettings
    alone checks it (`_offload_defaults_are_valid`), so an option and its header accept alike."""
    kinds = [kind for kind in get_args(annotation) if kind is not type(None)] or [annotation]
    if len(kinds) == 1 and kinds[0] in (int, float):
        return kinds[0] | None
    return str | None  # a Literal's word, on|off, a name


def _request_default_fields() -> dict[str, Any]:
    """One server field per setting a server may default, from its one declaration in
    OffloadSettings: its type as given, no default (None: the built-in one), its description."""
    return {
        name: (_as_given(info.annotation), Field(None, description=info.description))
        for name, info in OffloadSettings.model_fields.items()
        if name in SERVER_DEFAULTS
    }


if TYPE_CHECKING:

    class ServerSettings(_ServerSettings):
        """Process-wide settings. Every field is settable as `OFFLOAD_<FIELD>` in the environment."""

else:
    ServerSettings = create_model(
        "ServerSettings",
        __base__=_ServerSettings,
        __module__=__name__,
        __doc__="Process-wide settings. Every field is settable as `OFFLOAD_<FIELD>` in the environment.",
        **_request_default_fields(),
    )


def secret_settings() -> tuple[str, ...]:
    """The settings marked SECRET, in the model's order."""
    return tuple(
        name
        for name, field in ServerSettings.model_fields.items()
        if isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get("secret")
    )


def variables_for(env: Mapping[str, str], names: Iterable[str]) -> list[str]:
    """The variables of `env` that ServerSettings reads as the settings `names`, in every spelling
    it reads: names are compared lower-cased, as pydantic-settings compares them (so
    `offload_encryption_key`, `Offload_Namespace_Key` and even `OFFLOAD_NAMESPACE_\u212aEY`, whose
    Kelvin sign lower-cases to `k`, are `namespace_key`)."""
    wanted = {f"{ENV_PREFIX}{name}".lower() for name in names}
    return [variable for variable in env if variable.lower() in wanted]


def from_environment(env: Mapping[str, str], name: str) -> str | None:
    """The value ServerSettings reads from `env` for the setting `name` (of several spellings, the
    last, as pydantic-settings keeps it), or None."""
    found = variables_for(env, (name,))
    return env[found[-1]] if found else None


def option(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def add_settings_options(parser: argparse.ArgumentParser, *, defaults: dict[str, str] | None = None) -> None:
    """One option per ServerSettings field, documented from the field itself. A boolean field is a
    plain flag (`--redis-cluster`), with `--no-redis-cluster` to turn it off. `defaults`: what a
    command does without an option instead of the field's default (wrap: a free port), as shown."""
    for name, field in ServerSettings.model_fields.items():
        env = f"OFFLOAD_{name.upper()}"
        default = (defaults or {}).get(name, field.get_default(call_default_factory=True))
        # None: the built-in default, which the description names in parentheses
        help = (
            f"{field.description} [env {env}]"
            if default is None
            else f"{field.description} [env {env}; default {default}]"
        )
        if field.annotation is bool:
            parser.add_argument(option(name), dest=name, default=None, action=argparse.BooleanOptionalAction, help=help)
        else:
            parser.add_argument(option(name), dest=name, default=None, metavar=name.upper(), help=help)


def resolve_settings(args: argparse.Namespace) -> ServerSettings:
    """CLI values override the environment, which overrides the defaults."""
    overrides = {
        name: getattr(args, name) for name in ServerSettings.model_fields if getattr(args, name, None) is not None
    }
    return ServerSettings(**overrides)  # lists and maps are parsed by the fields' own validators


def settings_error(exc: Exception) -> str:
    """One line per invalid setting, naming its option and variable: what is wrong and what is expected."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return f"offload-proxy: invalid settings: {exc}"
    lines = []
    for error in exc.errors():
        name = str(error["loc"][0]) if error.get("loc") else ""
        message = error["msg"].removeprefix("Value error, ")
        where = f"{option(name)} (env OFFLOAD_{name.upper()})" if name in ServerSettings.model_fields else "settings"
        given = error.get("input")
        shown = "" if error["type"] == "value_error" or not isinstance(given, (str, int, float)) else f" {given!r}"
        if len(error.get("loc") or ()) > 1:  # an item of a list or map: which one
            shown += f" (at {'.'.join(str(part) for part in error['loc'][1:])})"
        lines.append(f"offload-proxy: invalid {where}{shown}: {message}")
    return "\n".join(lines)


def listen_problem(host: str, port: int) -> str | None:
    """Why the server could not listen on host:port (one line), else None: checked before the
    banner, where uvicorn would only log `[Errno 98]` after it."""
    import errno
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            sock.bind(address)
    except socket.gaierror as exc:
        return f"--host {host}: cannot be resolved ({exc.strerror})"
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return f"port {port} is in use: choose another with --port"
        return f"cannot listen on {host}:{port}: {exc.strerror} (choose another --host or --port)"
    return None
