"""What `offload-proxy serve` says once at startup: where it listens, where each API goes, where
content is stored, what it offloads, who may call it, and where its dashboard and metrics are.

Built from the settings alone (no store, no network), so it goes out before the first worker
starts. A Redis URL is shown without its password; no key or token is ever shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from proxy import __version__
from proxy.config import ServerSettings


def redacted_url(url: str) -> str:
    """`url` without its password (`redis://user:***@host`) nor its query's values (redis-py
    also reads `?password=`); the rest as written."""
    parts = urlsplit(url)
    if parts.password is not None:
        host = parts.netloc.rpartition("@")[2]
        parts = parts._replace(netloc=f"{parts.username or ''}:***@{host}")
    if parts.query:
        parts = parts._replace(query="&".join(f"{pair.partition('=')[0]}=***" for pair in parts.query.split("&")))
    return urlunsplit(parts)


def listen_url(settings: ServerSettings) -> str:
    host = settings.host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{settings.port}"


def _store(settings: ServerSettings) -> str:
    if settings.redis_url:
        cluster = " (cluster)" if settings.redis_cluster or "+cluster://" in settings.redis_url else ""
        return f"Redis {redacted_url(settings.redis_url)}{cluster}"
    return f"SQLite {(settings.data_dir / 'offload.sqlite3').resolve()}"


def _offload(settings: ServerSettings, tenants: int) -> str:
    defaults = settings.request_defaults()
    compacted = (
        f"its tool results over {defaults.tool_result_limit()} tokens compacted (the newest too over "
        f"{defaults.max_fresh_tool_message_tokens})"
    )
    what = {
        "auto": f"{compacted}, then older turns summarised if still too large",
        "compact": compacted,
        "compress": "its older turns summarised",
    }.get(defaults.mode)
    if defaults.mode == "observe":
        line = "mode observe (requests go upstream unchanged; what auto would have done recorded beside them)"
    elif what is None:
        line = "mode off (requests go upstream unchanged)"
    else:
        line = (
            f"mode {defaults.mode}: a history over {defaults.max_total_tokens} tokens gets {what}; reload tools "
            f"{'on' if defaults.reload_tools else 'off'} (at most {defaults.max_reload_rounds} rounds)"
        )
    if defaults.holdout > 0 and defaults.mode not in ("off", "observe"):
        line += (
            f"; holdout: {defaults.holdout:.0%} of sessions forwarded unchanged as a control, the arms "
            "compared in the statistics"
        )
    overrides = (
        f"; {tenants} tenant(s) and X-Offload-* headers may change them"
        if tenants
        else "; X-Offload-* headers may change them"
    )
    return line + overrides


def _auth(settings: ServerSettings, tenants: Mapping[str, Mapping[str, Any]]) -> str:
    keyed = sum(1 for entry in tenants.values() if entry.get("api_keys"))
    held = [
        name
        for name, key in (
            ("--upstream-api-key", settings.upstream_api_key),
            ("--anthropic-api-key", settings.anthropic_api_key),
        )
        if key
    ]
    if held:
        line = (
            f"proxy keys required ({keyed} tenant(s) with api_keys); the upstream gets the operator's key "
            f"({', '.join(held)}) or a tenant's own"
        )
    else:
        line = "client keys relayed: each caller's own provider key goes upstream and is its namespace"
        if keyed:
            line += f"; proxy keys of {keyed} tenant(s) accepted too"
    if settings.allow_anonymous:
        line += "; anonymous requests served too (--allow-anonymous: one shared namespace)"
    return line


def _context_management(settings: ServerSettings) -> str:
    """Who applies the providers' context management, for each of the server's upstreams."""
    from proxy.upstream.base_url import emulates

    setting = settings.request_defaults().context_management
    who = {
        base: "emulated by the proxy" if emulates(setting, base) else "relayed to the provider"
        for base in (settings.upstream_base, settings.anthropic_base)
    }
    return (
        f"{setting}: openai {who[settings.upstream_base]}, anthropic {who[settings.anthropic_base]} "
        "(--context-management)"
    )


def _websocket(settings: ServerSettings) -> str:
    """The Responses WebSocket mode: served, and how its responses reach the upstream."""
    per_tenant = settings.ws_connections_per_tenant or "no limit"
    root = listen_url(settings).replace("http://", "ws://", 1)
    return (
        f"{root}/v1/responses served (Responses WebSocket mode; the upstream reached over HTTP/SSE); "
        f"{per_tenant} connection(s) per tenant, {settings.ws_connections or 'no limit'} per worker, "
        f"idle {settings.ws_idle_timeout:g} s"
    )


def banner_lines(settings: ServerSettings, tenants: Mapping[str, Mapping[str, Any]] | None = None) -> list[str]:
    """The startup banner, one string per line. `tenants`: the tenants file's tables."""
    tenants = tenants or {}
    root = listen_url(settings)
    metrics = f"{root}/metrics" + (" (admin token required)" if settings.admin_token else "")
    return [
        f"offload-proxy {__version__}",
        f"  listening   {root}  (OpenAI SDKs: base_url {root}/v1; Anthropic SDKs and Claude Code: {root})",
        f"  openai      {settings.upstream_base}/…  (chat/completions and responses managed, the rest relayed)",
        f"  websocket   {_websocket(settings)}",
        f"  anthropic   {settings.anthropic_base}/…  (messages managed, the rest relayed)",
        f"  store       {_store(settings)}",
        f"  offload     {_offload(settings, len(tenants))}",
        f"  context     {_context_management(settings)}",
        f"  auth        {_auth(settings, tenants)}",
        f"  dashboard   {root}/dashboard",
        f"  metrics     {metrics}",
        f"  workers     {settings.workers}; logs {settings.log_format} at {settings.log_level}",
    ]
