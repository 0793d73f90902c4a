"""The server's settings refuse an upstream that is not an API's base URL, in one message that
says what to give instead (not pydantic's pattern text)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from proxy.config import ServerSettings
from proxy.server_options import settings_error


def refusal(**settings: str) -> str:
    with pytest.raises(ValidationError) as info:
        ServerSettings(**settings)  # type: ignore[arg-type]
    return settings_error(info.value)


def test_an_endpoint_as_the_upstream_is_refused_naming_what_to_drop():
    assert refusal(upstream="http://127.0.0.1:9100/v1/chat/completions") == (
        "offload-proxy: invalid --upstream (env OFFLOAD_UPSTREAM): 'http://127.0.0.1:9100/v1/chat/completions' is an "
        "endpoint, not the API's base URL (as an OpenAI SDK's base_url is written): drop '/chat/completions', i.e. "
        "give http://127.0.0.1:9100/v1")
    assert refusal(anthropic_upstream="https://api.anthropic.com/v1/messages") == (
        "offload-proxy: invalid --anthropic-upstream (env OFFLOAD_ANTHROPIC_UPSTREAM): "
        "'https://api.anthropic.com/v1/messages' is an endpoint, not the API's base URL (as ANTHROPIC_BASE_URL is "
        "written): drop '/v1/messages', i.e. give https://api.anthropic.com")


@pytest.mark.parametrize(("field", "value", "given"), [
    ("upstream", "api.openai.com/v1", "https://api.openai.com/v1"),
    ("upstream", "localhost:8000/v1", "http://localhost:8000/v1"),
    ("anthropic_upstream", "api.anthropic.com", "https://api.anthropic.com"),
])
def test_a_missing_scheme_names_the_expected_form_not_a_pattern(field, value, given):
    message = refusal(**{field: value})
    assert f"{value!r} has no scheme: give {given}" in message
    assert "pattern" not in message and "String should match" not in message and "\n" not in message


def test_the_environment_is_checked_alike(monkeypatch):
    monkeypatch.setenv("OFFLOAD_UPSTREAM", "https://api.openai.com/v1/responses")
    assert "drop '/responses', i.e. give https://api.openai.com/v1" in refusal()


def test_base_urls_are_kept_as_written():
    settings = ServerSettings(upstream="https://openrouter.ai/api/v1/", anthropic_upstream="https://api.anthropic.com/v1")
    assert settings.upstream == "https://openrouter.ai/api/v1/" and settings.upstream_base == "https://openrouter.ai/api/v1"
    assert settings.anthropic_base == "https://api.anthropic.com/v1"
