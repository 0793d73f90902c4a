import pytest

from proxy.upstream.base_url import anthropic_base, openai_base


@pytest.mark.parametrize(("url", "expected"), [
    ("https://api.openai.com/v1", "https://api.openai.com/v1"),
    ("https://api.openai.com/v1/", "https://api.openai.com/v1"),
    ("https://api.openai.com", "https://api.openai.com/v1"),
    ("http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1"),
    ("https://openrouter.ai/api/v1", "https://openrouter.ai/api/v1"),  # a gateway's own path is kept
    ("https://generativelanguage.googleapis.com/v1beta/openai/", "https://generativelanguage.googleapis.com/v1beta/openai"),
])
def test_openai_base(url, expected):
    assert openai_base(url) == expected == openai_base(expected)


@pytest.mark.parametrize(("url", "expected"), [
    ("https://api.anthropic.com", "https://api.anthropic.com/v1"),
    ("https://api.anthropic.com/", "https://api.anthropic.com/v1"),
    ("https://api.anthropic.com/v1/", "https://api.anthropic.com/v1"),
    ("https://gateway.example/anthropic", "https://gateway.example/anthropic/v1"),
])
def test_anthropic_base(url, expected):
    assert anthropic_base(url) == expected == anthropic_base(expected)
