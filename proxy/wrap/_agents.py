"""The agents `wrap` runs, and how each one is pointed at the proxy.

Each agent is pointed the way its own documentation says, through its environment or its command
line, so that no configuration file of the user's is read for writing, let alone rewritten, and the
user's credentials flow exactly as the agent sends them (its key, or its login):

- Claude Code: `ANTHROPIC_BASE_URL` = the proxy's root (Claude Code appends `/v1/messages`).
- Codex CLI: its built-in OpenAI provider with only the base URL changed (`-c model_provider="openai"
  -c openai_base_url=…`): it talks the Responses WebSocket mode to the proxy as it would to OpenAI,
  and compacts remotely through it (compaction v2). `RESPONSES_WEBSOCKET = False` would send it
  through a provider entry of its own instead (`model_providers.offload`: the proxy's `/v1`,
  `wire_api = "responses"`, the OpenAI login (`requires_openai_auth`), `supports_websockets =
  false`), for a proxy without the WebSocket mode. The user's own `-c` options come after these,
  so they win.
- opencode: `OPENCODE_CONFIG_CONTENT` (inline configuration, merged by opencode over its files):
  `provider.openai.options.baseURL` and `provider.anthropic.options.baseURL` = the proxy's `/v1`
  (the AI SDK's base URLs include `/v1`); a `OPENCODE_CONFIG_CONTENT` of the user's is kept, with
  these two keys set in it.
- aider: `OPENAI_API_BASE` = the proxy's `/v1` (aider's documented variable, what
  `--openai-api-base` sets) and `ANTHROPIC_API_BASE` = the proxy's root (LiteLLM's, read before
  `ANTHROPIC_BASE_URL`; it appends `/v1/messages`).

Where the user's environment already sends the agent somewhere else (a gateway in
`ANTHROPIC_BASE_URL`, `OPENAI_BASE_URL`, …), that becomes the proxy's upstream unless
`--upstream` / `--anthropic-upstream` say otherwise: wrapping changes the route, not the
destination. Codex logged in with ChatGPT (its auth.json) talks to the ChatGPT backend, so the
proxy's upstream is that backend by default.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

# The proxy serves the Responses API's WebSocket mode (proxy/http/websocket): Codex runs on its
# built-in provider (`openai_base_url`), WebSocket and all, not on a provider entry without it.
RESPONSES_WEBSOCKET = True
CODEX_PROVIDER = "offload"
CHATGPT_BACKEND = "https://chatgpt.com/backend-api/codex"  # what Codex talks to when logged in with ChatGPT

Env = Mapping[str, str]


class Upstream(NamedTuple):
    """Where the user's environment sends the agent, and what said so (named in a message about it)."""

    url: str
    source: str  # `ANTHROPIC_BASE_URL`, `openai_base_url in ~/.codex/config.toml`, …


@dataclass(frozen=True)
class Pointing:
    """How the agent is sent to the proxy: arguments before the user's, variables added to its environment."""

    args: list[str]
    env: dict[str, str]


@dataclass(frozen=True)
class Agent:
    name: str  # as `wrap` takes it
    title: str
    executable: str
    install: str  # how to install it, said when it is not on PATH
    point: Callable[[str, Env], Pointing]  # (the proxy's root URL, the agent's environment) -> Pointing
    upstreams: Callable[[Env], dict[str, Upstream]]  # the user's environment -> default upstream settings


def toml_string(value: str) -> str:
    """A TOML basic string, as `codex -c key=<value>` parses it."""
    return json.dumps(value)  # JSON's string escapes are TOML's (\", \\, \uXXXX)


def _first(env: Env, *names: str) -> Upstream | None:
    for name in names:
        if value := env.get(name, "").strip():
            return Upstream(value, name)
    return None


def _set(settings: dict[str, Upstream], name: str, found: Upstream | None) -> dict[str, Upstream]:
    if found and found.url.startswith(("http://", "https://")):
        settings[name] = found
    return settings


# ---------------------------------------------------------------- Claude Code


def point_claude(root: str, env: Env) -> Pointing:
    return Pointing([], {"ANTHROPIC_BASE_URL": root})


def claude_upstreams(env: Env) -> dict[str, Upstream]:
    return _set({}, "anthropic_upstream", _first(env, "ANTHROPIC_BASE_URL"))


# ---------------------------------------------------------------- Codex CLI


def codex_overrides(root: str, *, websocket: bool = RESPONSES_WEBSOCKET) -> list[str]:
    """The `-c` options that send Codex's Responses requests to the proxy."""
    base = f"{root}/v1"
    if websocket:  # the built-in provider, also where the user's config chose another one
        return ["-c", f"model_provider={toml_string('openai')}", "-c", f"openai_base_url={toml_string(base)}"]
    entry = f"model_providers.{CODEX_PROVIDER}"
    pairs = [
        ("model_provider", toml_string(CODEX_PROVIDER)),
        (f"{entry}.name", toml_string("offload-proxy")),
        (f"{entry}.base_url", toml_string(base)),
        (f"{entry}.wire_api", toml_string("responses")),
        (f"{entry}.requires_openai_auth", "true"),  # the user's OpenAI login: API key or ChatGPT
        (f"{entry}.supports_websockets", "false"),
    ]
    return [part for key, value in pairs for part in ("-c", f"{key}={value}")]


