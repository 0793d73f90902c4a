"""How each agent is pointed at the proxy, and where the proxy's upstream is when the user's
environment already sent the agent somewhere (proxy.wrap._agents)."""

from __future__ import annotations

import json

from proxy.wrap import _agents as agents
from proxy.wrap._agents import AGENTS, CHATGPT_BACKEND, codex_overrides, environment
from proxy.wrap._command import bypass_proxies, connect_host, split_agent_args

ROOT = "http://127.0.0.1:41000"


def urls(agent: agents.Agent, env: dict[str, str]) -> dict[str, str]:
    """The upstream settings `agent` takes from `env`, without where each was found."""
    return {name: found.url for name, found in agent.upstreams(env).items()}


def test_claude_code_gets_the_proxys_root():
    args, env = environment(AGENTS["claude"], ROOT, {"PATH": "/bin", "ANTHROPIC_BASE_URL": "https://gw.example"})
    assert args == [] and env == {"PATH": "/bin", "ANTHROPIC_BASE_URL": ROOT}


def test_codex_gets_its_built_in_provider_over_websocket_or_a_provider_entry_without_it():
    assert agents.RESPONSES_WEBSOCKET is True  # the proxy serves the Responses WebSocket mode
    assert codex_overrides(ROOT) == codex_overrides(ROOT, websocket=True)
    assert codex_overrides(ROOT, websocket=False) == [
        "-c",
        'model_provider="offload"',
        "-c",
        'model_providers.offload.name="offload-proxy"',
        "-c",
        f'model_providers.offload.base_url="{ROOT}/v1"',
        "-c",
        'model_providers.offload.wire_api="responses"',
        "-c",
        "model_providers.offload.requires_openai_auth=true",
        "-c",
        "model_providers.offload.supports_websockets=false",
    ]
    # the built-in provider itself, WebSocket and all (also where the user's config chose another)
    assert codex_overrides(ROOT, websocket=True) == [
        "-c",
        'model_provider="openai"',
        "-c",
        f'openai_base_url="{ROOT}/v1"',
    ]
    # a value TOML would misread is escaped
    assert codex_overrides('http://h:1/"x', websocket=True)[-1] == 'openai_base_url="http://h:1/\\"x/v1"'


def test_opencode_config_of_other_json_types_is_replaced_not_a_crash():
    for odd in ({"provider": [1]}, {"provider": {"openai": "x"}}, {"provider": {"openai": {"options": 3}}}, [1], "s"):
        _, env = environment(AGENTS["opencode"], ROOT, {"OPENCODE_CONFIG_CONTENT": json.dumps(odd)})
        assert json.loads(env["OPENCODE_CONFIG_CONTENT"])["provider"]["openai"]["options"]["baseURL"] == f"{ROOT}/v1"


def test_opencode_keeps_the_users_inline_config():
    mine = {
        "model": "openai/gpt-5",
        "provider": {"openai": {"options": {"baseURL": "https://gw/v1", "timeout": 5}, "models": {"gpt-5": {}}}},
    }
    _, env = environment(AGENTS["opencode"], ROOT, {"OPENCODE_CONFIG_CONTENT": json.dumps(mine)})
    assert json.loads(env["OPENCODE_CONFIG_CONTENT"]) == {
        "model": "openai/gpt-5",
        "provider": {
            "openai": {"options": {"baseURL": f"{ROOT}/v1", "timeout": 5}, "models": {"gpt-5": {}}},
            "anthropic": {"options": {"baseURL": f"{ROOT}/v1"}},
        },
    }
    for broken in ("not json", "[1]", '{"provider": 3}', '{"provider": {"openai": {"options": "x"}}}'):
        _, env = environment(AGENTS["opencode"], ROOT, {"OPENCODE_CONFIG_CONTENT": broken})
        assert json.loads(env["OPENCODE_CONFIG_CONTENT"])["provider"]["openai"]["options"] == {"baseURL": f"{ROOT}/v1"}


def test_aider_gets_its_documented_variables():
    _, env = environment(AGENTS["aider"], ROOT, {})
    assert env == {"OPENAI_API_BASE": f"{ROOT}/v1", "ANTHROPIC_API_BASE": ROOT}


def test_the_users_destination_becomes_the_upstream():
    assert urls(AGENTS["claude"], {"ANTHROPIC_BASE_URL": "https://gw.example"}) == {
        "anthropic_upstream": "https://gw.example"
    }
    assert urls(AGENTS["claude"], {"ANTHROPIC_BASE_URL": "  "}) == {}
    assert urls(AGENTS["claude"], {"ANTHROPIC_BASE_URL": "gw.example"}) == {}  # not a URL: ignored
    assert urls(AGENTS["aider"], {"OPENAI_BASE_URL": "https://a/v1", "ANTHROPIC_BASE_URL": "https://b"}) == {
        "upstream": "https://a/v1",
        "anthropic_upstream": "https://b",
    }
    assert urls(AGENTS["aider"], {"OPENAI_API_BASE": "https://c/v1", "OPENAI_BASE_URL": "https://a/v1"}) == {
        "upstream": "https://c/v1"
    }
    config = {"provider": {"anthropic": {"options": {"baseURL": "https://gw/v1"}}}}
    assert urls(AGENTS["opencode"], {"OPENCODE_CONFIG_CONTENT": json.dumps(config)}) == {
        "anthropic_upstream": "https://gw/v1"
    }


