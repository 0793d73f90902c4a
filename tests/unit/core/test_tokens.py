"""Token counting: encodings by model, caching, offline fallback."""

from __future__ import annotations

from proxy.core import tokens
from proxy.core.tokens import EstimateEncoder, TokenCounter, counter_for_model, encoding_name_for_model


def test_encoding_by_model_family():
    for model in ("gpt-4o-mini", "gpt-4.1", "o3-mini", "gpt-5", "some-unknown-model", None):
        assert encoding_name_for_model(model) == "o200k_base"
    for model in ("gpt-4", "gpt-4-turbo", "gpt-3.5-turbo"):
        assert encoding_name_for_model(model) == "cl100k_base"


def test_counts_messages_tool_calls_and_parts():
    c = counter_for_model("gpt-4o")
    plain = c.message({"role": "user", "content": "hello world"})
    assert plain > c.text("hello world")
    with_call = c.message({"role": "assistant", "content": None, "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls -la /tmp"}'}}]})
    assert with_call > 10
    parts = c.message({"role": "user", "content": [{"type": "text", "text": "hello world"},
                                                   {"type": "image_url", "image_url": {"url": "x"}}]})
    assert parts == plain + 85
    assert c.tools([{"type": "function", "function": {"name": "f", "parameters": {}}}]) > 0


def test_repeated_text_is_served_from_the_cache():
    c = counter_for_model("gpt-4o")
    text = "unique text for the cache test " * 100
    c.text(text)
    hits = tokens._cache.hits
    assert c.text(text) == c.text(text)
    assert tokens._cache.hits == hits + 2


def test_unloadable_encoding_falls_back_to_an_estimate(monkeypatch):
    tokens.load_encoder.cache_clear()
    try:
        counter = TokenCounter("no_such_encoding_base")
        assert isinstance(counter.encoder, EstimateEncoder)
        assert counter.text("x" * 400) == 100
    finally:
        tokens.load_encoder.cache_clear()
