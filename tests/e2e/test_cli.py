"""`offload-proxy serve` options, environment variables and --help."""

from __future__ import annotations

import subprocess
import sys

import pytest

from proxy.cli import build_parser, resolve_settings
from proxy.config import ServerSettings


def test_help_documents_every_option():
    out = subprocess.run(
        [sys.executable, "-m", "proxy", "serve", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for option in (
        "--host",
        "--port",
        "--upstream",
        "--redis-url",
        "--data-dir",
        "--workers",
        "--log-level",
        "OFFLOAD_UPSTREAM",
        "OFFLOAD_REDIS_URL",
    ):
        assert option in out


def test_cli_overrides_env_overrides_default(monkeypatch):
    monkeypatch.setenv("OFFLOAD_UPSTREAM", "http://env.example/v1")
    monkeypatch.setenv("OFFLOAD_PORT", "9001")
    settings = resolve_settings(build_parser().parse_args(["serve", "--port", "9002"]))
    assert settings.upstream == "http://env.example/v1"
    assert settings.port == 9002
    assert settings.redis_url is None and settings.workers == 1


def test_invalid_option_is_a_clear_error():
    with pytest.raises(SystemExit) as info:
        from proxy.cli import main

        main(["serve", "--port", "not-a-port"])
    assert "port" in str(info.value)


def test_python_m_proxy_serve_runs_with_embedded_store(tmp_path):
    from tests.harness.servers import ProxyProcess

    with ProxyProcess("--log-level", "warning", data_dir=tmp_path / "data"):
        assert (tmp_path / "data" / "offload.sqlite3").exists()


def settings_from(*argv: str) -> ServerSettings:
    return resolve_settings(build_parser().parse_args(["serve", *argv]))


def serve_error(*argv: str) -> str:
    from proxy.cli import main

    with pytest.raises(SystemExit) as info:
        main(["serve", *argv])
    return str(info.value.code)


@pytest.mark.parametrize(
    "value, expected",
    [
        ("api.example.com", ["api.example.com"]),
        ("api.example.com, eu.example.com:8443", ["api.example.com", "eu.example.com:8443"]),
        ('["api.example.com", "eu.example.com:8443"]', ["api.example.com", "eu.example.com:8443"]),
        ("", []),
    ],
)
def test_upstream_allowlist_takes_commas_or_json(value, expected, monkeypatch):
    assert settings_from("--upstream-allowlist", value).upstream_allowlist == expected
    monkeypatch.setenv("OFFLOAD_UPSTREAM_ALLOWLIST", value)  # the environment variable alike
    assert ServerSettings().upstream_allowlist == expected
    assert settings_from().upstream_allowlist == expected


@pytest.mark.parametrize("value", ['["api.example.com"', "https://api.example.com/v1", "a b"])
def test_bad_upstream_allowlist_names_the_option_and_the_forms(value):
    message = serve_error("--upstream-allowlist", value)
    assert message.startswith("offload-proxy: invalid --upstream-allowlist (env OFFLOAD_UPSTREAM_ALLOWLIST)")
    assert "separated by commas" in message and '["api.example.com"]' in message
    assert "Expecting value: line 1 column 1" not in message and "\n" not in message


@pytest.mark.parametrize(
    "value, expected",
    [
        ('{"max_reload_rounds": 8}', {"max_reload_rounds": 8}),
        ("max_reload_rounds=8, max_total_tokens=50000", {"max_reload_rounds": 8, "max_total_tokens": 50000}),
    ],
)
def test_header_caps_takes_json_or_pairs(value, expected, monkeypatch):
    assert settings_from("--header-caps", value).header_caps == expected
    monkeypatch.setenv("OFFLOAD_HEADER_CAPS", value)
    assert ServerSettings().header_caps == expected


@pytest.mark.parametrize("value", ["{max_reload_rounds: 8}", "max_reload_rounds", "{"])
def test_bad_header_caps_names_the_option_and_the_forms(value):
    message = serve_error("--header-caps", value)
    assert message.startswith("offload-proxy: invalid --header-caps (env OFFLOAD_HEADER_CAPS)")
    assert '{"max_reload_rounds": 8}' in message and "max_reload_rounds=8" in message
    assert "Expecting value: line 1 column 1" not in message


def test_non_integer_header_cap_names_the_option_and_the_cap():
    message = serve_error("--header-caps", "max_reload_rounds=eight")
    assert "--header-caps" in message and "'eight'" in message and "max_reload_rounds" in message


BOOLEANS = [name for name, field in ServerSettings.model_fields.items() if field.annotation is bool]


def test_every_boolean_setting_is_a_plain_flag(monkeypatch):
    assert {"metrics_tenant_label", "redis_cluster", "allow_anonymous"} <= set(BOOLEANS)
    monkeypatch.setenv("OFFLOAD_REDIS_URL", "redis://127.0.0.1:6379/0")  # --redis-cluster needs one
    for name in BOOLEANS:
        flag = "--" + name.replace("_", "-")
        assert getattr(settings_from(flag), name) is True
        assert getattr(settings_from(), name) is ServerSettings.model_fields[name].default
        monkeypatch.setenv(f"OFFLOAD_{name.upper()}", "true")
        assert getattr(settings_from(), name) is True
        assert getattr(settings_from("--no-" + name.replace("_", "-")), name) is False  # CLI over env


def test_boolean_flags_together_as_documented():
    s = settings_from(
        "--metrics-tenant-label",
        "--redis-cluster",
        "--redis-url",
        "redis://h:6379",
        "--allow-anonymous",
        "--port",
        "9000",
    )
    assert s.metrics_tenant_label and s.redis_cluster and s.allow_anonymous and s.port == 9000


def test_help_is_generated_from_every_field():
    out = subprocess.run(
        [sys.executable, "-m", "proxy", "serve", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for name in ServerSettings.model_fields:
        assert "--" + name.replace("_", "-") in out and f"OFFLOAD_{name.upper()}" in out
    for name in BOOLEANS:
        assert "--no-" + name.replace("_", "-") in out


@pytest.mark.parametrize(
    "content, message",
    [
        ('[tenants.t]\napi_keys = ["short"]\n', "tenant 't': a proxy key needs at least"),
        ('[tenants.t]\nmax_total_tokens = "lots"\n', "tenant 't': max_total_tokens"),
        ("[tenants]\nt = 5\n", "one table of settings per tenant"),
        ("[tenants.t\n", "invalid --tenants-file"),
    ],
)
def test_bad_tenants_file_is_a_one_line_error_before_serving(tmp_path, content, message):
    path = tmp_path / "tenants.toml"
    path.write_text(content)
    error = serve_error("--tenants-file", str(path))
    assert message in error and "\n" not in error and "Traceback" not in error
    assert "missing" in serve_error("--tenants-file", str(tmp_path / "missing.toml")) or "No such file" in serve_error(
        "--tenants-file", str(tmp_path / "missing.toml")
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--mode", "fast"], "--mode"),
        (["--max-total-tokens", "-5"], "--max-total-tokens"),
        (["--reload-tools", "maybe"], "--reload-tools"),
        (["--log-level", "loud"], "--log-level"),
        (["--upstream", "ftp://x"], "--upstream"),
        (["--header-caps", "bogus=3"], "bogus is not a numeric setting"),
        (["--redis-cluster"], "--redis-cluster needs --redis-url"),
        (["--data-dir", "/proc/forbidden"], "--data-dir /proc/forbidden is not a writable folder"),
    ],
)
def test_every_invalid_option_is_one_line_naming_it(argv, message):
    error = serve_error(*argv)
    assert message in error and "\n" not in error and "Traceback" not in error


def test_unknown_key_in_the_tenants_file_is_named(tmp_path):
    path = tmp_path / "tenants.toml"
    path.write_text("[tenants.t]\nmax_total_token = 5000\n")  # a typo
    assert "unknown key max_total_token" in serve_error("--tenants-file", str(path))


def test_a_busy_port_is_one_line_before_the_banner(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "proxy",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--data-dir",
                str(tmp_path / "data"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    assert done.returncode == 1
    assert done.stderr.strip() == f"offload-proxy: port {port} is in use: choose another with --port"


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--upstream", "http://127.0.0.1:9100/v1/chat/completions"],
            "offload-proxy: invalid --upstream (env OFFLOAD_UPSTREAM): 'http://127.0.0.1:9100/v1/chat/completions' is an "
            "endpoint, not the API's base URL (as an OpenAI SDK's base_url is written): drop '/chat/completions', i.e. give "
            "http://127.0.0.1:9100/v1",
        ),
        (
            ["--upstream", "https://api.openai.com/v1/responses"],
            "drop '/responses', i.e. give https://api.openai.com/v1",
        ),
        (
            ["--anthropic-upstream", "https://api.anthropic.com/v1/messages"],
            "offload-proxy: invalid --anthropic-upstream (env OFFLOAD_ANTHROPIC_UPSTREAM): "
            "'https://api.anthropic.com/v1/messages' is an endpoint, not the API's base URL (as ANTHROPIC_BASE_URL is "
            "written): drop '/v1/messages', i.e. give https://api.anthropic.com",
        ),
        (
            ["--upstream", "api.openai.com/v1"],
            "offload-proxy: invalid --upstream (env OFFLOAD_UPSTREAM): 'api.openai.com/v1' has no scheme: give "
            "https://api.openai.com/v1 (the API's base URL, with http:// or https://)",
        ),
        (["--upstream", "localhost:8000/v1"], "'localhost:8000/v1' has no scheme: give http://localhost:8000/v1"),
    ],
)
def test_an_upstream_that_is_no_base_url_is_refused_saying_what_to_give(tmp_path, argv, message):
    """At startup, in one line on stderr, exit status 1: never a request sent to
    `…/v1/chat/completions/chat/completions`, nor pydantic's pattern text."""
    done = subprocess.run(
        [sys.executable, "-m", "proxy", "serve", "--data-dir", str(tmp_path / "data"), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "pattern" not in done.stderr and "Traceback" not in done.stderr


def test_a_tenants_upstream_that_is_an_endpoint_is_refused_at_startup(tmp_path):
    path = tmp_path / "tenants.toml"
    path.write_text(
        '[tenants.acme]\napi_keys = ["sk-proxy-acme-0123456789"]\n'
        'upstream = "https://api.openai.com/v1/chat/completions"\n'
    )
    error = serve_error("--tenants-file", str(path))
    assert error == (
        f"offload-proxy: invalid --tenants-file {path}: tenant 'acme': upstream "
        "'https://api.openai.com/v1/chat/completions' is an endpoint, not the API's base URL (as an "
        "OpenAI SDK's base_url is written): drop '/chat/completions', i.e. give https://api.openai.com/v1"
    )


def test_a_yaml_tenants_file_is_served_by_python_m_proxy_serve(tmp_path, upstream):
    """PyYAML is the server's own dependency: a YAML tenants file needs nothing beyond its install
    (tests/project/test_packaging.py checks the declaration); here the served proxy reads one."""
    import httpx2

    from tests.harness.history import agent_history
    from tests.harness.servers import ProxyProcess

    path = tmp_path / "tenants.yaml"
    path.write_text("tenants:\n  team-a:\n    api_keys: [sk-proxy-team-a-0123456789]\n    max_total_tokens: 1000\n")
    with ProxyProcess(
        "--log-level",
        "warning",
        "--upstream",
        f"{upstream.url}/v1",
        "--tenants-file",
        str(path),
        "--upstream-api-key",
        "sk-operator-0123456789",
        data_dir=tmp_path / "data",
    ) as proxy:
        body = {"model": "gpt-4o", "messages": agent_history(steps=4)}
        r = httpx2.post(
            f"{proxy.url}/v1/chat/completions",
            json=body,
            timeout=30,
            headers={"authorization": "Bearer sk-proxy-team-a-0123456789"},
        )
        assert r.status_code == 200, r.text
        assert r.headers["x-offload-action"] != "none"  # the tenant's max_total_tokens from the YAML file
        assert upstream.requests[-1].headers["authorization"] == "Bearer sk-operator-0123456789"
        refused = httpx2.post(
            f"{proxy.url}/v1/chat/completions",
            json=body,
            timeout=30,
            headers={"authorization": "Bearer sk-not-a-tenant"},
        )
        assert refused.status_code == 401


def test_a_previous_encryption_key_equal_to_the_current_one_is_refused():
    key = "the one encryption key of this fleet"
    message = serve_error("--encryption-key", key, "--encryption-key-previous", key, "--namespace-key", key)
    assert message == (
        "offload-proxy: invalid settings: --encryption-key-previous is --encryption-key itself: give "
        "the key before the rotation (the old --encryption-key), or leave it out once the rotation is over"
    )
