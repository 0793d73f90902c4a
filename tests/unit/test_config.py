"""The server's settings (proxy.config): an upstream that is not an API's base URL is refused in
one message that says what to give instead (not pydantic's pattern text); which environment
variables they read, in every spelling pydantic-settings reads as a setting's name, so that `wrap`
can keep each of them from an agent."""

from __future__ import annotations

import os

import pytest
from pydantic import ValidationError

from proxy.config import ServerSettings, from_environment, secret_settings, settings_error, variables_for


def refusal(**settings: str) -> str:
    with pytest.raises(ValidationError) as info:
        ServerSettings(**settings)  # type: ignore[arg-type]
    return settings_error(info.value)


def test_an_endpoint_as_the_upstream_is_refused_naming_what_to_drop():
    assert refusal(upstream="http://127.0.0.1:9100/v1/chat/completions") == (
        "offload-proxy: invalid --upstream (env OFFLOAD_UPSTREAM): 'http://127.0.0.1:9100/v1/chat/completions' is an "
        "endpoint, not the API's base URL (as an OpenAI SDK's base_url is written): drop '/chat/completions', i.e. "
        "give http://127.0.0.1:9100/v1"
    )
    assert refusal(anthropic_upstream="https://api.anthropic.com/v1/messages") == (
        "offload-proxy: invalid --anthropic-upstream (env OFFLOAD_ANTHROPIC_UPSTREAM): "
        "'https://api.anthropic.com/v1/messages' is an endpoint, not the API's base URL (as ANTHROPIC_BASE_URL is "
        "written): drop '/v1/messages', i.e. give https://api.anthropic.com"
    )


@pytest.mark.parametrize(
    ("field", "value", "given"),
    [
        ("upstream", "api.openai.com/v1", "https://api.openai.com/v1"),
        ("upstream", "localhost:8000/v1", "http://localhost:8000/v1"),
        ("anthropic_upstream", "api.anthropic.com", "https://api.anthropic.com"),
    ],
)
def test_a_missing_scheme_names_the_expected_form_not_a_pattern(field, value, given):
    message = refusal(**{field: value})
    assert f"{value!r} has no scheme: give {given}" in message
    assert "pattern" not in message and "String should match" not in message and "\n" not in message


def test_the_environment_is_checked_alike(monkeypatch):
    monkeypatch.setenv("OFFLOAD_UPSTREAM", "https://api.openai.com/v1/responses")
    assert "drop '/responses', i.e. give https://api.openai.com/v1" in refusal()


def test_base_urls_are_kept_as_written():
    settings = ServerSettings(
        upstream="https://openrouter.ai/api/v1/", anthropic_upstream="https://api.anthropic.com/v1"
    )
    assert (
        settings.upstream == "https://openrouter.ai/api/v1/"
        and settings.upstream_base == "https://openrouter.ai/api/v1"
    )
    assert settings.anthropic_base == "https://api.anthropic.com/v1"


# ---------------------------------------------------------------- the variables read

KELVIN = "\u212a"  # KELVIN SIGN: lower-cases to an ASCII "k"
SPELLINGS = [
    "OFFLOAD_NAMESPACE_KEY",
    "offload_namespace_key",
    "Offload_Namespace_Key",
    "oFFLOAD_nAMESPACE_kEY",
    f"OFFLOAD_NAMESPACE_{KELVIN}EY",
]


@pytest.mark.parametrize("variable", SPELLINGS)
def test_every_spelling_the_settings_read_is_found(monkeypatch, variable):
    monkeypatch.setenv(variable, "ns-secret-0123456789abcdef")
    assert ServerSettings().namespace_key == "ns-secret-0123456789abcdef"  # the settings do read it
    assert variables_for(os.environ, ["namespace_key"]) == [variable]
    assert from_environment(os.environ, "namespace_key") == "ns-secret-0123456789abcdef"


def test_names_that_are_not_the_settings_are_left():
    env = {
        "OFFLOAD_NAMESPACE_KEYS": "a",
        "XOFFLOAD_NAMESPACE_KEY": "b",
        "OFFLOAD-NAMESPACE-KEY": "c",
        "OFFLOAD_NAMESPACEKEY": "d",
        "NAMESPACE_KEY": "e",
        "OFFLOAD_NAMESPACE_KEY ": "f",
        "OFFLOAD_LOG_FORMAT": "g",
    }
    assert variables_for(env, ["namespace_key", "admin_token"]) == []
    assert from_environment(env, "namespace_key") is None
    assert variables_for(env, ["log_format"]) == ["OFFLOAD_LOG_FORMAT"]