def point_codex(root: str, env: Env) -> Pointing:
    return Pointing(codex_overrides(root), {})


def codex_home(env: Env) -> Path:
    return Path(env.get("CODEX_HOME") or Path(env.get("HOME") or Path.home()) / ".codex")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):  # unreadable, not JSON, nested too deep
        return None


def codex_uses_chatgpt(env: Env) -> bool:
    """Is Codex logged in with ChatGPT (not an API key)? From its auth.json, read only."""
    auth = _read_json(codex_home(env) / "auth.json")
    if not isinstance(auth, dict):
        return False
    mode = str(auth.get("auth_mode") or "").lower()
    if mode:
        return mode.startswith("chatgpt")
    return bool(auth.get("tokens")) and not auth.get("OPENAI_API_KEY") and not _first(env, "OPENAI_API_KEY")


def codex_upstreams(env: Env) -> dict[str, Upstream]:
    path = codex_home(env) / "config.toml"
    try:
        config = tomllib.loads(path.read_text())
    except (OSError, ValueError, RecursionError):  # unreadable, not TOML, nested too deep: Codex will say so
        config = {}
    configured = config.get("openai_base_url")
    base = _first(env, "OPENAI_BASE_URL") or (
        Upstream(configured, f"openai_base_url in {path}") if isinstance(configured, str) else None
    )
    if base is None and codex_uses_chatgpt(env):
        base = Upstream(CHATGPT_BACKEND, "Codex's ChatGPT login")
    return _set({}, "upstream", base)


# ---------------------------------------------------------------- opencode


def _opencode_config(env: Env) -> dict[str, Any]:
    try:
        config = json.loads(env.get("OPENCODE_CONFIG_CONTENT") or "{}")
    except (ValueError, RecursionError):  # not JSON, or nested too deep: opencode could not read it either
        return {}
    return config if isinstance(config, dict) else {}


def _provider_base(config: dict[str, Any], provider: str) -> Upstream | None:
    providers = config.get("provider")
    entry = providers.get(provider) if isinstance(providers, dict) else None
    options = entry.get("options") if isinstance(entry, dict) else None
    base = options.get("baseURL") if isinstance(options, dict) else None
    return (
        Upstream(base, f"provider.{provider}.options.baseURL in OPENCODE_CONFIG_CONTENT")
        if isinstance(base, str)
        else None
    )


def point_opencode(root: str, env: Env) -> Pointing:
    config = _opencode_config(env)
    providers = config.setdefault("provider", {})
    if not isinstance(providers, dict):
        providers = config["provider"] = {}
    for name in ("openai", "anthropic"):
        entry = providers.setdefault(name, {})
        if not isinstance(entry, dict):
            entry = providers[name] = {}
        options = entry.setdefault("options", {})
        if not isinstance(options, dict):
            options = entry["options"] = {}
        options["baseURL"] = f"{root}/v1"
    return Pointing([], {"OPENCODE_CONFIG_CONTENT": json.dumps(config)})


def opencode_upstreams(env: Env) -> dict[str, Upstream]:
    config = _opencode_config(env)
    settings = _set({}, "upstream", _provider_base(config, "openai"))
    return _set(settings, "anthropic_upstream", _provider_base(config, "anthropic"))


# ---------------------------------------------------------------- aider


def point_aider(root: str, env: Env) -> Pointing:
    return Pointing([], {"OPENAI_API_BASE": f"{root}/v1", "ANTHROPIC_API_BASE": root})


def aider_upstreams(env: Env) -> dict[str, Upstream]:
    settings = _set({}, "upstream", _first(env, "OPENAI_API_BASE", "OPENAI_BASE_URL"))
    return _set(settings, "anthropic_upstream", _first(env, "ANTHROPIC_API_BASE", "ANTHROPIC_BASE_URL"))


AGENTS: dict[str, Agent] = {
    agent.name: agent
    for agent in (
        Agent(
            "claude",
            "Claude Code",
            "claude",
            "npm install -g @anthropic-ai/claude-code (or: curl -fsSL https://claude.ai/install.sh | bash)",
            point_claude,
            claude_upstreams,
        ),
        Agent(
            "codex",
            "Codex CLI",
            "codex",
            "npm install -g @openai/codex (or: brew install --cask codex)",
            point_codex,
            codex_upstreams,
        ),
        Agent(
            "opencode",
            "opencode",
            "opencode",
            "npm install -g opencode-ai (or: curl -fsSL https://opencode.ai/install | bash)",
            point_opencode,
            opencode_upstreams,
        ),
        Agent(
            "aider",
            "aider",
            "aider",
            "python -m pip install aider-install && aider-install",
            point_aider,
            aider_upstreams,
        ),
    )
}


def names() -> str:
    """`claude, codex, opencode or aider`."""
    listed = list(AGENTS)
    return f"{', '.join(listed[:-1])} or {listed[-1]}"


def environment(agent: Agent, root: str, base: Env | None = None) -> tuple[list[str], dict[str, str]]:
    """The agent's arguments before the user's and its whole environment, pointed at `root`."""
    env = dict(os.environ if base is None else base)
    pointing = agent.point(root, env)
    env.update(pointing.env)
    return pointing.args, env
