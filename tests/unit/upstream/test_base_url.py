"""An upstream base URL (proxy.upstream.base_url): its one form, the problems said of one given
another way, and whether the proxy emulates the providers' context management for it."""

from __future__ import annotations

import pytest

from proxy.upstream.base_url import FORMS, anthropic_base, base_url_problem, emulates, openai_base


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://api.openai.com/v1", "https://api.openai.com/v1"),
        ("https://api.openai.com/v1/", "https://api.openai.com/v1"),
        ("https://api.openai.com", "https://api.openai.com/v1"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1"),
        ("https://openrouter.ai/api/v1", "https://openrouter.ai/api/v1"),  # a gateway's own path is kept
        (
            "https://generativelanguage.googleapis.com/v1beta/openai/",
            "https://generativelanguage.googleapis.com/v1beta/openai",
        ),
    ],
)
def test_openai_base(url, expected):
    assert openai_base(url) == expected == openai_base(expected)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://api.anthropic.com", "https://api.anthropic.com/v1"),
        ("https://api.anthropic.com/", "https://api.anthropic.com/v1"),
        ("https://api.anthropic.com/v1/", "https://api.anthropic.com/v1"),
        ("https://gateway.example/anthropic", "https://gateway.example/anthropic/v1"),
    ],
)
def test_anthropic_base(url, expected):
    assert anthropic_base(url) == expected == anthropic_base(expected)


@pytest.mark.parametrize(
    ("url", "family", "dropped", "given"),
    [
        ("https://api.openai.com/v1/chat/completions", "openai", "/chat/completions", "https://api.openai.com/v1"),
        ("http://127.0.0.1:9100/v1/chat/completions/", "openai", "/chat/completions", "http://127.0.0.1:9100/v1"),
        ("https://api.openai.com/v1/Chat/Completions", "openai", "/Chat/Completions", "https://api.openai.com/v1"),
        ("https://api.openai.com/v1/completions", "openai", "/completions", "https://api.openai.com/v1"),
        ("https://api.openai.com/v1/responses", "openai", "/responses", "https://api.openai.com/v1"),
        ("https://api.openai.com/v1/responses/compact", "openai", "/responses/compact", "https://api.openai.com/v1"),
        (
            "https://openrouter.ai/api/v1/chat/completions",
            "openai",
            "/chat/completions",
            "https://openrouter.ai/api/v1",
        ),
        (
            "https://gw.example/v1/chat/completions?api-version=1",
            "openai",
            "/chat/completions",
            "https://gw.example/v1",
        ),
        ("https://api.anthropic.com/v1/messages", "anthropic", "/v1/messages", "https://api.anthropic.com"),
        ("https://gw.example/anthropic/messages", "anthropic", "/messages", "https://gw.example/anthropic"),
        (
            "https://api.anthropic.com/v1/messages/count_tokens",
            "anthropic",
            "/v1/messages/count_tokens",
            "https://api.anthropic.com",
        ),
    ],
)
def test_an_endpoints_url_is_refused_saying_what_to_drop_and_give(url, family, dropped, given):
    problem = base_url_problem(url, family)
    assert problem == (
        f"{url!r} is an endpoint, not the API's base URL ({FORMS[family]}): drop {dropped!r}, i.e. give {given}"
    )
    assert base_url_problem(given, family) is None  # what it says to give will do


@pytest.mark.parametrize(
    ("url", "family", "given"),
    [
        ("api.openai.com/v1", "openai", "https://api.openai.com/v1"),
        ("localhost:8000/v1", "openai", "http://localhost:8000/v1"),
        ("127.0.0.1:9100/v1", "openai", "http://127.0.0.1:9100/v1"),
        ("api.openai.com/v1/chat/completions", "openai", "https://api.openai.com/v1"),  # both said at once
        ("api.anthropic.com", "anthropic", "https://api.anthropic.com"),
    ],
)
def test_a_missing_scheme_is_named_with_the_url_to_give(url, family, given):
    assert base_url_problem(url, family) == (
        f"{url!r} has no scheme: give {given} (the API's base URL, with http:// or https://)"
    )


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://x/v1", "is not an http:// or https:// URL"),
        ("https://", "has no host"),
        ("https://api.openai.com/ v1", "is not a URL"),
        ("", "is not a URL"),
    ],
)
def test_other_bad_urls_say_what_is_wrong_with_an_example(url, says):
    problem = base_url_problem(url, "openai")
    assert problem is not None and says in problem and "https://api.openai.com/v1" in problem


@pytest.mark.parametrize(
    "url",
    [
        "https://api.openai.com/v1",
        "https://api.openai.com",
        "http://127.0.0.1:8000/v1/",
        "https://openrouter.ai/api/v1",
        "https://generativelanguage.googleapis.com/v1beta/openai",
        "https://gw.example/completions-api/v1",
    ],
)
def test_base_urls_will_do(url):
    assert base_url_problem(url, "openai") is None
    assert base_url_problem("https://api.anthropic.com", "anthropic") is None
    assert base_url_problem("https://api.anthropic.com/v1", "anthropic") is None


@pytest.mark.parametrize(
    "setting, base, expected",
    [
        ("auto", "https://api.openai.com/v1", False),
        ("auto", "https://api.anthropic.com/v1", False),
        ("auto", "https://API.OpenAI.com./v1", False),
        ("auto", "http://127.0.0.1:8000/v1", True),
        ("auto", "https://api.openai.com.evil.example/v1", True),
        ("auto", "https://openrouter.ai/api/v1", True),
        ("relay", "http://127.0.0.1:8000/v1", False),
        ("emulate", "https://api.openai.com/v1", True),
    ],
)
def test_who_applies_context_management(setting, base, expected):
    assert emulates(setting, base) is expected
