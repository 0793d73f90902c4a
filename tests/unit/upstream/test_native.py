import pytest

from proxy.upstream.native import emulates


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