def test_codex_upstream_from_its_variable_its_config_or_its_chatgpt_login(tmp_path):
    home = {"CODEX_HOME": str(tmp_path)}
    assert urls(AGENTS["codex"], home) == {}
    assert urls(AGENTS["codex"], {**home, "OPENAI_BASE_URL": "https://gw/v1"}) == {"upstream": "https://gw/v1"}
    (tmp_path / "config.toml").write_text('openai_base_url = "https://configured/v1"\n')
    assert urls(AGENTS["codex"], home) == {"upstream": "https://configured/v1"}
    (tmp_path / "config.toml").write_text("not = [toml\n")
    (tmp_path / "auth.json").write_text(json.dumps({"auth_mode": "chatgpt", "tokens": {"access_token": "x"}}))
    assert urls(AGENTS["codex"], home) == {"upstream": CHATGPT_BACKEND}
    (tmp_path / "auth.json").write_text(json.dumps({"auth_mode": "apikey", "OPENAI_API_KEY": "sk-x"}))
    assert urls(AGENTS["codex"], home) == {}
    (tmp_path / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": None, "tokens": {"access_token": "x"}}))
    assert urls(AGENTS["codex"], home) == {"upstream": CHATGPT_BACKEND}  # an older auth.json, no auth_mode
    assert urls(AGENTS["codex"], {**home, "OPENAI_API_KEY": "sk-env"}) == {}
    (tmp_path / "auth.json").write_text("{broken")
    assert urls(AGENTS["codex"], home) == {}
    assert urls(AGENTS["codex"], {"HOME": str(tmp_path / "nobody")}) == {}


def test_the_agents_arguments_follow_the_double_dash_unchanged():
    assert split_agent_args(["wrap", "codex", "--keep"]) == (["wrap", "codex", "--keep"], [])
    assert split_agent_args(["wrap", "codex", "--", "exec", "--", "-x"]) == (["wrap", "codex"], ["exec", "--", "-x"])


def test_loopback_requests_bypass_the_users_http_proxy():
    env = {"HTTPS_PROXY": "http://corp:3128", "NO_PROXY": "a.example, 127.0.0.1"}
    bypass_proxies(env, "127.0.0.1")
    assert env == {"HTTPS_PROXY": "http://corp:3128", "NO_PROXY": "a.example, 127.0.0.1", "no_proxy": "127.0.0.1"}
    untouched = {"PATH": "/bin"}
    bypass_proxies(untouched, "127.0.0.1")
    assert untouched == {"PATH": "/bin"}
    assert [connect_host(h) for h in ("0.0.0.0", "::", "::1", "127.0.0.2")] == [
        "127.0.0.1",
        "[::1]",
        "[::1]",
        "127.0.0.2",
    ]


def test_each_upstream_says_where_it_was_found(tmp_path):
    """A message about an upstream taken from the agent's environment names what the user set."""
    assert AGENTS["claude"].upstreams({"ANTHROPIC_BASE_URL": "http://"}) == {
        "anthropic_upstream": ("http://", "ANTHROPIC_BASE_URL")
    }
    assert AGENTS["aider"].upstreams({"OPENAI_BASE_URL": "https://a/v1"})["upstream"].source == "OPENAI_BASE_URL"
    (tmp_path / "config.toml").write_text('openai_base_url = "https://configured/v1"\n')
    assert AGENTS["codex"].upstreams({"CODEX_HOME": str(tmp_path)})["upstream"].source == (
        f"openai_base_url in {tmp_path}/config.toml"
    )
    config = {"provider": {"openai": {"options": {"baseURL": "https://gw/v1"}}}}
    assert AGENTS["opencode"].upstreams({"OPENCODE_CONFIG_CONTENT": json.dumps(config)})["upstream"].source == (
        "provider.openai.options.baseURL in OPENCODE_CONFIG_CONTENT"
    )


def test_files_and_variables_nested_too_deep_are_unreadable_not_a_crash(tmp_path):
    """A JSON or TOML nesting past Python's recursion limit raises RecursionError, not ValueError."""
    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "auth.json").write_text(deep)
    (tmp_path / "config.toml").write_text(f"a = {deep}\n")
    assert AGENTS["codex"].upstreams({"CODEX_HOME": str(tmp_path)}) == {}
    for content in (deep, '{"provider": ' + deep + "}"):
        assert AGENTS["opencode"].upstreams({"OPENCODE_CONFIG_CONTENT": content}) == {}
        _, env = environment(AGENTS["opencode"], ROOT, {"OPENCODE_CONFIG_CONTENT": content})
        assert json.loads(env["OPENCODE_CONFIG_CONTENT"])["provider"]["openai"]["options"] == {"baseURL": f"{ROOT}/v1"}