def test_of_several_spellings_the_last_is_the_value_read(monkeypatch):
    for variable in list(os.environ):
        if variable.lower().startswith("offload_"):
            monkeypatch.delenv(variable)
    monkeypatch.setenv("offload_admin_token", "first")
    monkeypatch.setenv("OFFLOAD_ADMIN_TOKEN", "second")
    assert ServerSettings().admin_token == from_environment(os.environ, "admin_token") == "second"
    assert variables_for(os.environ, ["admin_token"]) == ["offload_admin_token", "OFFLOAD_ADMIN_TOKEN"]


def test_the_secret_settings_are_marked_in_the_model():
    """A setting added later that holds a key, a token or a password in a URL is marked SECRET."""
    by_name = {
        name
        for name in ServerSettings.model_fields
        if name.endswith(("_key", "_key_previous", "_token")) or name == "redis_url"
    }
    assert set(secret_settings()) == by_name
    assert "upstream" not in secret_settings() and "log_format" not in secret_settings()


def test_the_holdout_and_its_salt_from_the_command_line_or_the_environment(monkeypatch):
    from proxy.config import ServerSettings

    assert ServerSettings(holdout=0.1, holdout_salt="s").offload_defaults()["holdout"] == 0.1
    monkeypatch.setenv("OFFLOAD_HOLDOUT", "0.2")
    monkeypatch.setenv("OFFLOAD_HOLDOUT_SALT", "fleet")
    settings = ServerSettings()
    assert settings.offload_defaults()["holdout"] == 0.2 and settings.holdout_salt == "fleet"
    with pytest.raises(ValueError, match="holdout"):
        ServerSettings(holdout=1.0)


def test_every_per_request_setting_is_declared_once():
    """The server's option for a per-request setting, its variable, its tenants-file key and its
    header's parser all come from its one OffloadSettings field: proxy.config declares none."""
    import inspect
    import re

    import proxy.config
    from proxy.core.settings import REQUEST_ONLY, SERVER_DEFAULTS, SETTING_FIELDS, OffloadSettings

    assert set(SERVER_DEFAULTS) == set(SETTING_FIELDS) - REQUEST_ONLY
    source = inspect.getsource(proxy.config)
    for name in SETTING_FIELDS:
        assert not re.search(rf"^\s+{name}\s*:", source, re.M), name
    for name in SERVER_DEFAULTS:
        field, declared = ServerSettings.model_fields[name], OffloadSettings.model_fields[name]
        assert field.default is None and field.description == declared.description and declared.description
    assert not set(REQUEST_ONLY) & set(ServerSettings.model_fields)


@pytest.mark.parametrize(
    "name, value",
    [
        ("mode", "fast"),
        ("mode", "observe"),
        ("max_total_tokens", "-5"),
        ("max_total_tokens", "1200"),
        ("reload_tools", "maybe"),
        ("reload_tools", "off"),
        ("fold", "no"),
        ("compaction_ratio", "1.5"),
        ("keep_recent", "10001"),
        ("summary_model", "a b"),
        ("context_management", "emulate"),
        ("holdout", "0.3"),
        ("holdout", "1"),
    ],
)
def test_an_option_and_its_header_accept_and_refuse_alike(name, value):
    from proxy.core.settings import SettingsError, SettingsResolver, header_name

    try:
        server = ServerSettings(**{name: value}).request_defaults()  # type: ignore[arg-type]
    except ValidationError:
        server = None
    try:
        header = SettingsResolver({}).resolve({header_name(name): value})
    except SettingsError:
        header = None
    if name == "holdout" and header is None and server is not None:  # a header may only repeat the operator's
        header = SettingsResolver({name: value}).resolve({header_name(name): value})
    assert server == header


def test_each_option_help_shows_the_default_its_setting_declares():
    """The help of a per-request default names the built-in value in parentheses: the declared one."""
    from proxy.core.settings import SERVER_DEFAULTS, OffloadSettings

    for name in SERVER_DEFAULTS:
        info = OffloadSettings.model_fields[name]
        if info.default is None:
            continue
        default = info.default
        if isinstance(default, bool):
            shown = "on" if default else "off"
        else:
            shown = f"{default:g}" if isinstance(default, float) else str(default)
        assert f"({shown}" in (info.description or ""), name
